package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// The gateway workload: tokens of distinct users, a batch of
// distinct GETs that fills their windows exactly, sent by a plain client
// over 8 connections to `serve` (Serve with its default refresh). Nothing
// goes out at start, so the batch charges exactly its URLs and ends within
// 5 % of the physical limit; with one of the tokens rejected by the
// server, it is set aside at its first 401 and the others' quota still
// carries the batch at that pace.
func TestServeSpendsNothingAtStart(t *testing.T) {
	const (
		limit   = 40
		window  = time.Minute
		latency = 50 * time.Millisecond
		windows = 3
		workers = 8
	)
	cases := []struct {
		name    string
		tokens  []string
		buckets int
	}{
		{"three users", []string{"tok-alice-1", "tok-bob-1", "tok-carol-1"}, 3},
		{"one token rejected", []string{"tok-alice-1", "tok-revoked-9", "tok-carol-1"}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := githubAPI(limit, window, sim.TokenConfig{Token: "tok-alice-1", Owner: "alice"},
					sim.TokenConfig{Token: "tok-bob-1", Owner: "bob"}, sim.TokenConfig{Token: "tok-carol-1", Owner: "carol"})
				api.Latency = latency
				e := newEnv(t, []sim.APIConfig{api}, map[string][]string{"github": c.tokens}, func(o *Options) {
					o.Client.MaxWait = 2 * window
					o.RefreshEvery = 15 * time.Minute // serve's default
				})
				ln := newPipeListener()
				ln.addr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
				ctx, stop := context.WithCancel(t.Context())
				served := make(chan error, 1)
				go func() { served <- e.gw.Serve(ctx, ln) }()
				synctest.Wait()
				if st := e.srv.Stats().Total; st.Requests != 0 {
					t.Fatalf("%d requests went out at start, want none", st.Requests)
				}

				client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: workers,
					DialContext: func(context.Context, string, string) (net.Conn, error) { return ln.dial(), nil }}}
				jobs := c.buckets * limit * windows
				var next atomic.Int64
				var failed atomic.Int64
				var wg sync.WaitGroup
				start := time.Now()
				for range workers {
					wg.Go(func() {
						for {
							i := next.Add(1) - 1
							if i >= int64(jobs) {
								return
							}
							resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:8080/github/repos/o/r%d", i))
							if err != nil {
								failed.Add(1)
								continue
							}
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							if resp.StatusCode != http.StatusOK {
								failed.Add(1)
							}
						}
					})
				}
				wg.Wait()
				took := time.Since(start)
				rounds := (c.buckets*limit + workers - 1) / workers
				ideal := (windows-1)*window + time.Duration(rounds)*latency
				st := e.srv.Stats().Total
				t.Logf("%d GETs in %v (%.3f × ideal %v); server: %d requests, %d charged, %d unauthorized",
					jobs, took, took.Seconds()/ideal.Seconds(), ideal, st.Requests, st.Charged, st.Unauthorized)
				if failed.Load() != 0 {
					t.Errorf("%d requests failed", failed.Load())
				}
				if st.Charged != int64(jobs) || st.Violations != 0 {
					t.Errorf("charged %d for %d URLs, %d violations", st.Charged, jobs, st.Violations)
				}
				if r := took.Seconds() / ideal.Seconds(); r > 1.05 {
					t.Errorf("the batch took %v, %.3f × the ideal %v; want within 5 %%", took, r, ideal)
				}
				client.CloseIdleConnections()
				stop()
				if err := <-served; err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
