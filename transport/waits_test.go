package transport

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/sim"
)

// slowServer is a simulated GitHub answering after latency, with the
// given tokens (token → owner), in the calling goroutine.
func slowServer(t *testing.T, latency time.Duration, tokens map[string]string) *sim.Server {
	t.Helper()
	var tc []sim.TokenConfig
	for tok, owner := range tokens {
		tc = append(tc, sim.TokenConfig{Token: tok, Owner: owner})
	}
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Latency: latency, Tokens: tc}}})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// outcome of one concurrent request: when it returned and with what.
type waitOutcome struct {
	after time.Duration
	err   error
	at    time.Time
}

// concurrently sends n GETs at once and returns their outcomes.
func concurrently(tr *Transport, n int) []waitOutcome {
	out := make([]waitOutcome, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://api.test/repos/o/r%d", i), nil)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			out[i] = waitOutcome{after: time.Since(start), err: err, at: time.Now()}
		})
	}
	wg.Wait()
	return out
}

// Requests waiting for the pool's learning turn are bounded by MaxWait
// like any wait: with a 100 ms max wait and a server taking 2 s, they come
// back after 100 ms with a *WaitError, not after the turns of all before
// them.
func TestLearningTurnHonoursMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := slowServer(t, 2*time.Second, map[string]string{"tok-a-0001": "alice", "tok-b-0002": "bob"})
		tr := handlerTransport(t, srv, func(o *Options) {
			o.SkipValidation = true
			o.DisableCache = true
			o.MaxWait = 100 * time.Millisecond
			o.Pools = map[string]*creds.Pool{"github": creds.NewPool("github",
				creds.NewToken("github", 1, "tok-a-0001", "test"), creds.NewToken("github", 2, "tok-b-0002", "test"))}
		})
		var waited int
		for i, o := range concurrently(tr, 5) {
			var we *WaitError
			switch {
			case o.err == nil:
			case errors.As(o.err, &we):
				waited++
				if o.after > 150*time.Millisecond {
					t.Errorf("request %d waited %v for the learning turn, beyond the max wait of 100ms", i, o.after)
				}
				if !we.RetryAt().After(o.at) {
					t.Errorf("request %d: RetryAt %v is not after its return %v", i, we.RetryAt(), o.at)
				}
			default:
				t.Errorf("request %d: %v", i, o.err)
			}
		}
		if waited != 4 {
			t.Fatalf("%d requests came back with a WaitError, want the 4 behind the turn", waited)
		}
	})
}

// A wait on the concurrency cap carries, in its WaitError, when a slot is
// expected back (a round trip of the server's), not a 20 ms poll.
func TestCapWaitReportsWhenASlotReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := slowServer(t, time.Second, map[string]string{"tok-test-0001": "alice"})
		tr := handlerTransport(t, srv, func(o *Options) {
			o.SkipValidation = true
			o.DisableCache = true
			o.MaxWait = 100 * time.Millisecond
			// Settings are fixed per provider when its lane is made.
			o.Providers.Lookup("github").Secondary = provider.Secondary{MaxConcurrency: 2}
		})
		if o := concurrently(tr, 1); o[0].err != nil { // learns the bucket and the round trip
			t.Fatal(o[0].err)
		}
		var waited int
		for i, o := range concurrently(tr, 4) {
			var we *WaitError
			if o.err == nil {
				continue
			}
			if !errors.As(o.err, &we) {
				t.Fatalf("request %d: %v", i, o.err)
			}
			waited++
			if d := we.RetryAt().Sub(o.at); d < 500*time.Millisecond || d > 1500*time.Millisecond {
				t.Errorf("request %d: RetryAt is %v after it returned, want about the server's round trip (1s)", i, d)
			}
			if o.after < 100*time.Millisecond {
				t.Errorf("request %d gave up after %v, before its max wait", i, o.after)
			}
		}
		if waited != 2 {
			t.Fatalf("%d requests waited on a cap of 2 with 4 sent, want 2", waited)
		}
	})
}

// sleepyRT answers every request after a fixed latency, counting the most
// in flight at once.
type sleepyRT struct {
	latency        time.Duration
	mu             sync.Mutex
	inFlight, peak int
}

func (s *sleepyRT) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.inFlight++
	s.peak = max(s.peak, s.inFlight)
	s.mu.Unlock()
	time.Sleep(s.latency)
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// The answer to a bucket's first probe frees every request waiting on it,
// not one: all go in the next round trip, not one a round trip.
func TestFirstProbeAnswerFreesEveryWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &sleepyRT{latency: 300 * time.Millisecond}
		tr, err := New(Options{NoAutoProviders: true, Base: base, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		out := concurrentlyAt(tr, "http://quiet.example.test", 10)
		for i, o := range out {
			if o.err != nil {
				t.Fatalf("request %d: %v", i, o.err)
			}
		}
		if base.peak < 9 {
			t.Errorf("at most %d in flight after the probe, want the other 9 together", base.peak)
		}
		if last := out[len(out)-1].after; last > 700*time.Millisecond {
			t.Errorf("the last of 10 came back after %v, want two round trips (600ms)", last)
		}
	})
}

// concurrentlyAt sends n GETs to distinct paths of origin at once.
func concurrentlyAt(tr *Transport, origin string, n int) []waitOutcome {
	out := make([]waitOutcome, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/r%d", origin, i), nil)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			out[i] = waitOutcome{after: time.Since(start), err: err, at: time.Now()}
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b waitOutcome) int { return cmp.Compare(a.after, b.after) })
	return out
}
