package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// slowGitHub answers after 100 ms of fake time, so concurrent requests
// overlap.
func slowGitHub() sim.APIConfig {
	api := githubAPI(1000, time.Hour, simTokens...)
	api.Latency = 100 * time.Millisecond
	return api
}

type answer struct {
	status    int
	body      string
	coalesced string
}

// concurrently sends the requests at once and returns their answers in
// order.
func (e *env) concurrently(t *testing.T, reqs []*http.Request) []answer {
	t.Helper()
	out := make([]answer, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() {
			resp, err := e.client.Do(req)
			if err != nil {
				out[i].status = -1
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out[i] = answer{resp.StatusCode, string(b), resp.Header.Get(HeaderCoalesced)}
		})
	}
	wg.Wait()
	return out
}

func getRequest(path string, header ...string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, gwBase+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

func upstreamRequests(srv *sim.Server) int64 { return srv.Stats().Total.Requests }

func TestIdenticalGETsShareOneUpstreamRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{slowGitHub()}, map[string][]string{"github": {"tok-alice-1"}}, nil)
		e.get(t, "/github/user") // validates the token first
		before := upstreamRequests(e.srv)

		var reqs []*http.Request
		for range 10 {
			reqs = append(reqs, getRequest("/github/repos/o/r", "Accept", "application/vnd.github+json", "User-Agent", "client"))
		}
		got := e.concurrently(t, reqs)
		if n := upstreamRequests(e.srv) - before; n != 1 {
			t.Fatalf("%d upstream requests for 10 identical GETs, want 1", n)
		}
		shared := 0
		for i, a := range got {
			if a.status != http.StatusOK || a.body != got[0].body || !strings.Contains(a.body, `"full_name":"o/r"`) {
				t.Fatalf("answer %d: %d %q", i, a.status, a.body)
			}
			if a.coalesced == "shared" {
				shared++
			}
		}
		if shared != 9 {
			t.Fatalf("%d answers marked shared, want 9", shared)
		}
		var coalesced int64
		for _, m := range e.gw.History() {
			coalesced += m.Coalesced
		}
		if coalesced != 9 {
			t.Fatalf("history counts %d coalesced, want 9", coalesced)
		}
	})
}

// Requests the upstream could tell apart are not coalesced: another
// Accept, another query.
func TestDifferentGETsAreNotCoalesced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{slowGitHub()}, map[string][]string{"github": {"tok-alice-1"}}, nil)
		e.get(t, "/github/user")
		before := upstreamRequests(e.srv)
		got := e.concurrently(t, []*http.Request{
			getRequest("/github/repos/o/r/readme", "Accept", "application/vnd.github+json"),
			getRequest("/github/repos/o/r/readme", "Accept", "application/vnd.github+json", "User-Agent", "another"),
			getRequest("/github/repos/o/r/readme", "Accept", "application/vnd.github.raw"),
			getRequest("/github/repos/o/r/readme?ref=main", "Accept", "application/vnd.github+json"),
		})
		if n := upstreamRequests(e.srv) - before; n != 3 {
			t.Fatalf("%d upstream requests, want 3 (User-Agent alone does not tell requests apart)", n)
		}
		if got[2].body == got[0].body || got[0].body != got[1].body {
			t.Fatal("raw and JSON readme answers mixed up")
		}
	})
}

// A leader whose client leaves does not take its followers' answer with
// it; when every client leaves, the upstream request is cancelled.
func TestLeaderLeavingKeepsFollowersAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{slowGitHub()}, map[string][]string{"github": {"tok-alice-1"}}, nil)
		e.get(t, "/github/user")
		ctx, cancel := context.WithCancel(t.Context())
		leader := getRequest("/github/repos/o/r").WithContext(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := e.client.Do(leader); err == nil {
				resp.Body.Close()
			}
		}()
		synctest.Wait() // the leader's request is upstream
		var followers []*http.Request
		for range 3 {
			followers = append(followers, getRequest("/github/repos/o/r"))
		}
		results := make(chan []answer)
		go func() { results <- e.concurrently(t, followers) }()
		synctest.Wait()
		cancel()
		for i, a := range <-results {
			if a.status != http.StatusOK || a.coalesced != "shared" {
				t.Fatalf("follower %d: %+v", i, a)
			}
		}
		<-done
	})
}

// An answer larger than the coalescing limit streams to one client; the
// others send their own requests and every client gets the whole body.
func TestLargeAnswersAreNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{slowGitHub()}, map[string][]string{"github": {"tok-alice-1"}},
			func(o *Options) { o.CoalesceLimit = 64 })
		e.get(t, "/github/user")
		before := upstreamRequests(e.srv)
		var reqs []*http.Request
		for range 4 {
			// no-cache: the answer goes to each client from upstream
			// (a cache would collapse them, see transport).
			reqs = append(reqs, getRequest("/github/repos/o/r", "Cache-Control", "no-cache"))
		}
		got := e.concurrently(t, reqs)
		for i, a := range got {
			if a.status != http.StatusOK || a.body != got[0].body || len(a.body) <= 64 || a.coalesced != "" {
				t.Fatalf("answer %d: %d, %d bytes, coalesced %q", i, a.status, len(a.body), a.coalesced)
			}
		}
		if n := upstreamRequests(e.srv) - before; n < 2 {
			t.Fatalf("%d upstream requests: the large answer was shared", n)
		}
	})
}
