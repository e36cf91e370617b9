package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startTasksWorker runs `ratekeeper tasks worker` in-process until the
// returned stop is called; stop returns the command's stderr and error.
func startTasksWorker(t *testing.T, args ...string) (stop func() (string, error)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	root := NewRoot()
	root.SetArgs(append([]string{"tasks", "worker"}, args...))
	var stderr bytes.Buffer
	root.SetOut(io.Discard)
	root.SetErr(&stderr)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	stopped := false
	var err error
	stop = func() (string, error) {
		if !stopped {
			stopped = true
			cancel()
			err = <-done
		}
		return stderr.String(), err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// mustRun runs a command that must succeed and returns its stdout.
func mustRun(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, stderr, code := run(t, stdin, args...)
	if code != 0 {
		t.Fatalf("ratekeeper %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	return out
}

func TestTasksCommandsEndToEnd(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Ratekeeper-Cache", "miss")
		io.WriteString(w, "hello from "+r.URL.Path)
	}))
	defer srv.Close()
	dir := t.TempDir()
	db := filepath.Join(dir, "tasks.db")

	input := `{"url":"` + srv.URL + `/readme"}`
	id := strings.TrimSpace(mustRun(t, "", "tasks", "--db", db, "submit", "-t", "http", "-i", input, "--max-reschedules", "100", "--timeout", "30s"))
	if id != "1" {
		t.Fatalf("submit printed %q, want the id 1", id)
	}
	got := mustRun(t, "", "tasks", "--db", db, "get", id)
	for _, want := range []string{"task 1 (http): pending", "attempt: 0, retry_count: 0, max_retries: 3", "reschedule_count: 0, max_reschedules: 100", "timeout: 30s", `input: {"url":"` + srv.URL + `/readme"}`} {
		if !strings.Contains(got, want) {
			t.Errorf("get output lacks %q:\n%s", want, got)
		}
	}
	if list := mustRun(t, "", "tasks", "--db", db, "list", "--state", "pending"); !strings.Contains(list, "ID") || !strings.Contains(list, "1   http  pending") {
		t.Errorf("list output:\n%s", list)
	}

	stop := startTasksWorker(t, "--db", db, "--concurrency", "2", "--worker-id", "cli-w")
	var task struct {
		State  string `json:"state"`
		Result struct {
			Status  int                 `json:"status"`
			Body    string              `json:"body"`
			Headers map[string][]string `json:"headers"`
		} `json:"result"`
		MaxReschedules *int    `json:"max_reschedules"`
		Timeout        *string `json:"timeout"`
	}
	deadline := time.Now().Add(20 * time.Second)
	for task.State != "completed" {
		if time.Now().After(deadline) {
			t.Fatalf("task not completed in 20s: %+v", task)
		}
		time.Sleep(10 * time.Millisecond)
		if err := json.Unmarshal([]byte(mustRun(t, "", "tasks", "--db", db, "get", id, "--json")), &task); err != nil {
			t.Fatal(err)
		}
	}
	stderr, err := stop()
	if err != nil {
		t.Fatalf("worker: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "working tasks of type http, poll on "+db) || !strings.Contains(stderr, "worker stopped") {
		t.Errorf("worker stderr:\n%s", stderr)
	}
	if task.Result.Status != 200 || task.Result.Body != "hello from /readme" || task.Result.Headers["X-Ratekeeper-Cache"][0] != "miss" ||
		task.MaxReschedules == nil || *task.MaxReschedules != 100 || task.Timeout == nil || *task.Timeout != "30s" {
		t.Errorf("get --json = %+v", task)
	}
	hist := mustRun(t, "", "tasks", "--db", db, "history", id)
	lines := strings.Split(strings.TrimSpace(hist), "\n")
	wantEnds := []string{"  created", "  claimed by worker cli-w (attempt 1)", "  completed"}
	if len(lines) != len(wantEnds) {
		t.Fatalf("history:\n%s", hist)
	}
	for i, w := range wantEnds {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("history line %d = %q, want it to end with %q", i, lines[i], w)
		}
	}
	if js := mustRun(t, "", "tasks", "--db", db, "history", id, "--json"); strings.Count(js, "\n") != 3 || !strings.Contains(js, `"kind":"claimed"`) {
		t.Errorf("history --json:\n%s", js)
	}
	if js := mustRun(t, "", "tasks", "--db", db, "list", "--state", "completed", "--json"); strings.Count(js, "\n") != 1 || !strings.Contains(js, `"state":"completed"`) {
		t.Errorf("list --json:\n%s", js)
	}

	// idempotent submit, input from stdin and from a file
	first := mustRun(t, `{"url":"`+srv.URL+`/a"}`, "tasks", "--db", db, "submit", "-t", "http", "-i", "-", "--unique-key", "a", "--at", time.Now().Add(time.Hour).Format(time.RFC3339))
	req := filepath.Join(dir, "req.json")
	if err := os.WriteFile(req, []byte(`{"url":"`+srv.URL+`/a"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr2, code := run(t, "", "tasks", "--db", db, "submit", "-t", "http", "-i", "@"+req, "--unique-key", "a")
	if code != 0 || out != first || !strings.Contains(stderr2, `already exists with unique key "a"`) {
		t.Errorf("second unique submit: exit %d, out %q (first %q), stderr %q", code, out, first, stderr2)
	}
	id2 := strings.TrimSpace(first)
	if out := mustRun(t, "", "tasks", "--db", db, "cancel", id2); out != "task "+id2+" cancelled\n" {
		t.Errorf("cancel printed %q", out)
	}
	if _, stderr, code := run(t, "", "tasks", "--db", db, "cancel", id2); code != 1 || !strings.Contains(stderr, "is already cancelled") {
		t.Errorf("cancel again: exit %d, %s", code, stderr)
	}
	if out := mustRun(t, "", "tasks", "--db", db, "migrate"); out != "river: up to date\nratekeeper tasks: up to date\n" {
		t.Errorf("migrate on a current database printed %q", out)
	}
	fresh := filepath.Join(dir, "fresh.db")
	if out := mustRun(t, "", "tasks", "--db", fresh, "migrate"); !strings.Contains(out, "river: applied version 1, ") || !strings.Contains(out, "ratekeeper tasks: applied version 1, 2, 3\n") {
		t.Errorf("migrate on a fresh database printed %q", out)
	}
}

func TestTasksCommandsRejectBadInput(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "never.db")
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"submit", "-i", "{}"}, 2, "-t/--type is required"},
		{[]string{"submit", "-t", "http", "-i", `{"url":`}, 2, "input is not valid JSON"},
		{[]string{"submit", "-t", "No Such", "-i", `{}`}, 2, `task type "No Such": use 2-64 characters`},
		{[]string{"submit", "-t", "poll", "-i", `{"url":"ftp://x"}`}, 2, `poll task input: url "ftp://x": want an absolute http:// or https:// URL`},
		{[]string{"submit", "-t", "http", "--priority", "0"}, 2, "--priority 0: want 1 (first) to 4 (last)"},
		{[]string{"submit", "-t", "http", "--jsonl", "-i", "{\"url\":\"https://x.test/\"}\n\n{\"url\":\"x\"}\n"}, 2, `input line 3: invalid task: http input: url "x"`},
		{[]string{"submit", "-t", "http", "--jsonl", "--unique-key", "k"}, 2, "--unique-key names one task"},
		{[]string{"submit", "-t", "http", "--jsonl", "-i", "\n"}, 2, "no input lines"},
		{[]string{"worker", "--fail-on-status", "5xx"}, 2, "5xx answers are retried"},
		{[]string{"worker", "--fail-on-status", "nope"}, 2, `"nope": want status codes such as 404`},
		{[]string{"worker", "--rate-limited-priority", "lower"}, 2, "--rate-limited-priority \"lower\": want raise or keep"},
		{[]string{"worker", "--metrics-listen", "0.0.0.0:9464"}, 2, "--metrics-listen 0.0.0.0:9464 is not a loopback address"},
		{[]string{"worker", "--max-wait", "0s"}, 2, "--max-wait 0s"},
		{[]string{"submit", "-t", "http", "-i", `{"url":"localhost"}`}, 2, "want an absolute http:// or https:// URL"},
		{[]string{"submit", "-t", "http", "--max-retries", "-1"}, 2, "--max-retries -1: want 0 or more"},
		{[]string{"submit", "-t", "http", "--max-reschedules", "-2"}, 2, "--max-reschedules -2"},
		{[]string{"submit", "-t", "http", "--timeout", "-5s"}, 2, "--timeout -5s"},
		{[]string{"submit", "-t", "http", "--at", "tomorrow"}, 2, `--at "tomorrow": want an RFC 3339 time`},
		{[]string{"submit", "-t", "http", "-i", "@" + filepath.Join(dir, "missing.json")}, 2, "no such file"},
		{[]string{"get", "abc"}, 2, `task id "abc"`},
		{[]string{"get"}, 2, "accepts 1 arg(s)"},
		{[]string{"list", "--state", "done"}, 2, "valid: pending, running, completed, failed, cancelled"},
		{[]string{"list", "--limit", "0"}, 2, "--limit 0"},
		{[]string{"worker", "--concurrency", "0"}, 2, "--concurrency 0"},
		{[]string{"worker", "--rescue-after", "0s"}, 2, "--rescue-after 0s: want a second or more"},
	} {
		_, stderr, code := run(t, "", append([]string{"tasks", "--db", db}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.says) {
			t.Errorf("tasks %s: exit %d, stderr %q; want exit %d saying %q", strings.Join(c.args, " "), code, stderr, c.code, c.says)
		}
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("rejected commands created the database (stat: %v)", err)
	}

	// unknown ids and unreachable databases: exit 1 with what is wrong
	good := filepath.Join(dir, "good.db")
	mustRun(t, "", "tasks", "--db", good, "migrate")
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--db", good, "get", "42"}, "task 42: task not found"},
		{[]string{"--db", good, "history", "42"}, "task 42: task not found"},
		{[]string{"--db", good, "cancel", "42"}, "task 42: task not found"},
		{[]string{"--db", filepath.Join(dir, "no", "such", "dir", "x.db"), "list"}, "directory " + filepath.Join(dir, "no", "such", "dir") + " does not exist; create it"},
		{[]string{"--db", "postgres://someone:s3cret@127.0.0.1:1/tasks", "list"}, "postgres://someone:xxxxx@127.0.0.1:1/tasks unreachable"},
	} {
		_, stderr, code := run(t, "", append([]string{"tasks"}, c.args...)...)
		if code != 1 || !strings.Contains(stderr, c.says) || strings.Contains(stderr, "s3cret") {
			t.Errorf("tasks %s: exit %d, stderr %q; want exit 1 saying %q (and no password)", strings.Join(c.args, " "), code, stderr, c.says)
		}
	}
}

func TestTasksDBFromEnvironment(t *testing.T) {
	db := filepath.Join(t.TempDir(), "env.db")
	t.Setenv("RATEKEEPER_DB", db)
	id := strings.TrimSpace(mustRun(t, "", "tasks", "submit", "-t", "http", "-i", `{"url":"https://example.test/"}`, "--at", "2099-01-01T00:00:00Z"))
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("RATEKEEPER_DB not used: %v", err)
	}
	if out := mustRun(t, "", "tasks", "--db", db, "get", id); !strings.Contains(out, "available_at: 2099-01-01T00:00:00.000Z") {
		t.Errorf("get:\n%s", out)
	}
}

// TestTasksWorkerLeavesOtherTypesWaiting: a type no built-in worker
// handles is accepted with a note; the worker runs the http task and
// leaves the other pending, and list and get say why. list shows
// priorities.
func TestTasksWorkerLeavesOtherTypesWaiting(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hi") }))
	defer srv.Close()
	db := filepath.Join(t.TempDir(), "tasks.db")
	out, stderr, code := run(t, "", "tasks", "--db", db, "submit", "-t", "report.daily", "-i", `{"day":"mon"}`, "--priority", "3")
	if code != 0 || strings.TrimSpace(out) != "1" || !strings.Contains(stderr, "note: report.daily is not a built-in type (http, poll): task 1 waits until a worker that handles it works") {
		t.Fatalf("submit of a type of a Go program: exit %d, out %q, stderr %q", code, out, stderr)
	}
	ids := strings.Fields(mustRun(t, `{"url":"`+srv.URL+`/x"}`+"\n\n"+`{"url":"`+srv.URL+`/y"}`+"\n", "tasks", "--db", db, "submit", "-t", "http", "--jsonl", "-i", "-"))
	if len(ids) != 2 || ids[0] != "2" || ids[1] != "3" {
		t.Fatalf("submit --jsonl printed %q, want the ids 2 and 3", ids)
	}
	httpID := ids[1]
	if got := mustRun(t, "", "tasks", "--db", db, "get", "1"); !strings.Contains(got, "task 1 (report.daily): pending, priority 3") ||
		!strings.Contains(got, "waiting: no worker is running on this database") {
		t.Errorf("get before any worker:\n%s", got)
	}
	stop := startTasksWorker(t, "--db", db, "--worker-id", "w1")
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(mustRun(t, "", "tasks", "--db", db, "get", httpID), "completed") {
		if time.Now().After(deadline) {
			t.Fatal("http task not completed in 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	list := mustRun(t, "", "tasks", "--db", db, "list", "--state", "pending")
	for _, want := range []string{"PRI", "NOTE", "1   report.daily  pending  3", "no running worker handles type report.daily (they handle http, poll)"} {
		if !strings.Contains(list, want) {
			t.Errorf("list lacks %q:\n%s", want, list)
		}
	}
	if stderr, err := stop(); err != nil {
		t.Fatalf("worker: %v\n%s", err, stderr)
	}
}

func TestParseStatusSet(t *testing.T) {
	if f, err := parseStatusSet(" "); f != nil || err != nil {
		t.Errorf("empty --fail-on-status = %v, %v; want none", f != nil, err)
	}
	f, err := parseStatusSet("404, 410,3XX")
	if err != nil {
		t.Fatal(err)
	}
	for status, want := range map[int]bool{404: true, 410: true, 301: true, 304: true, 400: false, 200: false, 503: false} {
		if f(status) != want {
			t.Errorf("--fail-on-status 404,410,3xx fails %d: %v, want %v", status, f(status), want)
		}
	}
	if f, _ := parseStatusSet("4xx"); !f(418) || f(500) {
		t.Error("--fail-on-status 4xx: want every 4xx and nothing else")
	}
}
