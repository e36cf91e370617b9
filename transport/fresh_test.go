package transport

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// getWith sends a GET of path with the header fields kv (name, value...).
func (s *simSetup) getWith(t *testing.T, path string, kv ...string) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.base+path, nil)
	for i := 0; i < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	return s.t.RoundTrip(req)
}

// A fresh answer is served without a request, with its Age; once stale it
// is revalidated, and the 304 makes it fresh again; a caller's no-cache
// always asks the server.
func TestFreshAnswersAreServedWithoutARequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Hour,
			Tokens: []sim.TokenConfig{{Token: "tok-a", Owner: "alice"}}}, []string{"tok-a"}, nil)
		requests := func() int64 { return s.srv.Stats().Total.Requests }
		first := drain(s.get(t, "/repos/o/r"))
		sent := requests()

		time.Sleep(10 * time.Second)
		resp := s.get(t, "/repos/o/r")
		if got := drain(resp); got != first || resp.Header.Get(HeaderCache) != "fresh" || resp.Header.Get("Age") != "10" {
			t.Fatalf("repeat at 10 s: %s, Age %q, same body %v", resp.Header.Get(HeaderCache), resp.Header.Get("Age"), got == first)
		}
		if requests() != sent {
			t.Fatalf("a fresh answer sent a request")
		}
		if n := s.events.count(EventServedFromCache); n != 1 {
			t.Fatalf("%d served-from-cache events, want 1", n)
		}
		// Its rate-limit fields say what the pool can do now, not what
		// they said when it was stored.
		other := s.get(t, "/repos/o/other")
		drain(other)
		resp = s.get(t, "/repos/o/r")
		drain(resp)
		if got, want := resp.Header.Get("X-Ratelimit-Remaining"), other.Header.Get("X-Ratelimit-Remaining"); resp.Header.Get(HeaderCache) != "fresh" || got != want {
			t.Fatalf("a fresh answer's remaining %q, the latest answer's %q", got, want)
		}

		// no-store keeps the cache out of it: a full answer, not stored.
		resp, err := s.getWith(t, "/repos/o/r", "Cache-Control", "no-store")
		if err != nil || resp.Header.Get(HeaderCache) != "" {
			t.Fatalf("no-store: %v %q, want the server's answer unmarked", err, resp.Header.Get(HeaderCache))
		}
		drain(resp)
		resp, err = s.getWith(t, "/repos/o/r", "Cache-Control", "no-cache")
		if err != nil || resp.Header.Get(HeaderCache) != "revalidated" {
			t.Fatalf("no-cache: %v %v", err, resp.Header.Get(HeaderCache))
		}
		drain(resp)
		resp, _ = s.getWith(t, "/repos/o/r", "Cache-Control", "max-age=5")
		if resp.Header.Get(HeaderCache) != "fresh" {
			t.Fatalf("max-age=5 just after a revalidation: %q", resp.Header.Get(HeaderCache))
		}
		drain(resp)

		time.Sleep(61 * time.Second)
		resp = s.get(t, "/repos/o/r")
		if resp.Header.Get(HeaderCache) != "revalidated" {
			t.Fatalf("stale answer: %q, want revalidated", resp.Header.Get(HeaderCache))
		}
		drain(resp)
		time.Sleep(5 * time.Second)
		resp = s.get(t, "/repos/o/r")
		if resp.Header.Get(HeaderCache) != "fresh" || resp.Header.Get("Age") != "5" {
			t.Fatalf("after the 304: %q, Age %q; want fresh, 5", resp.Header.Get(HeaderCache), resp.Header.Get("Age"))
		}
		drain(resp)
		b, _ := s.srv.Stats().BucketFor("github", "alice", "core")
		if b.Charged != 3 || b.NotModified != 2 {
			t.Fatalf("charged %d with %d 304s, want 3 and 2", b.Charged, b.NotModified)
		}
	})
}

