package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/batch"
	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

const (
	unannouncedUsers    = 120
	unannouncedProjects = 400
	unannouncedLatency  = 20 * time.Millisecond
	unannouncedWorkers  = 8 // the library's goroutines; fetch keeps its default --concurrency
)

// BenchmarkUnannouncedLimit is a batch of 120 GET /users/:id and 400
// project reads, shuffled, against one token whose main limit is
// generous and announced while /users/* has a limit of its own that
// says nothing until it refuses (sim.UsersThrottle), scaled to 40 per
// aligned 10-second window; answers take 20 ms. It runs through
// `ratekeeper fetch` with its defaults, through the library (a
// transport, 8 goroutines) and through the batch API (package batch, 8 in
// flight), with each refusal kind: GitLab's 429 with
// Retry-After and the throttle's RateLimit-* ("headers"), GitLab's 429
// with no header at all ("bare"), and the bare 429 of a host that sends
// no rate-limit header ever ("generic", Gitea's dialect). The "realscale"
// runs keep GitLab's 60-second window (three minutes each).
//
// Per run it reports the simulator's early retries (requests to the
// refused limit before the time its refusal named), its refusals, the
// refusal episodes (refusals a window or more after an episode's first
// start a new one), the most refusals in one window after the first
// refused one, the URLs that finally failed, and the time the 400
// project URLs took, as a ratio to the same client's time for them
// alone. The targets: 0 early retries, one refusal episode, a ratio of at
// most 1.1; with headerless 429s, at most one refusal per window after
// the first.
//
//	go test ./cmd/ratekeeper -run '^$' -bench 'UnannouncedLimit/.*/scaled' -benchtime 1x -timeout 30m
func BenchmarkUnannouncedLimit(b *testing.B) {
	variants := []struct {
		name string
		u    sim.UsersThrottle
	}{
		{"headers", sim.UsersThrottle{}},
		{"bare", sim.UsersThrottle{Refusal: sim.RefusalBare}},
		{"generic", sim.UsersThrottle{Generic: true, Refusal: sim.RefusalBare}},
	}
	for _, via := range []string{"cli", "library", "batch"} {
		for _, scale := range []string{"scaled", "realscale"} {
			for _, v := range variants {
				b.Run(via+"/"+scale+"/"+v.name, func(b *testing.B) {
					u := v.u
					u.Latency = unannouncedLatency
					if scale == "scaled" {
						u.Limit, u.Window = 40, 10*time.Second
					}
					for b.Loop() {
						runUnannounced(b, via, u)
					}
				})
			}
		}
	}
}

func runUnannounced(b *testing.B, via string, u sim.UsersThrottle) {
	window := cmpOr(u.Window, time.Minute)
	// The projects alone first: the same client's time for them.
	alone := startRecordedSim(b, u)
	projectsOnly, _ := u.Workload(alone.url, 0, unannouncedProjects, 1)
	start := atWindowStart(window)
	fetchAll(b, via, alone, u, projectsOnly)
	baseline := alone.lastProject().Sub(start)

	mixed := startRecordedSim(b, u)
	urls, _ := u.Workload(mixed.url, unannouncedUsers, unannouncedProjects, 1)
	start = atWindowStart(window)
	failed := fetchAll(b, via, mixed, u, urls)
	makespan := time.Since(start)
	projects := mixed.lastProject().Sub(start)

	st := mixed.srv.Stats()
	refused := mixed.refusals()
	ratio := projects.Seconds() / baseline.Seconds()
	b.Logf("%s: makespan %v; projects %v mixed vs %v alone (%.2f×); %d refusals in %d episodes, at most %d in a window after the first; %d early retries; %d URLs failed",
		via, makespan.Round(time.Millisecond), projects.Round(time.Millisecond), baseline.Round(time.Millisecond), ratio,
		len(refused), episodes(refused, window), maxPerWindowAfterFirst(refused, window), st.Total.EarlyRetries, failed)
	b.ReportMetric(float64(st.Total.EarlyRetries), "early-retries")
	b.ReportMetric(float64(len(refused)), "refusals")
	b.ReportMetric(float64(episodes(refused, window)), "refusal-episodes")
	b.ReportMetric(float64(maxPerWindowAfterFirst(refused, window)), "max-refusals-per-window-after-first")
	b.ReportMetric(ratio, "x-projects-alone")
	b.ReportMetric(makespan.Seconds(), "makespan-s")
	b.ReportMetric(float64(failed), "failed")
}

// recordedSim is a simulator behind an httptest server that notes when
// each refusal arrived and when the last project answer left.
type recordedSim struct {
	srv *sim.Server
	url string

	mu           sync.Mutex
	refused      []proxied
	lastProjDone time.Time
}

