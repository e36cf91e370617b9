package transport

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/sim"
)

// concurrencyBatch is the secondary-limit scenario: one token whose primary
// quota is out of reach, a server that allows maxInFlight of its requests
// in flight and answers after latency, refusing everything for penalty
// once that is exceeded (with retry-after, or without), and a batch of
// jobs GETs of distinct repositories sent by workers goroutines through
// the transport with GitHub's defaults (20 in flight at most).
type concurrencyBatch struct {
	jobs, workers, maxInFlight int
	latency, penalty           time.Duration
	retryAfter                 bool
	// secondaryWait is the client's secondary_wait (0: its default).
	secondaryWait time.Duration
}

type batchResult struct {
	makespan    time.Duration
	done        int
	refusals    int64 // secondary refusals the simulator counted
	episodes    int   // refusal episodes: refusals more than a penalty after the last episode began
	maxInFlight int64
	firstErr    error
}

// ideal is the makespan of a client that keeps exactly maxInFlight
// requests in flight from the start: ⌈jobs ÷ maxInFlight⌉ rounds of the
// latency.
func (c concurrencyBatch) ideal() time.Duration {
	rounds := (c.jobs + c.maxInFlight - 1) / c.maxInFlight
	return time.Duration(rounds) * c.latency
}

// bound is the makespan of a client that has to find the server's limit:
// it exceeds it once (nothing else tells it), pays one penalty, and keeps
// maxInFlight in flight otherwise; plus the ramp from quota.RampStart,
// which takes a round of the latency per step (at most 10 rounds here).
func (c concurrencyBatch) bound() time.Duration {
	return c.penalty + c.ideal() + 10*c.latency
}

// run sends the batch. With inProcess the simulator's handler is called
// in the sending goroutine (for synctest's fake clock); otherwise it
// listens on loopback and the clock is real.
func (c concurrencyBatch) run(tb testing.TB, inProcess bool) batchResult {
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: 1_000_000, Window: time.Hour,
		Latency: c.latency, Tokens: []sim.TokenConfig{{Token: "tok-conc-0001", Owner: "a"}},
		Secondary: &sim.SecondaryConfig{MaxConcurrent: c.maxInFlight, Penalty: c.penalty, RetryAfter: c.retryAfter, Status: 403}}}})
	if err != nil {
		tb.Fatal(err)
	}
	var (
		mu           sync.Mutex
		res          batchResult
		episodeStart time.Time
	)
	var base http.RoundTripper = handlerRT{srv}
	url := "http://api.test"
	if !inProcess {
		ts := httptest.NewServer(srv)
		defer ts.Close()
		base, url = ts.Client().Transport, ts.URL
	}
	p, err := provider.New("github", provider.GitHub, url)
	if err != nil {
		tb.Fatal(err)
	}
	// The simulated server counts no points per endpoint, and 500 GETs
	// of one endpoint in seconds would meet GitHub's 900 per minute,
	// which the client paces for: off, to measure concurrency alone.
	p.Secondary.EndpointPointsPerMinute = 0
	reg := provider.NewRegistry()
	_ = reg.Add(p)
	tr, err := New(Options{Providers: reg, Base: base, SkipValidation: true, DisableCache: true,
		Pools:         map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-conc-0001", "test"))},
		SecondaryWait: c.secondaryWait, MaxWait: time.Hour,
		OnEvent: func(e Event) {
			if e.Kind != EventRateLimited {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if now := time.Now(); episodeStart.IsZero() || now.Sub(episodeStart) > c.penalty {
				episodeStart = now
				res.episodes++
			}
		}})
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	res.done, res.firstErr = runJobs(tr, c.workers, c.jobs, func(i int) string {
		return fmt.Sprintf("%s/repos/org%d/repo%d", url, i%8, i)
	})
	res.makespan = time.Since(start)
	st := srv.Stats()
	res.refusals, res.maxInFlight = st.Total.SecondaryViolations, st.Total.MaxInFlight
	return res
}