// At an empty bucket a stale repeat waits like any request, unless its
// caller accepts staleness (max-stale): then the stale answer is served
// at once. With quota left, max-stale still revalidates.
func TestMaxStaleServesStaleRatherThanWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 2, Window: time.Hour,
			Tokens: []sim.TokenConfig{{Token: "tok-a", Owner: "alice"}}}, []string{"tok-a"},
			func(o *Options) { o.MaxWait = time.Minute })
		drain(s.get(t, "/repos/o/a"))
		time.Sleep(61 * time.Second)
		resp, err := s.getWith(t, "/repos/o/a", "Cache-Control", "max-stale=600")
		if err != nil || resp.Header.Get(HeaderCache) != "revalidated" {
			t.Fatalf("max-stale with quota left: %v %q, want revalidated", err, resp.Header.Get(HeaderCache))
		}
		drain(resp)
		drain(s.get(t, "/repos/o/b")) // the bucket's last request
		time.Sleep(61 * time.Second)

		resp, err = s.getWith(t, "/repos/o/a", "Cache-Control", "max-stale=600")
		if err != nil || resp.Header.Get(HeaderCache) != "stale" || resp.Header.Get("Age") != "61" {
			t.Fatalf("max-stale at an empty bucket: %v, %v Age %v; want the stale answer", err, resp.Header.Get(HeaderCache), resp.Header.Get("Age"))
		}
		drain(resp)
		if _, err := s.getWith(t, "/repos/o/a", "Cache-Control", "max-stale=0"); !errors.As(err, new(*WaitError)) {
			t.Fatalf("max-stale=0 for an answer 1 s stale: %v, want a WaitError", err)
		}
		if _, err := s.getWith(t, "/repos/o/a"); !errors.As(err, new(*WaitError)) {
			t.Fatalf("a stale repeat without max-stale: %v, want a WaitError", err)
		}
		if v := s.srv.Stats().Total.PrimaryViolations; v != 0 {
			t.Fatalf("%d violations", v)
		}
	})
}

// A private answer is served without a request only to requests that can
// go as its owner: a caller's own token of another owner asks the server.
func TestPrivateFreshAnswerStaysWithItsOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Hour,
			Tokens: []sim.TokenConfig{{Token: "tok-a", Owner: "alice"}, {Token: "tok-b", Owner: "bob"}}}, []string{"tok-a"},
			func(o *Options) { o.SkipValidation = false })
		drain(s.get(t, "/repos/o/r"))
		resp, err := s.getWith(t, "/repos/o/r", "Authorization", "token tok-b")
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get(HeaderCache) == "fresh" {
			t.Fatalf("bob's token got alice's private answer from the cache")
		}
		drain(resp)
		resp = s.get(t, "/repos/o/r")
		if resp.Header.Get(HeaderCache) != "fresh" {
			t.Fatalf("alice's repeat: %q, want fresh", resp.Header.Get(HeaderCache))
		}
		drain(resp)
	})
}

// Identical GETs in flight are collapsed: followers wait for the leader's
// answer and are served from the cache, but never longer than their own
// max wait while the leader waits for quota.
func TestIdenticalGetsCollapse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 1, Window: time.Hour, Latency: 50 * time.Millisecond,
			Tokens: []sim.TokenConfig{{Token: "tok-a", Owner: "alice"}}}, []string{"tok-a"},
			func(o *Options) { o.MaxWait = 2 * time.Hour })
		results := make(chan string, 4)
		for range 4 {
			go func() {
				resp, err := s.getWith(t, "/repos/o/a")
				if err != nil {
					results <- err.Error()
					return
				}
				drain(resp)
				results <- resp.Header.Get(HeaderCache)
			}()
		}
		got := map[string]int{}
		for range 4 {
			got[<-results]++
		}
		if got["miss"] != 1 || got["fresh"] != 3 {
			t.Fatalf("answers %v, want one miss and three fresh", got)
		}
		if n := s.srv.Stats().Total.Requests; n != 1 {
			t.Fatalf("%d requests reached the server, want 1", n)
		}

		// The bucket is empty for an hour: the leader waits for quota,
		// a follower with a max wait of a minute gives up after it.
		ctx, cancel := context.WithCancel(t.Context())
		leader := make(chan struct{})
		go func() {
			defer close(leader)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/repos/o/b", nil)
			if resp, err := s.t.RoundTrip(req); err == nil {
				drain(resp)
			}
		}()
		synctest.Wait()
		start := time.Now()
		req, _ := http.NewRequestWithContext(WithMaxWait(t.Context(), time.Minute), http.MethodGet, s.base+"/repos/o/b", nil)
		_, err := s.t.RoundTrip(req)
		if !errors.As(err, new(*WaitError)) || time.Since(start) > time.Minute {
			t.Fatalf("follower: %v after %v, want a WaitError within its minute", err, time.Since(start))
		}
		cancel()
		<-leader
	})
}
