package fetch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// BenchmarkFetchPaginate: 50 listings of 1 to 40 pages, 25 REST (Link
// rel="next") and 25 GraphQL (pageInfo), through two tokens of distinct
// owners whose core and graphql buckets each allow limit requests (points)
// per window. Every page must be written once. It reports pages/s and
// x_ideal, the time taken over the ideal: the larger bucket's pages ÷
// (tokens × limit) windows — no client can go faster, since each bucket
// holds tokens × limit a window and pages of a listing come one after
// another.
func BenchmarkFetchPaginate(b *testing.B) {
	for _, c := range []struct {
		limit  int64
		window time.Duration
	}{{50, 5 * time.Second}, {20, 2 * time.Second}} {
		b.Run(fmt.Sprintf("limit=%d/window=%s", c.limit, c.window), func(b *testing.B) {
			benchPaginate(b, c.limit, c.window)
		})
	}
}

func benchPaginate(b *testing.B, limit int64, window time.Duration) {
	tokens := []string{"tok-alice-1", "tok-bob-1"}
	api := sim.APIConfig{Dialect: sim.DialectGitHub, Prefix: "/github", Limit: limit, Window: window, WindowMode: sim.WindowFixed,
		Resources: map[string]sim.ResourceConfig{"graphql": {Limit: limit, Window: window, WindowMode: sim.WindowFixed}},
		Tokens:    []sim.TokenConfig{{Token: tokens[0]}, {Token: tokens[1]}},
		Secondary: &sim.SecondaryConfig{}}
	lines, restPages, gqlPages := paginateBatch(b, api)
	ideal := time.Duration(float64(max(restPages, gqlPages)) / float64(int64(len(tokens))*limit) * float64(window))
	b.Logf("%d REST pages (core), %d GraphQL pages (graphql, 1 point each); ideal %v", restPages, gqlPages, ideal)
	var (
		elapsed  time.Duration
		requests int
		runs     int
	)
	for b.Loop() {
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{api}})
		if err != nil {
			b.Fatal(err)
		}
		var served atomic.Int64
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served.Add(1)
			srv.ServeHTTP(w, r)
		}))
		tr, err := ratekeeper.NewTransport(ratekeeper.Options{
			Providers: []string{"github=" + ts.URL + "/github"},
			Tokens:    map[string][]string{"github": tokens},
			Policy:    "greedy", MaxWait: time.Second,
		})
		if err != nil {
			b.Fatal(err)
		}
		input := strings.ReplaceAll(strings.Join(lines, "\n"), "BASE", ts.URL)
		entries, err := fetch.ReadEntries(strings.NewReader(input))
		if err != nil {
			b.Fatal(err)
		}
		targets, err := fetch.Plan(entries, "bench", false, tr.Registry())
		if err != nil {
			b.Fatal(err)
		}
		var out bytes.Buffer
		start := time.Now()
		sum, err := fetch.Run(context.Background(), targets, fetch.Options{
			DSN:         benchSQLite(b),
			BodyDir:     b.TempDir(),
			Client:      &http.Client{Transport: tr},
			Output:      fetch.NewStream(&out, "stdout"),
			Concurrency: 50,
			Timeout:     30 * time.Second,
			Paginate:    true,
			Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		elapsed += time.Since(start)
		tr.Close()
		ts.Close()
		recs := parseRecords(b, out.Bytes())
		if err != nil || sum.Failed != 0 || !sum.Done() || len(recs) != restPages+gqlPages {
			b.Fatalf("%+v, %v: %d pages written, want %d", sum, err, len(recs), restPages+gqlPages)
		}
		seen := map[string]bool{}
		for _, r := range recs {
			k := fmt.Sprintf("%s#%d", r.Ident(), r.Page)
			if seen[k] {
				b.Fatalf("%s written twice", k)
			}
			seen[k] = true
		}
		if v := srv.Stats().Total.Violations; v != 0 {
			b.Fatalf("%d violations", v)
		}
		requests += int(served.Load())
		runs++
	}
	pages := restPages + gqlPages
	b.ReportMetric(float64(pages*runs)/elapsed.Seconds(), "pages/s")
	b.ReportMetric(elapsed.Seconds()/float64(runs)/ideal.Seconds(), "x_ideal")
	b.ReportMetric(float64(requests-pages*runs)/float64(runs), "extra_requests")
	b.ReportMetric(float64(pages), "pages")
	b.ReportMetric(ideal.Seconds(), "ideal_s")
}