// runJobs sends jobs GETs, job i to url(i), from workers goroutines
// through tr, and counts those answered 200 and the first error.
func runJobs(tr http.RoundTripper, workers, jobs int, url func(i int) string) (done int, firstErr error) {
	ch := make(chan int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range ch {
				req, _ := http.NewRequest(http.MethodGet, url(i), nil)
				resp, err := tr.RoundTrip(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("GET %s: %s", req.URL.Path, resp.Status)
					}
				}
				mu.Lock()
				if err == nil {
					done++
				} else if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	for i := range jobs {
		ch <- i
	}
	close(ch)
	wg.Wait()
	return done, firstErr
}

// The two scenarios: a server allowing 6 in flight, 40 ms per
// request, 48 workers, 500 GETs; a 4 s penalty with retry-after, or a 6 s
// one without against a secondary_wait of 6 s.
var (
	batchRetryAfter = concurrencyBatch{jobs: 500, workers: 48, maxInFlight: 6, latency: 40 * time.Millisecond,
		penalty: 4 * time.Second, retryAfter: true}
	batchNoRetryAfter = concurrencyBatch{jobs: 500, workers: 48, maxInFlight: 6, latency: 40 * time.Millisecond,
		penalty: 6 * time.Second, secondaryWait: 6 * time.Second}
)

// TestLearnsTheServersConcurrency runs both scenarios on a fake clock: the
// transport starts a new owner at quota.RampStart in flight, grows one per
// round of successes, meets the server's limit once, and keeps under it
// for the rest of the batch — one episode of refusals, not one per pause.
func TestLearnsTheServersConcurrency(t *testing.T) {
	for _, c := range []struct {
		name      string
		batch     concurrencyBatch
		refusals  int64
		makespans time.Duration
	}{
		{"retry-after", batchRetryAfter, 10, batchRetryAfter.bound()},
		{"secondary_wait", batchNoRetryAfter, 15, batchNoRetryAfter.bound()},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := c.batch.run(t, true)
				if r.done != c.batch.jobs {
					t.Fatalf("done %d of %d; first error %v", r.done, c.batch.jobs, r.firstErr)
				}
				if r.refusals == 0 || r.refusals > c.refusals {
					t.Errorf("%d secondary refusals, want 1 to %d", r.refusals, c.refusals)
				}
				if r.makespan > c.makespans {
					t.Errorf("makespan %v, want at most %v", r.makespan, c.makespans)
				}
				t.Logf("makespan %v (ideal %v), %d refusals, at most %d in flight", r.makespan, c.batch.ideal(), r.refusals, r.maxInFlight)
			})
		})
	}
}

// BenchmarkSecondaryConcurrency runs the same two scenarios in real time,
// the simulator on loopback. Run it with -benchtime 1x; each run takes
// 7–10 s.
func BenchmarkSecondaryConcurrency(b *testing.B) {
	for _, c := range []struct {
		name  string
		batch concurrencyBatch
	}{{"retry-after", batchRetryAfter}, {"secondary_wait", batchNoRetryAfter}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				r := c.batch.run(b, false)
				if r.done != c.batch.jobs {
					b.Errorf("done %d of %d; first error %v", r.done, c.batch.jobs, r.firstErr)
				}
				b.ReportMetric(r.makespan.Seconds(), "makespan-s")
				b.ReportMetric(r.makespan.Seconds()/c.batch.ideal().Seconds(), "x-ideal")
				b.ReportMetric(r.makespan.Seconds()/(c.batch.penalty+c.batch.ideal()).Seconds(), "x-penalty+ideal")
				b.ReportMetric(float64(r.refusals), "refusals")
				b.ReportMetric(float64(r.maxInFlight), "max-in-flight")
			}
		})
	}
}

// TestReserveTakingAWholeBucketFails: a count reserve at or above a
// resource's limit fails the request with an error naming the resource
// and the reserve as soon as the limit is known, instead of waiting for
// ever; other resources keep working.
func TestReserveTakingAWholeBucketFails(t *testing.T) {
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Tokens: []sim.TokenConfig{{Token: "tok-res-0001", Owner: "a"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	tr := handlerTransport(t, srv, func(o *Options) {
		o.Pools = map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-res-0001", "test"))}
		o.Policy.Reserve = 100
		o.SkipValidation = true
	})
	get := func(path string) error {
		req, _ := http.NewRequest(http.MethodGet, "http://api.test"+path, nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	// The first search is the probe that tells the limit (30 a minute).
	if err := get("/search/repositories?q=x"); err != nil {
		t.Fatal(err)
	}
	err = get("/search/repositories?q=y")
	var re *ReserveError
	if !errors.As(err, &re) || re.Resource != "search" || re.Reserve != 100 || re.Limit != 30 {
		t.Fatalf("second search with --reserve 100: %v; want a ReserveError for search", err)
	}
	for _, want := range []string{"github search", "reserve of 100", "limit of 30", "10%"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if err := get("/repos/o/r"); err != nil {
		t.Fatalf("core (5,000 an hour) with a reserve of 100: %v", err)
	}
}
