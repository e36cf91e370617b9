package sim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkSimThroughput measures the simulator over loopback: parallel
// clients with keep-alive GET a repository with a valid token and a limit
// too large to reach. It reports requests per second (target: ≥ 20,000 on
// a 2-core machine, so the simulator is never a benchmark's bottleneck).
func BenchmarkSimThroughput(b *testing.B) {
	srv, err := New(Config{APIs: []APIConfig{{
		Dialect:   DialectGitHub,
		Tokens:    []TokenConfig{{Token: "tok-bench-1", Owner: "bench"}},
		Limit:     1 << 50,
		Secondary: &SecondaryConfig{}, // off: the benchmark measures the simulator, not a penalty
	}}})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	const clients = 16
	tr := &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := ts.URL + "/repos/octo/hello-world"

	b.SetParallelism((clients + 1) / 2) // 2 cores × 8 = 16 clients
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer tok-bench-1")
		for pb.Next() {
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	// Each run has its own server, so it must have served exactly b.N.
	if st := srv.Stats(); st.Total.Accepted != int64(b.N) || st.Total.Violations != 0 {
		b.Fatalf("served %d requests with %d violations, want %d and 0", st.Total.Accepted, st.Total.Violations, b.N)
	}
}

// discardWriter is a ResponseWriter that keeps nothing, to time the
// handler alone.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkServeHTTP times the handler without the network: the cost the
// simulator adds to each request.
func BenchmarkServeHTTP(b *testing.B) {
	srv, err := New(Config{APIs: []APIConfig{{
		Dialect: DialectGitHub, Tokens: []TokenConfig{{Token: "tok-bench-1"}}, Limit: 1 << 50, Secondary: &SecondaryConfig{},
	}}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest(http.MethodGet, "http://sim.test/repos/octo/hello-world", nil)
		req.Header.Set("Authorization", "Bearer tok-bench-1")
		w := &discardWriter{}
		for pb.Next() {
			w.h = http.Header{}
			srv.ServeHTTP(w, req)
		}
	})
}