func startRecordedSim(tb testing.TB, u sim.UsersThrottle) *recordedSim {
	tb.Helper()
	srv, err := sim.New(u.Config())
	if err != nil {
		tb.Fatal(err)
	}
	s := &recordedSim{srv: srv}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		srv.ServeHTTP(rec, r)
		done := time.Now()
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case rec.status == http.StatusTooManyRequests:
			s.refused = append(s.refused, proxied{arrived: arrived, answered: done, status: rec.status})
		case rec.status == http.StatusOK && !strings.Contains(r.URL.Path, "/users/") && done.After(s.lastProjDone):
			s.lastProjDone = done
		}
	}))
	tb.Cleanup(ts.Close)
	s.url = ts.URL
	return s
}

func (s *recordedSim) refusals() []proxied {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]proxied(nil), s.refused...)
}

func (s *recordedSim) lastProject() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastProjDone
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// maxPerWindowAfterFirst is the most refusals that arrived in one aligned
// window after the window of the first refusal.
func maxPerWindowAfterFirst(refused []proxied, window time.Duration) int {
	if len(refused) == 0 {
		return 0
	}
	first := refused[0].arrived.Truncate(window)
	per := map[time.Time]int{}
	most := 0
	for _, r := range refused {
		if w := r.arrived.Truncate(window); w.After(first) {
			per[w]++
			most = max(most, per[w])
		}
	}
	return most
}

// fetchAll gets urls through the command or the library and returns how
// many did not end in 200.
func fetchAll(b *testing.B, via string, s *recordedSim, u sim.UsersThrottle, urls []string) int {
	name, kind, env, base := "gitlab", provider.GitLab, "GITLAB_TOKEN", s.url+"/api/v4"
	if u.Generic {
		name, kind, env, base = "codeberg", provider.Gitea, "CODEBERG_TOKEN", s.url+"/api/v1"
	}
	token := cmpOr(u.Token, "tok-bench-1")
	if via == "cli" {
		return fetchThroughCLI(b, env+"="+token, name+"="+base, urls)
	}
	p, err := provider.New(name, kind, base)
	if err != nil {
		b.Fatal(err)
	}
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		b.Fatal(err)
	}
	pool := creds.NewPool(name, creds.NewToken(name, 1, token, "bench"))
	tr, err := transport.New(transport.Options{Providers: reg, Pools: map[string]*creds.Pool{name: pool},
		Policy: quota.Policy{Kind: quota.Greedy}, MaxWait: 2 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	if via == "batch" {
		return fetchThroughBatch(b, tr, urls)
	}
	jobs := make(chan string)
	var mu sync.Mutex
	failed := 0
	var wg sync.WaitGroup
	for range unannouncedWorkers {
		wg.Go(func() {
			for u := range jobs {
				req, _ := http.NewRequest(http.MethodGet, u, nil)
				resp, err := tr.RoundTrip(req)
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
	for _, u := range urls {
		jobs <- u
	}
	close(jobs)
	wg.Wait()
	return failed
}

func fetchThroughCLI(b *testing.B, env, providerFlag string, urls []string) int {
	dir := b.TempDir()
	input, out := filepath.Join(dir, "urls.txt"), filepath.Join(dir, "results.jsonl")
	if err := os.WriteFile(input, []byte(strings.Join(urls, "\n")+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	p := startProcess(b, []string{env}, "fetch", "-i", input, "-o", out,
		"--db", filepath.Join(dir, "rk.db"), "--provider", providerFlag, "--progress", "off")
	err := p.wait(b, 20*time.Minute)
	if code := exitCode(err); code != 0 && code != 1 {
		b.Fatalf("fetch: %v\n%s", err, p.out())
	}
	recs := outputRecords(b, out)
	failed := len(urls) - len(recs)
	for _, rec := range recs {
		if rec["status"] != float64(http.StatusOK) {
			failed++
		}
	}
	return failed
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// fetchThroughBatch gets urls through a batch of unannouncedWorkers in
// flight and returns how many did not end in 200.
func fetchThroughBatch(b *testing.B, tr http.RoundTripper, urls []string) int {
	var mu sync.Mutex
	failed := 0
	bt := batch.New(tr, batch.Options{InFlight: unannouncedWorkers, OnResult: func(r batch.Result) {
		ok := r.Err == nil && r.Response.StatusCode == http.StatusOK
		if r.Err == nil {
			_, _ = io.Copy(io.Discard, r.Response.Body)
		}
		if !ok {
			mu.Lock()
			failed++
			mu.Unlock()
		}
	}})
	for _, u := range urls {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if err := bt.Add(req); err != nil {
			b.Fatal(err)
		}
	}
	if err := bt.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	return failed
}
