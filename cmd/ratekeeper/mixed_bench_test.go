package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// The mixed workload of package batch's BenchmarkMixedRESTAndGraphQL,
// through `ratekeeper fetch -i requests.jsonl`: one GitHub user, REST 200
// requests and GraphQL 300 points per 10-second window; 400 REST GETs and
// 120 queries of 2 to 9 points (540 in all), the queries denser early (80
// of the first 160 lines); 20 ms answers; 8 in flight.
const (
	mixedREST, mixedQueries   = 400, 120
	mixedRESTLimit, mixedPts  = 200, 300
	mixedWindow, mixedLatency = 10 * time.Second, 20 * time.Millisecond
	mixedInFlight             = 8
)

var mixedCosts = [...]int{2, 9, 3, 4, 2, 5, 7, 3, 6, 4}

// mixedQuery is a query GitHub prices at n + 1 points.
const mixedQuery = `query($n: Int!) { viewer { repositories(first: 100) { nodes { issues(first: $n) { nodes { labels(first: 1) { totalCount } } } } } } }`

// mixedLines is the workload as JSON lines, in the order of package
// batch's test.
func mixedLines(base string) []string {
	var out []string
	r, q := 0, 0
	rest := func(n int) {
		for ; n > 0 && r < mixedREST; n-- {
			out = append(out, fmt.Sprintf(`{"url": "%s/repos/o/r%d", "id": "r%d"}`, base, r, r))
			r++
		}
	}
	query := func() {
		if q < mixedQueries {
			body, _ := json.Marshal(map[string]any{"query": mixedQuery, "variables": map[string]any{"n": mixedCosts[q%len(mixedCosts)] - 1}})
			out = append(out, fmt.Sprintf(`{"url": "%s/graphql", "method": "POST", "id": "q%d", "body": %s}`, base, q, body))
			q++
		}
	}
	for range 80 {
		query()
		rest(1)
	}
	for range 40 {
		rest(8)
		query()
	}
	rest(mixedREST)
	return out
}

// mixedIdeal is the earliest a perfect client could finish one pool's
// work of units at limit per window, its first request at start, with
// mixedInFlight in flight: each window spent in full as it opens, the last
// window's requests taking rounds of one answer. GitHub's rolling windows
// reset on whole seconds: the first ends a window after the start's whole
// second, each later one a second later than a window. The workload's
// ideal is the larger of its two pools' (batch/mixed_test.go's formula).
func mixedIdeal(start time.Time, units, limit, requests int) time.Duration {
	windows := (units + limit - 1) / limit
	lastUnits := units - (windows-1)*limit
	lastRequests := (lastUnits*requests + units - 1) / units
	tail := time.Duration((lastRequests+mixedInFlight-1)/mixedInFlight) * mixedLatency
	if windows == 1 {
		return tail
	}
	first := mixedWindow - time.Duration(start.UnixNano()%int64(time.Second))
	return first + time.Duration(windows-2)*(mixedWindow+time.Second) + tail
}

// BenchmarkFetchMixedRESTAndGraphQL runs the mixed workload through
// `ratekeeper fetch -i` (--concurrency 8, a SQLite --db) against the
// simulator in real time. It reports the time from the simulator's first
// request to its last answer as a ratio to the ideal (mixedIdeal, from
// that first request), the process's whole run, and the refusals; it
// fails unless every line is answered 200 once.
//
//	go test ./cmd/ratekeeper -run '^$' -bench FetchMixedRESTAndGraphQL -benchtime 1x -count 3
func BenchmarkFetchMixedRESTAndGraphQL(b *testing.B) {
	for b.Loop() {
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: sim.DialectGitHub, Prefix: "/github",
			Limit: mixedRESTLimit, Window: mixedWindow, Latency: mixedLatency,
			Resources: map[string]sim.ResourceConfig{"graphql": {Limit: mixedPts, Window: mixedWindow}},
			Tokens:    []sim.TokenConfig{{Token: "tok-mixed-1", Owner: "alice"}}}}})
		if err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		var first, last time.Time
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived := time.Now()
			srv.ServeHTTP(w, r)
			done := time.Now()
			mu.Lock()
			if first.IsZero() || arrived.Before(first) {
				first = arrived
			}
			if done.After(last) {
				last = done
			}
			mu.Unlock()
		}))
		dir := b.TempDir()
		input, out := filepath.Join(dir, "requests.jsonl"), filepath.Join(dir, "results.jsonl")
		if err := os.WriteFile(input, []byte(strings.Join(mixedLines(ts.URL+"/github"), "\n")+"\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		p := startProcess(b, []string{"GITHUB_TOKEN=tok-mixed-1"}, "fetch", "-i", input, "-o", out,
			"--db", filepath.Join(dir, "rk.db"), "--provider", "github="+ts.URL+"/github", "--progress", "off",
			"--concurrency", fmt.Sprint(mixedInFlight))
		if err := p.wait(b, 10*time.Minute); err != nil {
			b.Fatalf("fetch: %v\n%s", err, p.out())
		}
		makespan := time.Since(start)
		ts.Close()
		raw, err := os.ReadFile(out)
		if err != nil {
			b.Fatal(err)
		}
		ok, lines := map[string]int{}, strings.Split(strings.TrimSpace(string(raw)), "\n")
		for _, l := range lines {
			var rec struct {
				ID     any `json:"id"`
				Status int `json:"status"`
			}
			if json.Unmarshal([]byte(l), &rec) == nil && rec.Status == http.StatusOK {
				ok[fmt.Sprint(rec.ID)]++
			}
		}
		if n := mixedREST + mixedQueries; len(lines) != n || len(ok) != n {
			b.Errorf("%d lines in the output, %d distinct ids answered 200; want %d", len(lines), len(ok), n)
		}
		points := 0
		for i := range mixedQueries {
			points += mixedCosts[i%len(mixedCosts)]
		}
		ideal := max(mixedIdeal(first, mixedREST, mixedRESTLimit, mixedREST), mixedIdeal(first, points, mixedPts, mixedQueries))
		took := last.Sub(first)
		var refusals, restCharged, ptsCharged int64
		for _, res := range []string{"core", "graphql"} {
			st, _ := srv.Stats().BucketFor("github", "alice", res)
			refusals += st.PrimaryViolations + st.SecondaryViolations
			if res == "core" {
				restCharged = st.Charged
			} else {
				ptsCharged = st.Charged
			}
		}
		b.Logf("first request to last answer %v against an ideal of %v (%.3f×); the process ran %v; %d refusals, %d REST and %d points charged",
			took.Round(time.Millisecond), ideal.Round(time.Millisecond), took.Seconds()/ideal.Seconds(), makespan.Round(time.Millisecond), refusals, restCharged, ptsCharged)
		b.ReportMetric(took.Seconds()/ideal.Seconds(), "x-ideal")
		b.ReportMetric(makespan.Seconds(), "makespan-s")
		b.ReportMetric(float64(refusals), "refusals")
	}
}
