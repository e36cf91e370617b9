package transport

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/sim"
)

// Scale invariance: the same workloads on a fake clock at the time scale
// of the servers (GitHub's hour and minute, a 60 s secondary penalty,
// Hugging Face's 5-minute windows, GitLab's minute) and ten times faster,
// as the older tests ran them (6 s penalties, 6 s windows). A duration in the engine that is
// not derived from the server's own numbers would show as a different
// ratio to the ideal, or a different number of refusal episodes, at one
// of the two scales.

// scaleWorkload is one batch against one simulated API, its times at the
// real scale.
type scaleWorkload struct {
	name    string
	dialect string
	kind    provider.Kind
	path    string // %d is the job
	limit   int64
	window  time.Duration
	fixed   bool // fixed windows (else the dialect's own)
	// resource overrides the main bucket for a resource of its own
	// (GitHub's search).
	resource string
	jobs     int
	workers  int
	latency  time.Duration
	// secondary: a server allowing maxInFlight in flight, refusing for
	// penalty (without retry-after) beyond it.
	maxInFlight int
	penalty     time.Duration
}

// scaled returns the workload with every time multiplied by f.
func (w scaleWorkload) scaled(f float64) scaleWorkload {
	s := func(d time.Duration) time.Duration { return time.Duration(float64(d) * f) }
	w.window, w.latency, w.penalty = s(w.window), s(w.latency), s(w.penalty)
	return w
}

// ideal is the makespan no client can beat: for a quota-bound batch, one
// window per full bucket after the first (the last window's requests go
// at once); for a concurrency-bound one, rounds of the latency at the
// server's limit plus the one penalty that finding the limit costs.
func (w scaleWorkload) ideal() time.Duration {
	if w.maxInFlight > 0 {
		rounds := (w.jobs + w.maxInFlight - 1) / w.maxInFlight
		return time.Duration(rounds)*w.latency + w.penalty
	}
	windows := (int64(w.jobs) + w.limit - 1) / w.limit
	return time.Duration(windows-1) * w.window
}

type scaleResult struct {
	makespan   time.Duration
	done       int
	violations int64
	episodes   int
	firstErr   error
}

func (w scaleWorkload) run(t *testing.T) scaleResult {
	api := sim.APIConfig{Dialect: w.dialect, Limit: w.limit, Window: w.window, Latency: w.latency,
		Tokens: []sim.TokenConfig{{Token: "tok-scale-0001", Owner: "alice"}}}
	if w.fixed {
		api.WindowMode = sim.WindowFixed
	}
	if w.resource != "" {
		api.Limit = 1_000_000
		api.Resources = map[string]sim.ResourceConfig{w.resource: {Limit: w.limit, Window: w.window}}
	}
	// GitHub's points per minute are a minute at every scale: off, in
	// the simulator and the client, so that only the scaled limits count.
	api.Secondary = &sim.SecondaryConfig{}
	if w.maxInFlight > 0 {
		api.Limit = 1_000_000
		api.Secondary = &sim.SecondaryConfig{MaxConcurrent: w.maxInFlight, Penalty: w.penalty, Status: 403}
	}
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{api}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := provider.New(string(w.kind), w.kind, "http://api.test")
	if err != nil {
		t.Fatal(err)
	}
	p.Secondary.EndpointPointsPerMinute = 0 // the simulator counts none
	reg := provider.NewRegistry()
	_ = reg.Add(p)
	var (
		mu           sync.Mutex
		res          scaleResult
		episodeStart time.Time
	)
	episodeGap := max(w.penalty, w.window/2)
	tr, err := New(Options{Providers: reg, Base: handlerRT{srv}, SkipValidation: true, DisableCache: true,
		Pools:         map[string]*creds.Pool{p.Name: creds.NewPool(p.Name, creds.NewToken(p.Name, 1, "tok-scale-0001", "test"))},
		SecondaryWait: w.penalty, MaxWait: 24 * time.Hour,
		OnEvent: func(e Event) {
			if e.Kind != EventRateLimited {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if now := time.Now(); episodeStart.IsZero() || now.Sub(episodeStart) > episodeGap {
				episodeStart = now
				res.episodes++
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done, firstErr := runJobs(tr, w.workers, w.jobs, func(i int) string { return "http://api.test" + fmt.Sprintf(w.path, i) })
	mu.Lock()
	res.done, res.firstErr = done, firstErr
	mu.Unlock()
	res.makespan = time.Since(start)
	res.violations = srv.Stats().Total.Violations
	return res
}

var scaleWorkloads = []scaleWorkload{
	{name: "github core 5000/h", dialect: "github", kind: provider.GitHub, path: "/repos/o/r%d",
		limit: 5000, window: time.Hour, jobs: 5500, workers: 16, latency: 50 * time.Millisecond},
	{name: "github search 30/min", dialect: "github", kind: provider.GitHub, path: "/search/repositories?q=x%d",
		resource: "search", limit: 30, window: time.Minute, jobs: 75, workers: 8, latency: 200 * time.Millisecond},
	{name: "github secondary 6 in flight 60s", dialect: "github", kind: provider.GitHub, path: "/repos/o/r%d",
		jobs: 600, workers: 48, latency: 40 * time.Millisecond, maxInFlight: 6, penalty: time.Minute},
	{name: "huggingface 1000/5min", dialect: "huggingface", kind: provider.HuggingFace, path: "/api/models/o/m%d",
		limit: 1000, window: 5 * time.Minute, fixed: true, jobs: 2500, workers: 16, latency: 50 * time.Millisecond},
	{name: "gitlab 600/min", dialect: "gitlab", kind: provider.GitLab, path: "/api/v4/projects/%d",
		limit: 600, window: time.Minute, fixed: true, jobs: 1500, workers: 16, latency: 50 * time.Millisecond},
}

// TestScaleInvariance runs each workload at the real scale and ten times
// faster: the same ratio to the ideal (within 2 %), the same number
// of refusal episodes, no violation of the primary quota.
func TestScaleInvariance(t *testing.T) {
	for _, w := range scaleWorkloads {
		t.Run(w.name, func(t *testing.T) {
			var ratios [2]float64
			var episodes [2]int
			for i, f := range []float64{1, 1.0 / 10} {
				synctest.Test(t, func(t *testing.T) {
					ws := w.scaled(f)
					r := ws.run(t)
					if r.done != ws.jobs {
						t.Fatalf("scale %v: done %d of %d; first error %v", f, r.done, ws.jobs, r.firstErr)
					}
					ratios[i] = r.makespan.Seconds() / ws.ideal().Seconds()
					episodes[i] = r.episodes
					if ws.maxInFlight == 0 && r.violations != 0 {
						t.Errorf("scale %v: %d violations of the quota", f, r.violations)
					}
					t.Logf("scale %v: makespan %v, ideal %v, ratio %.3f, %d episodes, %d violations",
						f, r.makespan, ws.ideal(), ratios[i], r.episodes, r.violations)
				})
			}
			if math.Abs(ratios[0]-ratios[1]) > 0.02*ratios[0] {
				t.Errorf("ratio to the ideal %.3f at the real scale, %.3f ten times faster: more than 2 %% apart", ratios[0], ratios[1])
			}
			if episodes[0] != episodes[1] {
				t.Errorf("%d refusal episodes at the real scale, %d ten times faster", episodes[0], episodes[1])
			}
			if ratios[0] > 1.1 {
				t.Errorf("ratio to the ideal %.3f at the real scale, want at most 1.1", ratios[0])
			}
		})
	}
}
