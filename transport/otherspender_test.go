package transport

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
)

// TestAnotherClientSpendsTheSameBucket: a second client, which the
// transport does not see, spends the same user's bucket at the start of
// every window (another token of the same GitHub user). The transport
// keeps its reserve, is refused at most once a window, resumes as soon as
// each window refills, and finishes within 1.1 × the ideal of what the
// other client leaves.
func TestAnotherClientSpendsTheSameBucket(t *testing.T) {
	const (
		limit   = 200
		theirs  = 50 // the other client's spending per window
		reserve = 20
		jobs    = 600
		workers = 8
		window  = 10 * time.Minute
		latency = 50 * time.Millisecond
	)
	synctest.Test(t, func(t *testing.T) {
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: limit, Window: window, Latency: latency,
			Secondary: &sim.SecondaryConfig{},
			Tokens:    []sim.TokenConfig{{Token: "tok-ours-0001", Owner: "alice"}, {Token: "tok-theirs-0002", Owner: "alice"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := provider.New("github", provider.GitHub, "http://api.test")
		p.Secondary.EndpointPointsPerMinute = 0
		reg := provider.NewRegistry()
		_ = reg.Add(p)
		var (
			mu           sync.Mutex
			minRemaining int64 = limit
			refusals     int
			resets       = map[int64]bool{} // the windows our answers named
			firstAfter   = map[int64]time.Duration{}
		)
		start := time.Now()
		base := rtFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := handlerRT{srv}.RoundTrip(r)
			if err != nil {
				return resp, err
			}
			rem, _ := strconv.ParseInt(resp.Header.Get("X-Ratelimit-Remaining"), 10, 64)
			reset, _ := strconv.ParseInt(resp.Header.Get("X-Ratelimit-Reset"), 10, 64)
			mu.Lock()
			defer mu.Unlock()
			if resp.StatusCode != http.StatusOK {
				refusals++
				return resp, nil
			}
			minRemaining = min(minRemaining, rem)
			if !resets[reset] {
				resets[reset] = true
				firstAfter[reset] = time.Since(start)
			}
			return resp, nil
		})
		tr, err := New(Options{Providers: reg, Base: base, SkipValidation: true, DisableCache: true, MaxWait: 24 * time.Hour,
			Policy: quota.Policy{Kind: quota.Greedy, Reserve: reserve},
			Pools:  map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-ours-0001", "test"))}})
		if err != nil {
			t.Fatal(err)
		}
		// The other client: as each window opens (the first request
		// after GitHub's reset opens it), 50 requests.
		done := make(chan struct{})
		var other sync.WaitGroup
		other.Go(func() {
			for w := 0; ; w++ {
				var reset int64
				for i := range theirs {
					req := httpGet(fmt.Sprintf("/repos/them/r%d-%d", w, i))
					req.Header.Set("Authorization", "token tok-theirs-0002")
					resp, err := handlerRT{srv}.RoundTrip(req)
					if err == nil {
						reset, _ = strconv.ParseInt(resp.Header.Get("X-Ratelimit-Reset"), 10, 64)
						resp.Body.Close()
					}
				}
				select {
				case <-done:
					return
				case <-time.After(time.Until(time.Unix(reset, 0)) + 10*time.Millisecond):
				}
			}
		})
		time.Sleep(time.Second) // the other client starts the window
		var wg sync.WaitGroup
		ch := make(chan int)
		var failed error
		for range workers {
			wg.Go(func() {
				for i := range ch {
					resp, err := tr.RoundTrip(httpGet(fmt.Sprintf("/repos/o/r%d", i)))
					if err != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		for i := range jobs {
			ch <- i
		}
		close(ch)
		wg.Wait()
		makespan := time.Since(start)
		close(done)
		other.Wait()
		if failed != nil {
			t.Fatal(failed)
		}
		// What is left to us per window: the limit less theirs and the
		// reserve. The ideal ends as the last window opens.
		perWindow := limit - theirs - reserve
		windows := (jobs + perWindow - 1) / perWindow
		ideal := time.Duration(windows-1) * window
		t.Logf("makespan %v, ideal %v (%.3f), %d refusals, min remaining %d, %d windows", makespan, ideal, makespan.Seconds()/ideal.Seconds(), refusals, minRemaining, len(resets))
		if refusals > windows {
			t.Errorf("%d refusals in %d windows: more than one a window", refusals, windows)
		}
		if minRemaining < reserve-workers {
			t.Errorf("the server's remaining fell to %d: the reserve of %d was not kept", minRemaining, reserve)
		}
		if makespan > time.Duration(1.1*float64(ideal)) {
			t.Errorf("makespan %v, want at most 1.1 × %v: the token idled after a reset", makespan, ideal)
		}
	})
}

func httpGet(path string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, "http://api.test"+path, nil)
	return req
}
