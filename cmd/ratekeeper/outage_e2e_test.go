package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/store/sqlite"
	"github.com/ratekeeper/ratekeeper/store/storetest"
)

// The database may blink: these runs restart a real PostgreSQL under the
// commands that hold it as --db (about a second without a database), stop
// it for postgresDown, or hold a SQLite file's write lock from another
// connection for longer than the busy timeout, and check that each command
// rides it out. They need a server of their own, which they restart:
// RestartPostgresEnv names its DSN and the *CommandEnv variables the shell
// commands that restart, stop and start it (.ci/outage-pg starts one and
// prints them). Never point them at a server others use.
const (
	RestartPostgresEnv = "RATEKEEPER_TEST_RESTART_POSTGRES"
	RestartCommandEnv  = "RATEKEEPER_TEST_RESTART_CMD"
	StopCommandEnv     = "RATEKEEPER_TEST_STOP_CMD"
	StartCommandEnv    = "RATEKEEPER_TEST_START_CMD"
)

// postgresDown is how long the longer outage keeps PostgreSQL stopped:
// longer than River's completer retries for (about 7 s) when a connection
// is refused at once.
const postgresDown = 20 * time.Second

// restartable returns the restartable server's DSN and a function that
// restarts it, or, with down > 0, stops it and starts it again down later
// (safe to call from any goroutine); it skips the test when no server is
// given (CI gives one).
func restartable(t *testing.T, down time.Duration) (base string, restart func() error) {
	t.Helper()
	envs := []string{RestartPostgresEnv, RestartCommandEnv, StopCommandEnv, StartCommandEnv}
	for _, e := range envs {
		if os.Getenv(e) != "" {
			continue
		}
		if os.Getenv("CI") != "" {
			t.Fatalf("CI must run the database-outage runs, but %s is not set (.ci/run sets it from .ci/outage-pg)", e)
		}
		t.Skipf("%s is not set: the database-outage runs are skipped (locally: eval \"$(bash .ci/outage-pg)\")", e)
	}
	run := func(env string) error {
		cmd := os.Getenv(env)
		if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
			return fmt.Errorf("%s (%s): %v\n%s", env, cmd, err, out)
		}
		return nil
	}
	return os.Getenv(RestartPostgresEnv), func() error {
		start := time.Now()
		if down == 0 {
			if err := run(RestartCommandEnv); err != nil {
				return err
			}
			t.Logf("PostgreSQL restarted in %s", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if err := run(StopCommandEnv); err != nil {
			return err
		}
		time.Sleep(down)
		if err := run(StartCommandEnv); err != nil {
			return err
		}
		t.Logf("PostgreSQL stopped and started again, away for %s", time.Since(start).Round(time.Millisecond))
		return nil
	}
}

// sqliteLock is how long the SQLite runs hold the write lock: longer than
// SQLite's own busy timeout, which alone rides out a shorter one.
const sqliteLock = sqlite.BusyTimeoutMillis*time.Millisecond + 2*time.Second

// forEachBlink runs fn on PostgreSQL, which blink restarts or stops for
// postgresDown, and on SQLite, whose write lock blink holds from another
// connection for sqliteLock.
func forEachBlink(t *testing.T, fn func(t *testing.T, db string, blink func() error)) {
	t.Run("PostgresRestart", func(t *testing.T) {
		base, restart := restartable(t, 0)
		fn(t, storetest.NewPostgresDatabaseOn(t, base, "rk_outage_"), restart)
	})
	t.Run("PostgresDown20s", func(t *testing.T) {
		base, stopStart := restartable(t, postgresDown)
		fn(t, storetest.NewPostgresDatabaseOn(t, base, "rk_outage_"), stopStart)
	})
	t.Run("SQLiteLocked", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "ratekeeper.db")
		fn(t, db, func() error { return holdWriteLock(t, db, sqliteLock) })
	})
}

// holdWriteLock holds the SQLite database's write lock for d, as another
// process's long transaction would.
func holdWriteLock(t *testing.T, path string, d time.Duration) error {
	db, err := sqlite.OpenDB(context.Background(), path)
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.BeginTx(context.Background(), nil) // BEGIN IMMEDIATE: the write lock
	if err != nil {
		return err
	}
	time.Sleep(d)
	t.Logf("held the write lock of %s for %s", path, d)
	return tx.Rollback()
}

// startOutageSim serves a simulated GitHub at /github whose quota never
// binds, answering after latency, so that a run lasts across a restart.
func startOutageSim(t *testing.T, latency string) string {
	t.Helper()
	p := startProcess(t, nil, "sim", "--listen", "127.0.0.1:0", "--dialect", "github", "--prefix", "/github",
		"--tokens", "alice:tok-outage-1", "--limit", "1000000", "--no-secondary", "--latency", latency)
	return p.waitFor(t, regexp.MustCompile(`listening on (http://\S+) `)) + "/github"
}

