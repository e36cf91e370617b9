package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
	"github.com/ratekeeper/ratekeeper/wiring"
)

// benchTargets serves a simulated GitHub whose limits never bind (a
// billion requests an hour, no secondary limits) on loopback, and a
// gateway in front of it, also on loopback. It returns the URLs of the
// API directly and through the gateway.
func benchTargets(b *testing.B, latency time.Duration) (direct, viaGateway string) {
	b.Helper()
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{
		Name: "github", Dialect: sim.DialectGitHub, Limit: 1_000_000_000, Window: time.Hour,
		Secondary: &sim.SecondaryConfig{}, Latency: latency,
		Tokens: []sim.TokenConfig{{Token: "tok-bench-1", Owner: "bench"}},
	}}})
	if err != nil {
		b.Fatal(err)
	}
	simTS := httptest.NewServer(srv)
	b.Cleanup(simTS.Close)
	gw, err := New(Options{
		Providers: []string{"github"},
		Client: wiring.Options{
			Providers: []string{"github=" + simTS.URL},
			Tokens:    map[string][]string{"github": {"tok-bench-1"}},
			Tune: func(o *transport.Options) {
				// The client's own secondary-limit pacing (GitHub's 900
				// points per endpoint a minute, 20 in flight) would bind
				// first; the benchmark is about the gateway's cost.
				o.Providers.Lookup("github").Secondary = provider.Secondary{ReadPoints: 1, WritePoints: 1}
			},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	gwTS := httptest.NewUnstartedServer(gw)
	gwTS.Config = gw.HTTPServer()
	gwTS.Start()
	b.Cleanup(func() { gwTS.Close(); gw.Close() })
	return simTS.URL, gwTS.URL + "/github"
}

func benchClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 512, 512
	return &http.Client{Transport: t}
}

// fetch GETs url; requests that do not go through the gateway carry the
// token themselves, as a client without it would.
func fetch(b *testing.B, c *http.Client, target string, direct bool) {
	req, err := http.NewRequest(http.MethodGet, target, nil)
	if err != nil {
		b.Fatal(err)
	}
	if direct {
		req.Header.Set("Authorization", "Bearer tok-bench-1")
	}
	resp, err := c.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Errorf("GET %s: %d", target, resp.StatusCode)
	}
}

// bareProxy serves a plain httputil.ReverseProxy to target on loopback:
// the cost of one more HTTP hop and nothing else, as a reference.
func bareProxy(b *testing.B, target string) string {
	u, err := url.Parse(target)
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = newUpstreamTransport(time.Minute)
	ts := httptest.NewServer(rp)
	b.Cleanup(ts.Close)
	return ts.URL
}

// BenchmarkThroughput is a loopback load generator: 32 clients send GETs
// of distinct repositories (no coalescing, every answer stored by the
// cache) as fast as they can, straight to the simulator and through the
// gateway. Compare the req/s of the two. With no upstream latency
// everything competes for the same CPUs, so the gateway's own work shows
// fully; with 20 ms, as a real API over a network has at least, the
// clients wait on the upstream as they would.
//
//	go test -run '^$' -bench Throughput ./gateway/
func BenchmarkThroughput(b *testing.B) {
	for _, latency := range []time.Duration{0, 20 * time.Millisecond} {
		direct, via := benchTargets(b, latency)
		bare := bareProxy(b, direct)
		for _, target := range []struct{ name, url string }{{"direct", direct}, {"bare-proxy", bare}, {"gateway", via}} {
			b.Run(fmt.Sprintf("latency=%s/%s", latency, target.name), func(b *testing.B) {
				c := benchClient()
				var n atomic.Int64
				b.SetParallelism(16) // 32 clients on 2 CPUs
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						fetch(b, c, fmt.Sprintf("%s/repos/bench/r%d", target.url, n.Add(1)), target.name != "gateway")
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
			})
		}
	}
}

