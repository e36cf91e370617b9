package fetch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// fetchChild returns the ratekeeper fetch command line args, run as a
// child process in dir that a test can kill.
func fetchChild(ctx context.Context, dir string, env []string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"fetch"}, args...)...)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	return cmd, &stderr
}

// killWhen starts cmd and kills it with SIGKILL once ready says so,
// calling beforeKill, if any, just before.
func killWhen(t testing.TB, cmd *exec.Cmd, stderr *bytes.Buffer, ready func() bool, beforeKill ...func()) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for !ready() {
		select {
		case err := <-exited:
			t.Fatalf("fetch ended before it was killed (%v)\n%s", err, stderr)
		case <-time.After(2 * time.Millisecond):
		}
	}
	for _, f := range beforeKill {
		f()
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("fetch: %v, want killed", err)
	}
}

// TestCrashMidPagination kills a real `ratekeeper fetch --paginate` with
// SIGKILL while REST and GraphQL listings are half fetched, with half a
// page line at the end of the output, and runs the same command again:
// every page of every listing is in the output exactly once, and the
// server was asked for no page twice but those in flight at the kill —
// pages whose task was running: sent, or answered but not yet recorded
// (River's completer records outcomes every 250 ms) — not those recorded
// but not yet written, nor those whose task was added.
func TestCrashMidPagination(t *testing.T) {
	t.Run("quota to spare", func(t *testing.T) {
		t.Parallel()
		crashMidPagination(t, sim.APIConfig{Limit: 5000, Window: time.Hour}, 60, true)
	})
	// Quota binds (two tokens of 20 a second, REST and GraphQL alike), and
	// the kill comes halfway through the pages.
	t.Run("quota bound", func(t *testing.T) {
		t.Parallel()
		crashMidPagination(t, sim.APIConfig{Limit: 20, Window: time.Second, WindowMode: sim.WindowFixed,
			Resources: map[string]sim.ResourceConfig{"graphql": {Limit: 20, Window: time.Second, WindowMode: sim.WindowFixed}}}, 112, false)
	})
}

// crashMidPagination runs the batch against api (with the GitHub dialect
// and two tokens), killing it once the server has answered killAt
// requests. With strict, a refusal by a rate limit fails the test; without,
// refusals are only counted out of the requests sent again: when quota
// binds, the next run frees the quota its killed predecessor had reserved
// for requests in flight, which the server may have counted already, and
// so may be refused once in that window.
func crashMidPagination(t *testing.T, api sim.APIConfig, killAt int, strict bool) {
	const concurrency = 4
	api.Dialect, api.Prefix = sim.DialectGitHub, "/github"
	api.Tokens = []sim.TokenConfig{{Token: "tok-alice-1"}, {Token: "tok-bob-1"}}
	// Slow enough answers that the kill lands mid-listing.
	api.Latency = 15 * time.Millisecond
	s := startSim(t, sim.Config{APIs: []sim.APIConfig{api}})
	dir := t.TempDir()
	var lines []string
	for i := range 12 {
		lines = append(lines, fmt.Sprintf("%s/github/repos/crash/r%d/issues?per_page=%d", s.URL, i, 4+i%3))
	}
	for i := range 6 {
		q := `query($endCursor: String) { repository(owner: "crash", name: "g` + fmt.Sprint(i) + `") { issues(first: 6, after: $endCursor) { nodes { number } pageInfo { hasNextPage endCursor } } } }`
		b, _ := json.Marshal(map[string]any{"url": s.URL + "/github/graphql", "method": "POST", "id": fmt.Sprintf("g%d", i), "body": map[string]any{"query": q}})
		lines = append(lines, string(b))
	}
	input := filepath.Join(dir, "requests.jsonl")
	writeFile(t, input, strings.Join(lines, "\n")+"\n")
	out := filepath.Join(dir, "results.jsonl")
	db := sqliteDSN(t)
	args := []string{"-i", input, "-o", out, "--db", db, "--paginate",
		"--provider", "github=" + s.URL + "/github", "--policy", "greedy",
		"--concurrency", fmt.Sprint(concurrency), "--max-wait", "1s", "--timeout", "10s",
		"--progress", "lines", "--progress-every", "1s"}
	env := []string{"GITHUB_TOKEN=tok-alice-1,tok-bob-1"}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	first, firstErr := fetchChild(ctx, dir, env, args...)
	// The kill lands when the server has answered killAt requests, whatever
	// the output holds: some answers are then in tasks, not yet in lines.
	var startedPre, inFlightPre int
	killWhen(t, first, firstErr, func() bool { return s.total() >= killAt }, func() { startedPre, inFlightPre = s.flight() })
	startedPost, _ := s.flight()
	// A request in flight at the kill was in flight just before it, or
	// started after.
	atServer := inFlightPre + startedPost - startedPre
	q, err := tasks.Open(ctx, db, tasks.Options{})
	if err != nil {
		t.Fatal(err)
	}
	running, err := q.List(ctx, tasks.Filter{State: tasks.StateRunning, Limit: 1000})
	q.Close()
	if err != nil {
		t.Fatal(err)
	}
	inFlight := len(running)
	before := completeLines(t, out)
	servedBefore := s.total()
	// Half a page line, as a kill in the middle of a write leaves it.
	last := parseRecords(t, []byte(before[len(before)-1]+"\n"))[0]
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, `{"url":%q,"page":%d,"sta`, last.URL, last.Page+1)
	f.Close()

	second, secondErr := fetchChild(ctx, dir, env, args...)
	if err := second.Run(); err != nil {
		t.Fatalf("second fetch: %v\n%s", err, secondErr)
	}
	recs := readRecords(t, out)
	by := pages(t, recs)
	if len(by) != len(lines) {
		t.Errorf("%d listings in the output, want %d", len(by), len(lines))
	}
	extra := s.total() - s.refusals() - len(recs)
	t.Logf("killed after %d lines, %d requests served, %d at the server, %d tasks running; %d pages in all, %d requests (%d refused): %d sent again", len(before), servedBefore, atServer, inFlight, len(recs), s.total(), s.refusals(), extra)
	if extra < 0 || extra > inFlight {
		t.Errorf("%d requests for %d pages: %d sent again, want at most the %d in flight at the kill", s.total(), len(recs), extra, inFlight)
	}
	if len(before) >= len(recs) {
		t.Errorf("every page was written before the kill; make the listings longer")
	}
	if !strings.Contains(secondErr.String(), "torn line") {
		t.Errorf("second run did not say it cut off the torn line:\n%s", secondErr)
	}
	if v := s.Stats().Total.Violations; v != 0 && strict {
		t.Errorf("%d rate-limit violations, want 0", v)
	}
}

