package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/wiring"
)

// quotaReturns is when the simulator's buckets of the owners next reset
// (the earliest of them), and whether every one of them was empty at now.
// The earliest reset is when quota returns: a bucket with quota left at
// now may have all of it spent by requests in flight, but none has more
// than its limit before its reset.
func quotaReturns(srv *sim.Server, owners []string, now time.Time) (at time.Time, exhausted bool) {
	st := srv.Stats()
	exhausted = true
	for _, o := range owners {
		b, ok := st.BucketFor("github", o, "core")
		if !ok || !b.Reset.After(now) {
			exhausted = false
			continue
		}
		if b.Remaining > 0 {
			exhausted = false
		}
		if at.IsZero() || b.Reset.Before(at) {
			at = b.Reset
		}
	}
	return at, exhausted
}

// Eight clients push 200 requests through a gateway whose two tokens allow
// 80 a minute. None is refused upstream for primary limits; every request
// is answered, or refused with 429 and a Retry-After that is neither
// early (coming back then finds quota) nor late (by more than the
// rounding to whole seconds); after it, the request goes through.
func TestParallelClientsPastTheQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := githubAPI(40, time.Minute, simTokens...)
		e := newEnv(t, []sim.APIConfig{api}, map[string][]string{"github": {"tok-alice-1", "tok-bob-1"}},
			func(o *Options) { o.Client.MaxWait = 5 * time.Second })
		owners := []string{"alice", "bob"}
		const clients, each = 8, 25
		var refused, checkedLow atomic.Int64
		var mu sync.Mutex
		var failures []string
		fail := func(format string, args ...any) {
			mu.Lock()
			failures = append(failures, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				for i := 0; i < each; {
					resp, body := e.get(t, fmt.Sprintf("/github/repos/client%d/repo%d", c, i))
					now := time.Now()
					switch resp.StatusCode {
					case http.StatusOK:
						i++
						continue
					case http.StatusTooManyRequests:
					default:
						fail("client %d request %d: status %d %s", c, i, resp.StatusCode, body)
						return
					}
					refused.Add(1)
					secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
					if err != nil || secs < 1 {
						fail("Retry-After %q", resp.Header.Get("Retry-After"))
						return
					}
					if resp.Header.Get("X-Ratelimit-Remaining") != "0" {
						fail("429 with x-ratelimit-remaining %q", resp.Header.Get("X-Ratelimit-Remaining"))
					}
					retry := now.Add(time.Duration(secs) * time.Second)
					reset, _ := strconv.ParseInt(resp.Header.Get("X-Ratelimit-Reset"), 10, 64)
					if reset != retry.Unix() && reset != retry.Unix()-1 && reset != retry.Unix()+1 {
						fail("x-ratelimit-reset %d, Retry-After says %d", reset, retry.Unix())
					}
					back, exhausted := quotaReturns(e.srv, owners, now)
					if exhausted {
						checkedLow.Add(1)
						if retry.Before(back) {
							fail("Retry-After %ds at %s is early: quota returns at %s", secs, now.Format(time.TimeOnly), back.Format(time.TimeOnly))
						}
					}
					if late := retry.Sub(back); !back.IsZero() && late > time.Second+500*time.Millisecond {
						fail("Retry-After %ds at %s is %s late: quota returns at %s", secs, now.Format(time.TimeOnly), late, back.Format(time.TimeOnly))
					}
					errorOf(t, body)
					time.Sleep(retry.Sub(now))
				}
			})
		}
		wg.Wait()
		for _, f := range failures {
			t.Error(f)
		}
		st := e.srv.Stats()
		if st.Total.PrimaryViolations != 0 || st.Total.Violations != 0 {
			t.Fatalf("%d primary violations, %d in all", st.Total.PrimaryViolations, st.Total.Violations)
		}
		if refused.Load() == 0 || checkedLow.Load() == 0 {
			t.Fatalf("%d refusals (%d checked against an empty quota): the test did not push past the quota", refused.Load(), checkedLow.Load())
		}
		var hist int64
		for _, m := range e.gw.History() {
			hist += m.Refused
		}
		if hist != refused.Load() {
			t.Fatalf("history counts %d refusals, clients saw %d", hist, refused.Load())
		}
		t.Logf("%d requests answered, %d refusals with Retry-After, %d waits, in %s of fake time",
			clients*each, refused.Load(), e.events.count("waited"), time.Since(st.Start).Round(time.Second))
	})
}