// paginateBatch returns the input lines of the batch (BASE standing for
// the server's URL) and its pages in each bucket: listing i has 1 + 13i
// mod 40 pages wanted, got by asking for ⌈issues ÷ pages⌉ issues a page;
// the issue counts come from a simulator of the same content.
func paginateBatch(b *testing.B, api sim.APIConfig) (lines []string, restPages, gqlPages int) {
	probe, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: sim.DialectGitHub, Prefix: "/github", Limit: 100_000, Window: time.Hour,
		Tokens: api.Tokens}}})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(probe)
	defer ts.Close()
	issues := func(repo string) int {
		req, _ := http.NewRequest("GET", ts.URL+"/github/repos/bench/"+repo, nil)
		req.Header.Set("Authorization", "token "+api.Tokens[0].Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			OpenIssuesCount int `json:"open_issues_count"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			b.Fatal(err)
		}
		return r.OpenIssuesCount
	}
	for i := range 50 {
		want := 1 + (13*i)%40
		repo := fmt.Sprintf("r%d", i)
		n := issues(repo)
		per := min(max((n+want-1)/want, 1), 100)
		pages := (n + per - 1) / per
		if i%2 == 0 {
			lines = append(lines, fmt.Sprintf("BASE/github/repos/bench/%s/issues?per_page=%d", repo, per))
			restPages += pages
			continue
		}
		q := fmt.Sprintf(`query($endCursor: String) { repository(owner: "bench", name: %q) { issues(first: %d, after: $endCursor) { nodes { number } pageInfo { hasNextPage endCursor } } } }`, repo, per)
		l, _ := json.Marshal(map[string]any{"url": "BASE/github/graphql", "method": "POST", "id": repo, "body": map[string]any{"query": q}})
		lines = append(lines, string(l))
		gqlPages += pages
	}
	return lines, restPages, gqlPages
}

// BenchmarkFetchPaginateKill runs the batch of BenchmarkFetchPaginate
// (limit 20 a 2 s window) as `ratekeeper fetch --paginate -o FILE`, kills
// it with SIGKILL once the server has answered half the pages, and runs
// the same command again to the end. It reports the requests beyond the
// pages across both runs, the tasks running at the kill (the most that may
// be sent again: sent, or answered but not yet recorded), the server's
// violations, and x_ideal for both runs together, restart included.
func BenchmarkFetchPaginateKill(b *testing.B) {
	const limit, window = 20, 2 * time.Second
	tokens := []string{"tok-alice-1", "tok-bob-1"}
	api := sim.APIConfig{Dialect: sim.DialectGitHub, Prefix: "/github", Limit: limit, Window: window, WindowMode: sim.WindowFixed,
		Resources: map[string]sim.ResourceConfig{"graphql": {Limit: limit, Window: window, WindowMode: sim.WindowFixed}},
		Tokens:    []sim.TokenConfig{{Token: tokens[0]}, {Token: tokens[1]}},
		Secondary: &sim.SecondaryConfig{}}
	lines, restPages, gqlPages := paginateBatch(b, api)
	pages := restPages + gqlPages
	ideal := time.Duration(float64(max(restPages, gqlPages)) / float64(len(tokens)*limit) * float64(window))
	var (
		elapsed              time.Duration
		extra, running, runs int
		violations           int64
	)
	for b.Loop() {
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{api}})
		if err != nil {
			b.Fatal(err)
		}
		var answered, sent atomic.Int64
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sent.Add(1)
			srv.ServeHTTP(w, r)
			answered.Add(1)
		}))
		dir := b.TempDir()
		input, out, db := filepath.Join(dir, "requests.jsonl"), filepath.Join(dir, "results.jsonl"), filepath.Join(dir, "rk.db")
		if err := os.WriteFile(input, []byte(strings.ReplaceAll(strings.Join(lines, "\n"), "BASE", ts.URL)+"\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		args := []string{"-i", input, "-o", out, "--db", db, "--paginate", "--provider", "github=" + ts.URL + "/github",
			"--policy", "greedy", "--concurrency", "50", "--max-wait", "1s", "--timeout", "30s", "--progress", "off"}
		env := []string{"GITHUB_TOKEN=" + strings.Join(tokens, ",")}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		start := time.Now()
		first, firstErr := fetchChild(ctx, dir, env, args...)
		killWhen(b, first, firstErr, func() bool { return answered.Load() >= int64(pages/2) })
		q, err := tasks.Open(ctx, db, tasks.Options{})
		if err != nil {
			b.Fatal(err)
		}
		ts2, err := q.List(ctx, tasks.Filter{State: tasks.StateRunning, Limit: 10_000})
		q.Close()
		if err != nil {
			b.Fatal(err)
		}
		second, secondErr := fetchChild(ctx, dir, env, args...)
		if err := second.Run(); err != nil {
			b.Fatalf("second run: %v\n%s", err, secondErr)
		}
		elapsed += time.Since(start)
		cancel()
		ts.Close()
		b.StopTimer()
		data, err := os.ReadFile(out)
		if err != nil {
			b.Fatal(err)
		}
		recs := parseRecords(b, data)
		seen := map[string]bool{}
		for _, r := range recs {
			k := fmt.Sprintf("%s#%d", r.Ident(), r.Page)
			if seen[k] || r.Failed() {
				b.Fatalf("%s written twice, or failed: %+v", k, r)
			}
			seen[k] = true
		}
		if len(recs) != pages {
			b.Fatalf("%d pages written, want %d", len(recs), pages)
		}
		extra += int(sent.Load()) - pages
		running += len(ts2)
		st := srv.Stats()
		violations += st.Total.Violations
		for _, bs := range st.Buckets {
			if bs.Violations > 0 {
				b.Logf("run %d: %s/%s: %d violations (%d primary)", runs, bs.Owner, bs.Resource, bs.Violations, bs.PrimaryViolations)
			}
		}
		runs++
		b.StartTimer()
	}
	b.ReportMetric(float64(extra)/float64(runs), "extra_requests")
	b.ReportMetric(float64(running)/float64(runs), "running_at_kill")
	b.ReportMetric(float64(violations)/float64(runs), "violations")
	b.ReportMetric(elapsed.Seconds()/float64(runs)/ideal.Seconds(), "x_ideal")
	b.ReportMetric(float64(pages), "pages")
}