// TestCrashPostInFlight: a POST in flight when fetch is killed is not sent
// again by the next run, which writes it as an unknown outcome; one with an
// Idempotency-Key is sent again.
func TestCrashPostInFlight(t *testing.T) {
	var (
		mu      sync.Mutex
		arrived = map[string]int{}
		hold    = true
	)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body: only then does the server notice the client
		// going away (and end the request's context).
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		arrived[r.URL.Path]++
		wait := hold
		mu.Unlock()
		if wait {
			<-r.Context().Done() // the client goes away first
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"created":true}`)
	})
	// Two servers: the client learns an unknown host's limits from one
	// answer at a time, so two requests to one host would not both be in
	// flight.
	srv, keyed := httptest.NewServer(handler), httptest.NewServer(handler)
	defer srv.Close()
	defer keyed.Close()
	count := func(path string) int {
		mu.Lock()
		defer mu.Unlock()
		return arrived[path]
	}
	dir := t.TempDir()
	input := filepath.Join(dir, "posts.jsonl")
	writeFile(t, input, fmt.Sprintf(`{"url": "%s/once", "method": "POST", "body": {"n": 1}, "id": "once"}
{"url": "%s/keyed", "method": "POST", "headers": {"Idempotency-Key": "k-1"}, "body": {"n": 2}, "id": "keyed"}
`, srv.URL, keyed.URL))
	out := filepath.Join(dir, "results.jsonl")
	args := []string{"-i", input, "-o", out, "--db", sqliteDSN(t), "--max-wait", "1s", "--timeout", "60s", "--progress", "off"}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	first, firstErr := fetchChild(ctx, dir, nil, args...)
	killWhen(t, first, firstErr, func() bool { return count("/once") == 1 && count("/keyed") == 1 })
	mu.Lock()
	hold = false
	mu.Unlock()

	second, secondErr := fetchChild(ctx, dir, nil, args...)
	err := second.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("second fetch: %v, want exit status 1 (a request failed)\n%s", err, secondErr)
	}
	if n := count("/once"); n != 1 {
		t.Errorf("the POST without an Idempotency-Key was sent %d times, want once", n)
	}
	if n := count("/keyed"); n != 2 {
		t.Errorf("the POST with an Idempotency-Key was sent %d times, want twice (again after the kill)", n)
	}
	by := map[string]fetch.Record{}
	for _, r := range readRecords(t, out) {
		by[string(r.ID)] = r
	}
	if r := by[`"once"`]; !r.UnknownOutcome || !strings.Contains(r.Error, "unknown outcome") || !strings.Contains(r.Error, "Idempotency-Key") || r.Status != 0 {
		t.Errorf("POST in flight at the kill: %+v, want an unknown outcome", r)
	}
	if r := by[`"keyed"`]; r.UnknownOutcome || r.Status != http.StatusCreated {
		t.Errorf("POST with an Idempotency-Key: %+v, want 201", r)
	}
}
