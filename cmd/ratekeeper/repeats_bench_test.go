package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/sim"
)

const (
	repeatsDistinct = 390 // with the token check, four windows of 100
	repeatsLimit    = 100
	repeatsWindow   = 5 * time.Second
	repeatsLatency  = 20 * time.Millisecond
	repeatsWorkers  = 8
)

// BenchmarkRepeats reads 390 repository URLs 3 or 5 times against the
// simulator's GitHub — one token, 100 requests per 5 s, 20 ms answers,
// every answer Cache-Control: private, max-age=60, s-maxage=60 with an
// ETag, and a conditional request at an empty bucket refused like any
// other — through each face: the library (a transport, 8 goroutines),
// the batch API (ratekeeper.NewBatch, InFlight 8), `ratekeeper fetch`
// (the built binary, its defaults; the input lists every read) and the
// gateway (in process, 8 client goroutines). In "passes" every URL is read
// once before any is read again; in "mixed" all the reads are shuffled
// together. "library-revalidating" is the library with
// Options.AlwaysRevalidate: every repeat a conditional request, as before
// freshness.
//
// The ideal pays only the distinct URLs: 390 requests in 4 windows, so
// the last answer comes 3 windows and one answer after the first window
// began (the simulator starts a window on the whole second of its first
// request: 14.02–15.02 s after that request). The time is measured the same way, from the first
// request the simulator sees to the last answer it gives (a process's
// start-up is not counted). Reported: the time over the ideal, the
// requests the server charged, its 304s, and its violations.
//
//	go test ./cmd/ratekeeper -run '^$' -bench Repeats -benchtime 1x -timeout 30m
func BenchmarkRepeats(b *testing.B) {
	for _, face := range []string{"library", "batch", "fetch", "gateway", "library-revalidating"} {
		for _, shape := range []string{"passes", "mixed"} {
			for _, reads := range []int{3, 5} {
				if face == "library-revalidating" && reads == 5 {
					continue // a minute or more each
				}
				b.Run(fmt.Sprintf("%s/%s/%d", face, shape, reads), func(b *testing.B) {
					for b.Loop() {
						runRepeatsFace(b, face, shape, reads)
					}
				})
			}
		}
	}
}

func runRepeatsFace(b *testing.B, face, shape string, reads int) {
	s := startTimedSim(b)
	var paths []string
	for range reads {
		for i := range repeatsDistinct {
			paths = append(paths, fmt.Sprintf("/repos/o/r%d", i))
		}
	}
	if shape == "mixed" {
		rng := rand.New(rand.NewPCG(3, 5))
		rng.Shuffle(len(paths), func(i, j int) { paths[i], paths[j] = paths[j], paths[i] })
	}
	failed := 0
	switch face {
	case "library", "library-revalidating":
		failed = repeatsLibrary(b, s.url, paths, face == "library-revalidating")
	case "batch":
		failed = repeatsBatch(b, s.url, paths)
	case "fetch":
		failed = repeatsFetch(b, s.url, paths)
	case "gateway":
		failed = repeatsGateway(b, s.url, paths)
	}
	first, last := s.span()
	makespan := last.Sub(first)
	// The simulator's windows start on a whole second: the first one
	// began that much before the first request.
	ideal := time.Duration((repeatsDistinct+repeatsLimit-1)/repeatsLimit-1)*repeatsWindow - first.Sub(first.Truncate(time.Second)) + repeatsLatency
	st := s.srv.Stats().Total
	b.Logf("%s %s ×%d: %v, %.3f × the ideal %v; charged %d, 304s %d, violations %d, failed %d",
		face, shape, reads, makespan.Round(time.Millisecond), makespan.Seconds()/ideal.Seconds(), ideal,
		st.Charged, st.NotModified, st.PrimaryViolations+st.SecondaryViolations, failed)
	b.ReportMetric(makespan.Seconds()/ideal.Seconds(), "x-ideal")
	b.ReportMetric(float64(st.Charged), "charged")
	b.ReportMetric(float64(st.NotModified), "304s")
	b.ReportMetric(float64(st.PrimaryViolations+st.SecondaryViolations), "violations")
	b.ReportMetric(float64(failed), "failed")
}

// timedSim is the simulator behind an httptest server that notes when the
// first request arrived and the last answer left.
type timedSim struct {
	srv *sim.Server
	url string

	mu          sync.Mutex
	first, last time.Time
}