// BenchmarkLatency sends one GET at a time, straight to the simulator and
// through the gateway, and reports the median and the 90th percentile; the
// gateway's added latency is the difference of the medians.
//
//	go test -run '^$' -bench Latency ./gateway/
func BenchmarkLatency(b *testing.B) {
	direct, via := benchTargets(b, 0)
	bare := bareProxy(b, direct)
	for _, target := range []struct{ name, url string }{{"direct", direct}, {"bare-proxy", bare}, {"gateway", via}} {
		b.Run(target.name, func(b *testing.B) {
			c := benchClient()
			fetch(b, c, target.url+"/repos/bench/warm", target.name != "gateway")
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				fetch(b, c, fmt.Sprintf("%s/repos/bench/r%d", target.url, i), target.name != "gateway")
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*9/10].Microseconds()), "p90-µs")
		})
	}
}

// BenchmarkBindingQuota is the gateway under a quota that binds, on
// loopback with its quota state in SQLite: 200 clients at once ask for
// distinct repositories of a simulated GitHub allowing 40 requests per
// 2-second window and answering in 100 ms; the gateway's max wait is 3 s,
// and every tenth client leaves after 1 s. It reports the slowest answer
// against the bound (max wait + upstream latency), the answers (200s),
// refusals (429s, each with Retry-After) and 504s, and the requests sent
// upstream whose answer never reached the quota state.
func BenchmarkBindingQuota(b *testing.B) {
	const (
		clients = 200
		maxWait = 3 * time.Second
		latency = 100 * time.Millisecond
	)
	for range b.N {
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{
			Name: "github", Dialect: sim.DialectGitHub, Limit: 40, Window: 2 * time.Second, Latency: latency,
			Tokens: []sim.TokenConfig{{Token: "tok-bench-1", Owner: "bench"}},
		}}})
		if err != nil {
			b.Fatal(err)
		}
		simTS := httptest.NewServer(srv)
		up := &upstreamLog{rt: newUpstreamTransport(time.Minute)}
		gw, err := New(Options{
			Providers: []string{"github"},
			Client: wiring.Options{
				Providers: []string{"github=" + simTS.URL},
				Tokens:    map[string][]string{"github": {"tok-bench-1"}},
				DB:        filepath.Join(b.TempDir(), "quota.db"),
				MaxWait:   maxWait,
				Base:      up,
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		gwTS := httptest.NewUnstartedServer(gw)
		gwTS.Config = gw.HTTPServer()
		gwTS.Start()
		c := benchClient()
		if resp, err := c.Get(gwTS.URL + "/github/user"); err == nil { // learns the token's owner
			resp.Body.Close()
		}

		var mu sync.Mutex
		codes := map[int]int{}
		var slowest time.Duration
		noRetryAfter := 0
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() {
				ctx := context.Background()
				if i%10 == 9 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Second)
					defer cancel()
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/github/repos/o/r%d", gwTS.URL, i), nil)
				start := time.Now()
				resp, err := c.Do(req)
				took := time.Since(start)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					return // left
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				slowest = max(slowest, took)
				codes[resp.StatusCode]++
				if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
					noRetryAfter++
				}
			})
		}
		wg.Wait()
		unrecorded := 0
		for _, s := range up.all() {
			if !s.answered {
				unrecorded++
			}
		}
		gwTS.Close()
		gw.Close()
		simTS.Close()
		if noRetryAfter > 0 {
			b.Errorf("%d refusals without Retry-After", noRetryAfter)
		}
		b.ReportMetric(slowest.Seconds(), "slowest-s")
		b.ReportMetric((maxWait + latency).Seconds(), "bound-s")
		b.ReportMetric(float64(codes[http.StatusOK]), "answered")
		b.ReportMetric(float64(codes[http.StatusTooManyRequests]), "refused")
		b.ReportMetric(float64(codes[http.StatusGatewayTimeout]), "504s")
		b.ReportMetric(float64(unrecorded), "unrecorded")
	}
}
