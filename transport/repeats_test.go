package transport

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/cache"
	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
)

type repeatsRun struct {
	makespan, ideal          time.Duration
	charged, notModified     int64
	violations, failed, sent int64
	fresh                    uint64 // answers served from the cache without a request
}

// repeatsShape is one run of runRepeats.
type repeatsShape struct {
	kind             quota.Kind
	n, passes        int
	workers          int
	limit            int64
	window, latency  time.Duration
	alwaysRevalidate bool // cache.Options.AlwaysRevalidate
	// mixed: every read of every URL in one shuffled queue, so a repeat
	// may come before the URL's first read has been answered; otherwise
	// passes, each shuffled and begun once the one before has ended.
	mixed bool
}

// runRepeats reads n URLs `passes` times with workers goroutines, through
// a transport with one GitHub token whose bucket holds limit requests per
// window, against the simulator's GitHub (Cache-Control: private,
// max-age=60, s-maxage=60 with an ETag; a conditional request at an empty
// bucket is refused like any other). The ideal is the time the n distinct
// URLs take alone: the windows their counted requests need (the last
// one's start) plus a round trip.
func runRepeats(t *testing.T, sh repeatsShape) repeatsRun {
	var run repeatsRun
	synctest.Test(t, func(t *testing.T) {
		srv, err := sim.New(sim.Config{Seed: 1, APIs: []sim.APIConfig{{Dialect: "github", Limit: sh.limit, Window: sh.window, Latency: sh.latency,
			Secondary: &sim.SecondaryConfig{}, Tokens: []sim.TokenConfig{{Token: "tok-repeats-1", Owner: "alice"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := provider.New("github", provider.GitHub, "http://api.test")
		p.Secondary.EndpointPointsPerMinute = 0
		reg := provider.NewRegistry()
		_ = reg.Add(p)
		c := cache.New(cache.Options{AlwaysRevalidate: sh.alwaysRevalidate})
		tr, err := New(Options{Providers: reg, Base: srv.Transport(""), SkipValidation: true, MaxWait: time.Hour,
			Policy: quota.Policy{Kind: sh.kind}, Cache: c,
			Pools: map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-repeats-1", "test"))}})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(7, 11))
		var queues [][]int
		if sh.mixed {
			all := make([]int, 0, sh.n*sh.passes)
			for range sh.passes {
				for i := range sh.n {
					all = append(all, i)
				}
			}
			rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
			queues = [][]int{all}
		} else {
			for range sh.passes {
				queues = append(queues, rng.Perm(sh.n))
			}
		}
		start := time.Now()
		var mu sync.Mutex
		for _, order := range queues {
			jobs := make(chan int)
			var wg sync.WaitGroup
			for range sh.workers {
				wg.Go(func() {
					for i := range jobs {
						req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://api.test/repos/o/r%d", i), nil)
						resp, err := tr.RoundTrip(req)
						mu.Lock()
						run.sent++
						if err != nil || resp.StatusCode != http.StatusOK {
							run.failed++
						}
						mu.Unlock()
						if err == nil {
							drain(resp)
						}
					}
				})
			}
			for _, i := range order {
				jobs <- i
			}
			close(jobs)
			wg.Wait()
		}
		run.makespan = time.Since(start)
		windows := (int64(sh.n) + sh.limit - 1) / sh.limit
		run.ideal = time.Duration(windows-1)*sh.window + 2*sh.latency
		st := srv.Stats().Total
		run.charged, run.notModified, run.violations = st.Charged, st.NotModified, st.PrimaryViolations+st.SecondaryViolations
		run.fresh = c.Stats().FreshHits
	})
	return run
}

// Free repeats never wait for quota: 250 URLs read 4 times in shuffled
// passes, one token, 100 per 5 s, with a cache that revalidates every
// use. Every repeat is a free 304, so the batch costs 250 requests and
// takes about the time its 250 distinct URLs take alone under the same
// policy (at most 1.15 ×). On main before, a conditional request was
// paced and held quota like a counted one: under spread and adaptive the
// batch took 1.48 × and 1.66 × the greedy ideal, though the server
// charged nothing for the repeats.
func TestFreeRepeatsNeverWaitForQuota(t *testing.T) {
	for _, kind := range []quota.Kind{quota.Greedy, quota.Spread, quota.Adaptive} {
		t.Run(string(kind), func(t *testing.T) {
			sh := repeatsShape{kind: kind, n: 250, passes: 1, workers: 20, limit: 100, window: 5 * time.Second, latency: 5 * time.Millisecond, alwaysRevalidate: true}
			alone := runRepeats(t, sh)
			sh.passes = 4
			run := runRepeats(t, sh)
			ratio := run.makespan.Seconds() / alone.makespan.Seconds()
			t.Logf("makespan %v, the 250 distinct URLs alone %v (%.2f×; %.2f× the greedy ideal %v); charged %d, 304s %d, violations %d, failed %d of %d",
				run.makespan, alone.makespan, ratio, run.makespan.Seconds()/run.ideal.Seconds(), run.ideal,
				run.charged, run.notModified, run.violations, run.failed, run.sent)
			if run.failed != 0 || run.violations != 0 {
				t.Errorf("%d failed, %d violations", run.failed, run.violations)
			}
			if run.charged != 250 || run.notModified != 750 {
				t.Errorf("charged %d and %d free 304s, want 250 and 750", run.charged, run.notModified)
			}
			if ratio > 1.15 {
				t.Errorf("%.2f × the time of the distinct URLs alone, want at most 1.15", ratio)
			}
		})
	}
}

// Repeats cost what HTTP says: the simulator's GitHub answers max-age=60,
// and a conditional request at an empty bucket is refused like any other.
// 300 URLs read 3 and 5 times, one token, 100 per 5 s (the distinct URLs
// empty the bucket), 20 workers, in passes or all mixed: the repeats
// within the answers' max-age are served from the cache without a
// request, so the batch pays only its 300 distinct URLs, in their time
// alone (at most 1.10 ×). Before, each repeat was a revalidation that
// needed quota at the moment it went: at the empty bucket it waited for
// the next window like a counted request (1.50 × in passes), and in the
// mixed order a repeat of a URL whose first read was still waiting went
// as a second counted request.
func TestRepeatsWithinMaxAgeCostNothing(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		for _, passes := range []int{3, 5} {
			t.Run(fmt.Sprintf("mixed=%v/passes=%d", mixed, passes), func(t *testing.T) {
				sh := repeatsShape{kind: quota.Greedy, n: 300, passes: 1, workers: 20, limit: 100, window: 5 * time.Second, latency: 5 * time.Millisecond}
				alone := runRepeats(t, sh)
				sh.passes, sh.mixed = passes, mixed
				run := runRepeats(t, sh)
				ratio := run.makespan.Seconds() / alone.makespan.Seconds()
				t.Logf("makespan %v, the 300 distinct URLs alone %v (%.2f×); charged %d, 304s %d, fresh hits %d, violations %d, failed %d of %d",
					run.makespan, alone.makespan, ratio, run.charged, run.notModified, run.fresh, run.violations, run.failed, run.sent)
				if run.failed != 0 || run.violations != 0 {
					t.Errorf("%d failed, %d violations", run.failed, run.violations)
				}
				repeats := uint64(300 * (passes - 1))
				// In passes every repeat finds its answer stored and its
				// owner known: all are fresh. Mixed, a repeat may come
				// before its URL's owner is known for sure (the first
				// answers of a run), and then revalidates, for free.
				free := run.fresh
				if mixed {
					free += uint64(run.notModified)
				}
				if run.charged != 300 || free != repeats || run.fresh < repeats*98/100 {
					t.Errorf("charged %d with %d fresh hits and %d free 304s, want 300 and %d repeats free, at least 98 %% fresh",
						run.charged, run.fresh, run.notModified, repeats)
				}
				if ratio > 1.10 {
					t.Errorf("%.2f × the time of the distinct URLs alone, want at most 1.10", ratio)
				}
			})
		}
	}
}

// A conditional request in flight does not hold back a counted one: with
// one unit left and a revalidation under way, a new URL goes at once.
// A conditional request waits only when the server's own count, less the
// counted requests in flight, is spent; the reserve is not its to keep.
func TestConditionalRequestsHoldNoQuota(t *testing.T) {
	reset := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	now := reset.Add(-time.Hour)
	b := quota.NewBucket()
	quota.Settle(nil, &b, 0, &quota.Answer{Reading: &headers.Reading{Status: 200, Limit: 5000, Remaining: 1, Used: quota.UnknownCount, Reset: reset}, Counted: true}, now)
	o := &quota.Owner{}
	cond := &quota.Ask{Policy: quota.Policy{Kind: quota.Greedy}, Conditional: true}
	counted := &quota.Ask{Policy: quota.Policy{Kind: quota.Greedy}}
	l := quota.Lease{ID: 1, Until: now.Add(time.Minute)}
	if d := quota.Decide([]quota.Option{{Owner: o, Bucket: &b}}, cond, l, now); d.Wait != 0 {
		t.Fatalf("the revalidation waits %v with one unit left", d.Wait)
	}
	if d := quota.Decide([]quota.Option{{Owner: o, Bucket: &b}}, counted, quota.Lease{ID: 2, Until: now.Add(time.Minute)}, now); d.Wait != 0 {
		t.Errorf("a counted request waits %v behind a revalidation in flight", d.Wait)
	}
	// The last unit is now in flight for a counted request: a further
	// revalidation would reach an empty bucket, which GitHub refuses.
	if d := quota.Decide([]quota.Option{{Owner: o, Bucket: &b}}, cond, quota.Lease{ID: 3, Until: now.Add(time.Minute)}, now); d.Wait == 0 {
		t.Errorf("a revalidation went with the server's last unit in flight for a counted request")
	}
	// A reserve of 100 keeps counted requests back, not revalidations.
	r := quota.NewBucket()
	quota.Settle(nil, &r, 0, &quota.Answer{Reading: &headers.Reading{Status: 200, Limit: 5000, Remaining: 50, Used: quota.UnknownCount, Reset: reset}, Counted: true}, now)
	reserved := quota.Policy{Kind: quota.Greedy, Reserve: 100}
	if d := quota.Decide([]quota.Option{{Owner: &quota.Owner{}, Bucket: &r}}, &quota.Ask{Policy: reserved}, quota.Lease{ID: 4, Until: now.Add(time.Minute)}, now); d.Wait == 0 {
		t.Errorf("a counted request ate into the reserve")
	}
	if d := quota.Decide([]quota.Option{{Owner: &quota.Owner{}, Bucket: &r}}, &quota.Ask{Policy: reserved, Conditional: true}, quota.Lease{ID: 5, Until: now.Add(time.Minute)}, now); d.Wait != 0 {
		t.Errorf("a revalidation waits %v behind the reserve", d.Wait)
	}
}