func startTimedSim(tb testing.TB) *timedSim {
	tb.Helper()
	srv, err := sim.New(sim.Config{Seed: 1, APIs: []sim.APIConfig{{Dialect: "github", Limit: repeatsLimit, Window: repeatsWindow,
		Latency: repeatsLatency, Tokens: []sim.TokenConfig{{Token: "tok-repeats-1", Owner: "alice"}}}}})
	if err != nil {
		tb.Fatal(err)
	}
	s := &timedSim{srv: srv}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		srv.ServeHTTP(w, r)
		done := time.Now()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.first.IsZero() || arrived.Before(s.first) {
			s.first = arrived
		}
		if done.After(s.last) {
			s.last = done
		}
	}))
	tb.Cleanup(ts.Close)
	s.url = ts.URL
	return s
}

func (s *timedSim) span() (first, last time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, s.last
}

func repeatsOptions(base string) ratekeeper.Options {
	return ratekeeper.Options{Providers: []string{"github=" + base}, Tokens: map[string][]string{"github": {"tok-repeats-1"}},
		MaxWait: 2 * time.Minute}
}

// readAll GETs base+path for each path with workers goroutines and
// returns how many did not end in 200.
func readAll(client *http.Client, base string, paths []string, header http.Header) int {
	jobs := make(chan string)
	var mu sync.Mutex
	failed := 0
	var wg sync.WaitGroup
	for range repeatsWorkers {
		wg.Go(func() {
			for p := range jobs {
				req, _ := http.NewRequest(http.MethodGet, base+p, nil)
				for k, v := range header {
					req.Header[k] = v
				}
				resp, err := client.Do(req)
				ok := err == nil && resp.StatusCode == http.StatusOK
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if !ok {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		})
	}
	for _, p := range paths {
		jobs <- p
	}
	close(jobs)
	wg.Wait()
	return failed
}

func repeatsLibrary(b *testing.B, base string, paths []string, revalidate bool) int {
	opts := repeatsOptions(base)
	opts.AlwaysRevalidate = revalidate
	tr, err := ratekeeper.NewTransport(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	return readAll(&http.Client{Transport: tr}, base, paths, nil)
}

func repeatsBatch(b *testing.B, base string, paths []string) int {
	tr, err := ratekeeper.NewTransport(repeatsOptions(base))
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	var mu sync.Mutex
	failed := 0
	bt := ratekeeper.NewBatch(tr, ratekeeper.BatchOptions{InFlight: repeatsWorkers, OnResult: func(r ratekeeper.BatchResult) {
		if r.Err != nil || r.Response.StatusCode != http.StatusOK {
			mu.Lock()
			failed++
			mu.Unlock()
			return
		}
		_, _ = io.Copy(io.Discard, r.Response.Body)
	}})
	for _, p := range paths {
		req, _ := http.NewRequest(http.MethodGet, base+p, nil)
		if err := bt.Add(req); err != nil {
			b.Fatal(err)
		}
	}
	if err := bt.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	return failed
}

func repeatsFetch(b *testing.B, base string, paths []string) int {
	dir := b.TempDir()
	input, out := filepath.Join(dir, "urls.txt"), filepath.Join(dir, "results.jsonl")
	var lines strings.Builder
	for _, p := range paths {
		lines.WriteString(base + p + "\n")
	}
	if err := os.WriteFile(input, []byte(lines.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	p := startProcess(b, []string{"GITHUB_TOKEN=tok-repeats-1"}, "fetch", "-i", input, "-o", out,
		"--db", filepath.Join(dir, "rk.db"), "--provider", "github="+base, "--progress", "off")
	err := p.wait(b, 20*time.Minute)
	if code := exitCode(err); code != 0 && code != 1 {
		b.Fatalf("fetch: %v\n%s", err, p.out())
	}
	recs := outputRecords(b, out)
	failed := repeatsDistinct - len(recs)
	for _, rec := range recs {
		if rec["status"] != float64(http.StatusOK) {
			failed++
		}
	}
	return failed
}

func repeatsGateway(b *testing.B, base string, paths []string) int {
	gw, err := ratekeeper.NewGateway(ratekeeper.GatewayOptions{Client: repeatsOptions(base)})
	if err != nil {
		b.Fatal(err)
	}
	defer gw.Close()
	ts := httptest.NewServer(gw)
	defer ts.Close()
	return readAll(ts.Client(), ts.URL+"/github", paths, nil)
}