// Two gateways on one SQLite database share one quota: together they
// never go past it, whatever each one's clients send, and the one whose
// share is spent answers 429 instead of sending.
func TestTwoGatewaysShareTheQuota(t *testing.T) {
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{githubAPI(20, time.Hour, simTokens...)}})
	if err != nil {
		t.Fatal(err)
	}
	simTS := httptest.NewServer(srv)
	defer simTS.Close()
	db := filepath.Join(t.TempDir(), "ratekeeper.db")
	var clients []*http.Client
	var bases []string
	for range 2 {
		opts := Options{Providers: []string{"github"}, Client: wiring.Options{
			DB:        db,
			Providers: []string{"github=" + simTS.URL + "/github"},
			Tokens:    map[string][]string{"github": {"tok-alice-1"}},
			MaxWait:   100 * time.Millisecond,
			Policy:    "greedy",
		}}
		gw, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(gw)
		defer func() { ts.Close(); gw.Close() }()
		clients, bases = append(clients, ts.Client()), append(bases, ts.URL)
	}
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			for i := range 10 {
				resp, err := clients[c%2].Get(fmt.Sprintf("%s/github/repos/c%d/r%d", bases[c%2], c, i))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	st := srv.Stats()
	if st.Total.Violations != 0 {
		t.Fatalf("%d violations: the gateways did not share the quota", st.Total.Violations)
	}
	alice, _ := st.BucketFor("github", "alice", "core")
	if ok.Load() == 0 || refused.Load() == 0 || alice.Charged > 20 {
		t.Fatalf("%d answered, %d refused, %d charged of 20", ok.Load(), refused.Load(), alice.Charged)
	}
}

// TestWaitersGoAtTheProbesAnswer: eight clients ask at once on one token
// whose bucket nothing is known about; the first request goes alone, as
// the probe, and the server answers it after 1.5 s. At that answer four
// more go (an owner never refused starts at quota.RampStart requests in
// flight), and the last three at theirs: answered at 1.5, 3 and 4.5 s.
// The gateway's waits on requests in flight end at the answer that frees
// them (transport.WaitError.Await). Before, each was told to come back
// one default round trip (1 s) later, found the probe still out, and came
// back a round trip after that: the last were answered at 5 s.
func TestWaitersGoAtTheProbesAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := githubAPI(5000, time.Hour, simTokens...)
		api.Latency = 1500 * time.Millisecond
		e := newEnv(t, []sim.APIConfig{api}, map[string][]string{"github": {"tok-alice-1"}}, nil)
		start := time.Now()
		took := make([]time.Duration, 8)
		var wg sync.WaitGroup
		for c := range took {
			wg.Go(func() {
				if resp, body := e.get(t, fmt.Sprintf("/github/repos/o/r%d", c)); resp.StatusCode != http.StatusOK {
					t.Errorf("client %d: %d %s", c, resp.StatusCode, body)
				}
				took[c] = time.Since(start)
			})
		}
		wg.Wait()
		slices.Sort(took)
		for k, d := range took {
			rounds := time.Duration(min(k, 1) + min(max(k-4, 0), 1) + 1)
			if d > rounds*api.Latency {
				t.Errorf("answer %d of %d came after %v, want by %v: %v", k+1, len(took), d, rounds*api.Latency, took)
				break
			}
		}
	})
}