// TestFetchRidesOutARestart: `ratekeeper fetch` of 300 URLs with
// PostgreSQL restarted half way exits 0 with every URL written once.
func TestFetchRidesOutARestart(t *testing.T) { forEachBlink(t, fetchAcross) }

func fetchAcross(t *testing.T, db string, restart func() error) {
	api := startOutageSim(t, "100ms")
	dir := t.TempDir()
	var urls strings.Builder
	for i := range 300 {
		fmt.Fprintf(&urls, "%s/repos/o/r%d\n", api, i)
	}
	if err := os.WriteFile(filepath.Join(dir, "urls"), []byte(urls.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.jsonl")
	run := startFetchAs(t, dir, "tok-outage-1", "-i", "urls", "-o", out, "--db", db, "--provider", "github="+api, "--concurrency", "4")
	waitUntil(t, 60*time.Second, func() bool { return countLines(out) >= 100 || run.ended() })
	before := countLines(out)
	if err := restart(); err != nil {
		t.Fatal(err)
	}
	code := run.wait(t)
	recs := outputRecords(t, out)
	t.Logf("fetch: %d lines before the database blinked; exit %d, %d lines, %d URLs", before, code, countLines(out), len(recs))
	if code != 0 || len(recs) != 300 || countLines(out) != 300 {
		t.Fatalf("fetch across a blink: exit %d, %d lines for %d URLs; want 0, 300, 300:\n%s", code, countLines(out), len(recs), run.output.String())
	}
	if before >= 300 {
		t.Errorf("fetch was done before the database blinked; the run proves nothing")
	}
}

// TestServeRidesOutARestart: a client sending requests through `ratekeeper
// serve` across a restart gets no 5xx but 503 with Retry-After.
func TestServeRidesOutARestart(t *testing.T) { forEachBlink(t, serveAcross) }

func serveAcross(t *testing.T, db string, restart func() error) {
	api := startOutageSim(t, "10ms")
	gw := startProcess(t, []string{"GITHUB_TOKEN=tok-outage-1"}, "serve", "--listen", "127.0.0.1:0", "--db", db, "--provider", "github="+api)
	addr := gw.waitFor(t, regexp.MustCompile(`gateway on (http://\S+) `))
	client := &http.Client{Timeout: time.Minute}

	const n = 150
	type answer struct {
		code       int
		retryAfter string
		err        error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	var restartErr error
	for i := range n {
		if i == n/3 {
			wg.Go(func() { restartErr = restart() })
		}
		wg.Go(func() {
			resp, err := client.Get(fmt.Sprintf("%s/github/repos/o/r%d", addr, i))
			if err != nil {
				answers[i].err = err
				return
			}
			resp.Body.Close()
			answers[i] = answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
		})
		time.Sleep(100 * time.Millisecond) // 150 requests over 15 s
	}
	wg.Wait()
	if restartErr != nil {
		t.Fatal(restartErr)
	}
	codes := map[int]int{}
	bad := 0
	for i, a := range answers {
		codes[a.code]++
		if a.err != nil || (a.code >= 500 && (a.code != http.StatusServiceUnavailable || a.retryAfter == "")) {
			bad++
			t.Errorf("request %d: %d %v", i, a.code, a.err)
		}
	}
	t.Logf("serve: answers by status %v; %d 5xx other than 503 with Retry-After", codes, bad)
}

// TestWorkerRidesOutARestart: a `ratekeeper tasks worker` working 200
// tasks across a restart is still running at the end, every task done.
func TestWorkerRidesOutARestart(t *testing.T) { forEachBlink(t, workAcross) }

func workAcross(t *testing.T, db string, restart func() error) {
	api := startOutageSim(t, "100ms")
	var in strings.Builder
	for i := range 200 {
		fmt.Fprintf(&in, `{"url":"%s/repos/o/r%d"}`+"\n", api, i)
	}
	path := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(path, []byte(in.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, nil, "tasks", "--db", db, "submit", "-t", "http", "--jsonl", "-i", "@"+path)
	w := startProcess(t, []string{"GITHUB_TOKEN=tok-outage-1"}, "tasks", "--db", db, "worker",
		"--provider", "github="+api, "--concurrency", "4", "--body-dir", t.TempDir())
	waitUntil(t, 60*time.Second, func() bool { return countCompleted(t, db) >= 50 })
	if err := restart(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 90*time.Second, func() bool { return countCompleted(t, db) == 200 })
	select {
	case err := <-w.done:
		t.Fatalf("the worker exited (%v) across the blink:\n%s", err, w.out())
	default:
	}
	t.Logf("worker: still running, 200 of 200 tasks done")
}

// countCompleted returns how many tasks completed.
func countCompleted(t *testing.T, db string) int {
	return strings.Count(mustRun(t, nil, "tasks", "--db", db, "list", "--state", "completed", "--limit", "10000", "--json"), "\n")
}

// waitUntil polls cond every 100 ms for up to limit.
func waitUntil(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("still not so after %v", limit)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
