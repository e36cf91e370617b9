package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// The mixed workload of package batch's BenchmarkMixedRESTAndGraphQL,
// through `ratekeeper fetch -i requests.jsonl` and through `ratekeeper
// tasks worker`: one GitHub user, REST 200 requests and GraphQL 300
// points per 10-second window; 400 REST GETs and 120 queries of 2 to 9
// points (540 in all), the queries denser early (80 of the first 160
// lines); 20 ms answers; 8 in flight.
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

// BenchmarkFetchMixedRESTAndGraphQL runs the mixed workload against the
// simulator in real time through `ratekeeper fetch -i` (--concurrency 8,
// a SQLite --db) and through `ratekeeper tasks worker` (--concurrency 8,
// the same lines submitted as http tasks beforehand), side by side. It
// reports the time from the simulator's first request to its last answer
// as a ratio to the ideal (mixedIdeal, from that first request), the
// process's whole run (the worker's until its last task was seen
// completed), and the refusals; it fails unless every line is answered
// 200 once.
//
//	go test ./cmd/ratekeeper -run '^$' -bench FetchMixedRESTAndGraphQL -benchtime 1x -count 3
func BenchmarkFetchMixedRESTAndGraphQL(b *testing.B) {
	b.Run("fetch", func(b *testing.B) { benchMixed(b, mixedFetch) })
	b.Run("tasks-worker", func(b *testing.B) { benchMixed(b, mixedWorker) })
}

// A mixedFace sends the workload's lines through one face of ratekeeper
// with base as the GitHub provider's URL, files in dir, and returns how
// long its process ran, the ids of the lines answered 200 (with how often)
// and how many answers it gave. served is closed once the server has
// answered as many requests as there are lines.
type mixedFace func(b *testing.B, lines []string, base, dir string, served <-chan struct{}) (ran time.Duration, ok map[string]int, answers int)

func benchMixed(b *testing.B, face mixedFace) {
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
		count, served := 0, make(chan struct{})
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
			if count++; count == mixedREST+mixedQueries {
				close(served)
			}
			mu.Unlock()
		}))
		base := ts.URL + "/github"
		makespan, ok, answers := face(b, mixedLines(base), base, b.TempDir(), served)
		ts.Close()
		if n := mixedREST + mixedQueries; answers != n || len(ok) != n {
			b.Errorf("%d answers, %d distinct ids answered 200; want %d", answers, len(ok), n)
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

// mixedFetch sends the lines with `ratekeeper fetch -i`.
func mixedFetch(b *testing.B, lines []string, base, dir string, _ <-chan struct{}) (time.Duration, map[string]int, int) {
	input, out := filepath.Join(dir, "requests.jsonl"), filepath.Join(dir, "results.jsonl")
	if err := os.WriteFile(input, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	p := startProcess(b, []string{"GITHUB_TOKEN=tok-mixed-1"}, "fetch", "-i", input, "-o", out,
		"--db", filepath.Join(dir, "rk.db"), "--provider", "github="+base, "--progress", "off",
		"--concurrency", fmt.Sprint(mixedInFlight))
	if err := p.wait(b, 10*time.Minute); err != nil {
		b.Fatalf("fetch: %v\n%s", err, p.out())
	}
	ran := time.Since(start)
	raw, err := os.ReadFile(out)
	if err != nil {
		b.Fatal(err)
	}
	ok, records := map[string]int{}, strings.Split(strings.TrimSpace(string(raw)), "\n")
	for _, l := range records {
		var rec struct {
			ID     any `json:"id"`
			Status int `json:"status"`
		}
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Status == http.StatusOK {
			ok[fmt.Sprint(rec.ID)]++
		}
	}
	return ran, ok, len(records)
}

// mixedWorker submits the lines as http tasks (in their order, each
// tagged with its id in a header the simulator ignores), then runs
// `ratekeeper tasks worker` until every task has completed. It reads the
// database only once the server has served every line, so that its reads
// take no time from the worker.
func mixedWorker(b *testing.B, lines []string, base, dir string, served <-chan struct{}) (time.Duration, map[string]int, int) {
	var inputs strings.Builder
	for _, l := range lines {
		var line struct {
			URL, Method, ID string
			Body            json.RawMessage
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			b.Fatal(err)
		}
		in := tasks.HTTPInput{URL: line.URL, Method: line.Method, Body: string(line.Body), Headers: map[string]string{mixedIDHeader: line.ID}}
		if len(line.Body) > 0 {
			in.Headers["Content-Type"] = "application/json"
		}
		raw, err := json.Marshal(in)
		if err != nil {
			b.Fatal(err)
		}
		inputs.Write(raw)
		inputs.WriteByte('\n')
	}
	input, db := filepath.Join(dir, "tasks.jsonl"), filepath.Join(dir, "rk.db")
	if err := os.WriteFile(input, []byte(inputs.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	mustRun(b, nil, "tasks", "--db", db, "submit", "-t", "http", "--jsonl", "-i", "@"+input)
	q := openTasks(b, db)
	start := time.Now()
	p := startProcess(b, []string{"GITHUB_TOKEN=tok-mixed-1"}, "tasks", "worker", "--db", db,
		"--provider", "github="+base, "--concurrency", fmt.Sprint(mixedInFlight))
	select {
	case <-served:
	case <-time.After(10 * time.Minute):
		b.Fatalf("tasks worker: the server had not served every line after 10 minutes:\n%s", p.out())
	}
	all := awaitAllFinal(b, q, func() string { return p.out() })
	ran := time.Since(start)
	p.stop(b)
	ok := map[string]int{}
	for _, t := range all {
		var in tasks.HTTPInput
		var res tasks.HTTPResult
		if t.State == tasks.StateCompleted && json.Unmarshal(t.Input, &in) == nil && json.Unmarshal(t.Result, &res) == nil && res.Status == http.StatusOK {
			ok[in.Headers[mixedIDHeader]]++
		}
	}
	return ran, ok, len(all)
}

// awaitAllFinal lists the database's tasks every 20 ms until none is
// open, within a minute (the server has served every request: only the
// records are left to write), and returns them; out says what the
// workers printed, for a failure.
func awaitAllFinal(b *testing.B, q *tasks.Queue, out func() string) []*tasks.Task {
	b.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		all, err := q.List(context.Background(), tasks.Filter{Limit: 10_000})
		if err != nil {
			b.Fatal(err)
		}
		if !slices.ContainsFunc(all, func(t *tasks.Task) bool { return !t.State.Final() }) {
			return all
		}
		if time.Now().After(deadline) {
			b.Fatalf("tasks still open a minute after the server served every request:\n%s", out())
		}
	}
}

// mixedIDHeader carries a task's line id in its request.
const mixedIDHeader = "X-Mixed-Id"
