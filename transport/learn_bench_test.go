package transport

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
)

// A quotaWorkload is a batch of distinct GETs against a simulated API
// whose quota binds.
type quotaWorkload struct {
	name    string
	dialect string
	path    string // with one %d
	owners  []string
	limit   int64
	window  time.Duration
	fixed   bool // windows aligned on multiples of the window
	n       int
	workers int
	latency time.Duration
}

// ideal is the earliest a perfect client could finish, starting at start:
// every bucket spent in full as its window opens, the last window's
// requests taking ⌈rest ÷ workers⌉ round trips. With rolling windows that
// reset on whole seconds (GitHub's), the first window ends W after the
// start's whole second, and every later one takes W + 1 s (a request at
// the reset second may still count in the old window, so a safe client
// starts the next one a second later); with fixed windows each ends on the
// next multiple of W. strict is the same with later rolling windows of
// exactly W, for comparison.
func (w quotaWorkload) ideal(start time.Time) (ideal, strict time.Duration) {
	distinct := map[string]bool{}
	for _, o := range w.owners {
		distinct[o] = true
	}
	perWindow := int64(len(distinct)) * w.limit
	windows := (int64(w.n) + perWindow - 1) / perWindow
	last := int64(w.n) - (windows-1)*perWindow
	tail := time.Duration((last+int64(w.workers)-1)/int64(w.workers)) * w.latency
	var first time.Duration
	if w.fixed {
		first = w.window - time.Duration(start.UnixNano()%int64(w.window))
	} else {
		first = w.window - time.Duration(start.UnixNano()%int64(time.Second))
	}
	if windows == 1 {
		return tail, tail
	}
	later := w.window
	if !w.fixed {
		later += time.Second
	}
	return first + time.Duration(windows-2)*later + tail, first + time.Duration(windows-2)*w.window + tail
}

// sends records when each request went and the reset its answer named.
type sends struct {
	rt http.RoundTripper
	mu sync.Mutex
	at []time.Time
	r  []time.Time
}

func (s *sends) RoundTrip(req *http.Request) (*http.Response, error) {
	at := time.Now()
	resp, err := s.rt.RoundTrip(req)
	if err == nil {
		r := headers.Parse(resp.StatusCode, resp.Header, nil, time.Now())
		s.mu.Lock()
		s.at = append(s.at, at)
		if r.HasReset() {
			s.r = append(s.r, r.Reset)
		}
		s.mu.Unlock()
	}
	return resp, err
}

// resumeDelays is, for every reset the answers named that came before the
// last send, how long after it the first request went.
func (s *sends) resumeDelays() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := slices.Clone(s.at)
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	seen := map[int64]bool{}
	var out []time.Duration
	for _, r := range s.r {
		sec := r.Truncate(time.Second).Unix()
		if seen[sec] || len(at) == 0 || !r.Before(at[len(at)-1]) {
			continue
		}
		seen[sec] = true
		i := sort.Search(len(at), func(i int) bool { return !at[i].Before(r) })
		out = append(out, at[i].Sub(r))
	}
	return out
}

// runQuotaWorkload runs w through a fresh transport with default options
// (owners learnt from the answers) and reports the makespan, the ideals,
// and the simulator's counts.
func runQuotaWorkload(b *testing.B, w quotaWorkload) (makespan, ideal, strict time.Duration, st sim.Counters, delays []time.Duration) {
	var tokens []sim.TokenConfig
	var toks []string
	for i, o := range w.owners {
		tok := fmt.Sprintf("tok-%s-%d", o, i+1)
		tokens = append(tokens, sim.TokenConfig{Token: tok, Owner: o})
		toks = append(toks, tok)
	}
	mode := sim.WindowRolling
	if w.fixed {
		mode = sim.WindowFixed
	}
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: w.dialect, Limit: w.limit, Window: w.window,
		WindowMode: mode, Latency: w.latency, Tokens: tokens}}})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	base := ts.URL + map[string]string{"gitlab": "/api/v4", "gitea": "/api/v1"}[w.dialect]
	kind := provider.Kind(w.dialect)
	p, _ := provider.New(w.dialect, kind, base)
	reg := provider.NewRegistry()
	_ = reg.Add(p)
	var cs []*creds.Credential
	for i, tok := range toks {
		cs = append(cs, creds.NewToken(w.dialect, i+1, tok, "bench"))
	}
	rec := &sends{rt: ts.Client().Transport}
	tr, err := New(Options{Providers: reg, Pools: map[string]*creds.Pool{w.dialect: creds.NewPool(w.dialect, cs...)},
		Base: rec, Policy: quota.Policy{Kind: quota.Greedy}, MaxWait: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range w.workers {
		wg.Go(func() {
			for i := range jobs {
				req, _ := http.NewRequest(http.MethodGet, base+fmt.Sprintf(w.path, i), nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Error(err)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode >= 400 {
					b.Errorf("status %d", resp.StatusCode)
				}
			}
		})
	}
	for i := range w.n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	makespan = time.Since(start)
	ideal, strict = w.ideal(start)
	return makespan, ideal, strict, srv.Stats().Total, rec.resumeDelays()
}

// BenchmarkLearnedOwners runs batches whose quota binds, with owners
// learnt from the answers (nothing spent to learn them), against the
// simulator on loopback in real time, and reports the makespan against
// the ideal (see quotaWorkload.ideal), what the server charged, its
// refusals, and how long after each reset the first request went. Run it
// with -benchtime 1x; the three take about 90 s together.
func BenchmarkLearnedOwners(b *testing.B) {
	for _, w := range []quotaWorkload{
		{name: "4users-1000", dialect: "github", path: "/repos/o/r%d", owners: []string{"a", "b", "c", "d"},
			limit: 80, window: 8 * time.Second, n: 1000, workers: 32, latency: 30 * time.Millisecond},
		{name: "5tokens3users-720", dialect: "github", path: "/repos/o/r%d", owners: []string{"a", "b", "a", "c", "b"},
			limit: 80, window: 8 * time.Second, n: 720, workers: 32, latency: 30 * time.Millisecond},
		{name: "huggingface-400", dialect: "huggingface", path: "/api/models/o/m%d", owners: []string{"a"},
			limit: 60, window: 6 * time.Second, fixed: true, n: 400, workers: 10, latency: 30 * time.Millisecond},
	} {
		b.Run(w.name, func(b *testing.B) {
			for b.Loop() {
				makespan, ideal, strict, st, delays := runQuotaWorkload(b, w)
				b.ReportMetric(makespan.Seconds(), "makespan-s")
				b.ReportMetric(makespan.Seconds()/ideal.Seconds(), "x-ideal")
				b.ReportMetric(makespan.Seconds()/strict.Seconds(), "x-strict-ideal")
				b.ReportMetric(float64(st.Charged), "charged")
				b.ReportMetric(float64(st.Violations), "refusals")
				if len(delays) > 0 {
					var sum, most time.Duration
					for _, d := range delays {
						sum += d
						most = max(most, d)
					}
					b.ReportMetric(float64(sum.Milliseconds())/float64(len(delays)), "resume-ms-mean")
					b.ReportMetric(float64(most.Milliseconds()), "resume-ms-max")
				}
			}
		})
	}
}
