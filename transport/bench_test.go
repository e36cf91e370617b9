package transport

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
)

// githubLike answers like api.github.com with plenty of quota left.
func githubLike() http.Handler {
	body := []byte(`{"login":"octocat","id":1}`)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json; charset=utf-8")
		h.Set("X-RateLimit-Limit", "5000000")
		h.Set("X-RateLimit-Remaining", "4999999")
		h.Set("X-RateLimit-Used", "1")
		h.Set("X-RateLimit-Reset", fmt.Sprint(time.Now().Add(time.Hour).Unix()))
		h.Set("X-RateLimit-Resource", "core")
		w.Write(body)
	})
}

func benchTransport(b *testing.B, base http.RoundTripper, url string, tune ...func(*Options)) *Transport {
	p, err := provider.New("github", provider.GitHub, url)
	if err != nil {
		b.Fatal(err)
	}
	// The overhead is measured with quota and secondary limits that never
	// bind: GitHub's 900 points per endpoint per minute would otherwise
	// pace this loop to 15 requests a second.
	p.Secondary = provider.Secondary{}
	reg := provider.NewRegistry()
	_ = reg.Add(p)
	opts := Options{
		Providers:      reg,
		Pools:          map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-bench-0001", "bench"))},
		Base:           base,
		Policy:         quota.Policy{Kind: quota.Greedy},
		SkipValidation: true,
	}
	for _, f := range tune {
		f(&opts)
	}
	tr, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	return tr
}

func loop(b *testing.B, rt http.RoundTripper, url string) {
	req, _ := http.NewRequest(http.MethodGet, url+"/user", nil)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkBareTransport is plain net/http against a loopback server: the
// baseline of BenchmarkTransportOverhead.
func BenchmarkBareTransport(b *testing.B) {
	srv := httptest.NewServer(githubLike())
	defer srv.Close()
	loop(b, srv.Client().Transport, srv.URL)
}

// BenchmarkTransportOverhead is the same requests through the rate-keeping
// transport (memory state, cache on, quota never binding); its difference
// from BenchmarkBareTransport is what ratekeeper adds per request.
func BenchmarkTransportOverhead(b *testing.B) {
	srv := httptest.NewServer(githubLike())
	defer srv.Close()
	loop(b, benchTransport(b, srv.Client().Transport, srv.URL), srv.URL)
}

// The same pair without sockets, so the difference is not buried in
// loopback noise.
func BenchmarkBareInProcess(b *testing.B) {
	loop(b, handlerRT{githubLike()}, "http://api.test")
}

func BenchmarkTransportOverheadInProcess(b *testing.B) {
	loop(b, benchTransport(b, handlerRT{githubLike()}, "http://api.test"), "http://api.test")
}

// BenchmarkSimulatedBatch runs the workload in real time against
// the simulator on loopback: 3 tokens (distinct owners) × 100 requests per
// 10 s rolling window, 1,200 distinct GETs, 16 workers. It reports the
// makespan against the ideal — the first 300 requests at once, the other
// 900 at the physical limit of 30/s, 30 s in all — and the simulator's
// primary violations. Run it with -benchtime=1x; each policy takes 30-60 s.
func BenchmarkSimulatedBatch(b *testing.B) {
	for _, kind := range []quota.Kind{quota.Greedy, quota.Spread, quota.Adaptive} {
		b.Run(string(kind), func(b *testing.B) {
			for b.Loop() {
				makespan, violations := simulatedBatch(b, kind)
				ideal := 30 * time.Second
				b.ReportMetric(makespan.Seconds(), "makespan-s")
				b.ReportMetric(makespan.Seconds()/ideal.Seconds(), "x-ideal")
				b.ReportMetric(float64(violations), "violations")
			}
		})
	}
}

func simulatedBatch(b *testing.B, kind quota.Kind) (time.Duration, int64) {
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: 100, Window: 10 * time.Second,
		Tokens: []sim.TokenConfig{{Token: "tok-a", Owner: "a"}, {Token: "tok-b", Owner: "b"}, {Token: "tok-c", Owner: "c"}}}}})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	p, _ := provider.New("github", provider.GitHub, ts.URL)
	reg := provider.NewRegistry()
	_ = reg.Add(p)
	pool := creds.NewPool("github", creds.NewToken("github", 1, "tok-a", "bench"), creds.NewToken("github", 2, "tok-b", "bench"), creds.NewToken("github", 3, "tok-c", "bench"))
	tr, err := New(Options{Providers: reg, Pools: map[string]*creds.Pool{"github": pool}, Base: ts.Client().Transport,
		Policy: quota.Policy{Kind: kind, Velocity: 1.5, MaxDelay: time.Minute},
		// The tokens have distinct owners; learning that costs a request
		// each, and 1,203 requests need a fifth window.
		SkipValidation: true})
	if err != nil {
		b.Fatal(err)
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/repos/org/repo%d", ts.URL, i), nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Error(err)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Errorf("status %d", resp.StatusCode)
				}
			}
		}()
	}
	for i := 0; i < 1200; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return time.Since(start), srv.Stats().Total.PrimaryViolations
}
