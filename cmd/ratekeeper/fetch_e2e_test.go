package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// TestFetchResumesAtOnceAfterKills is the acceptance test of resuming: a
// batch of 300 URLs against a binding quota, stopped three times at random
// moments (kill -9, or SIGHUP as a closed terminal sends) and run again to
// the end. Every URL is in the output exactly once; each rerun sends its
// first request, and takes back the tasks a killed run left running,
// within resumeBound of its start; after a SIGHUP, nothing is left running
// and the exit status is 129.
func TestFetchResumesAtOnceAfterKills(t *testing.T) {
	t.Run("sigkill/sqlite", func(t *testing.T) { resumeAfterStops(t, filepath.Join(t.TempDir(), "rk.db"), syscall.SIGKILL) })
	t.Run("sigkill/postgres", func(t *testing.T) {
		resumeAfterStops(t, storetest.NewPostgresDatabase(t, "rk_e2e_fetch_"), syscall.SIGKILL)
	})
	t.Run("sighup/sqlite", func(t *testing.T) { resumeAfterStops(t, filepath.Join(t.TempDir(), "rk.db"), syscall.SIGHUP) })
}

// resumeBound is how soon a rerun must send and take back: half of what
// River's rescuer would wait (--timeout plus a grace: 12.5 s here), so a
// run that waited for it fails. It is no tighter because a process's start
// is not the test's to time: on a loaded 2-core machine a rerun's first
// request came 2.2–3.0 s after its start (about 0.3 s idle).
const resumeBound = 6 * time.Second

func resumeAfterStops(t *testing.T, db string, sig syscall.Signal) {
	const n, stops = 300, 3
	// 30 a second: the batch takes 10 s, so three stops at random moments
	// (each after at most 1.5 s of work) leave work for every rerun.
	s := startRecordingSim(t, sim.APIConfig{Dialect: sim.DialectGitHub, Prefix: "/github",
		Tokens: []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}}, Limit: 30, Window: time.Second, WindowMode: sim.WindowFixed})
	dir := t.TempDir()
	var urls strings.Builder
	for i := range n {
		fmt.Fprintf(&urls, "%s/github/repos/o/r%03d\n", s.URL, i)
	}
	input, out := filepath.Join(dir, "urls.txt"), filepath.Join(dir, "results.jsonl")
	if err := os.WriteFile(input, []byte(urls.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-i", input, "-o", out, "--db", db, "--provider", "github=" + s.URL + "/github",
		"--concurrency", "8", "--max-wait", "500ms", "--timeout", "10s", "--progress", "off"}
	q := openTasks(t, db)

	type orphan struct {
		id    int64
		after int // the run that should take it back
	}
	var (
		orphans []orphan
		runs    []*fetchRun
	)
	for i := 0; ; i++ {
		r := startFetch(t, dir, args...)
		runs = append(runs, r)
		first := waitFirstRequest(t, s, r)
		if i > 0 && first.Sub(r.started) > resumeBound {
			t.Errorf("run %d sent its first request %v after its start, want within %v", i+1, first.Sub(r.started).Round(time.Millisecond), resumeBound)
		}
		if i == stops {
			if code := r.wait(t); code != 0 {
				t.Fatalf("last run: exit %d\n%s", code, r.output.String())
			}
			break
		}
		// A random moment of the batch, while it works: the first one after
		// a random pause when a task runs (under a binding quota, there
		// are moments when every task sleeps until the next window).
		time.Sleep(time.Duration(100+rand.IntN(1400)) * time.Millisecond)
		for deadline := time.Now().Add(5 * time.Second); len(running(t, q)) == 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if r.ended() {
			t.Fatalf("run %d ended before it was stopped; make the batch slower\n%s", i+1, r.output.String())
		}
		if err := r.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		code := r.wait(t)
		left := running(t, q)
		t.Logf("run %d stopped by %v after %v: exit %d, %d lines, %d tasks left running", i+1, sig,
			time.Since(r.started).Round(time.Millisecond), code, countLines(out), len(left))
		switch sig {
		case syscall.SIGKILL:
			if code != -1 {
				t.Fatalf("run %d: exit %d, want killed", i+1, code)
			}
			for _, task := range left {
				orphans = append(orphans, orphan{task.ID, i + 1})
			}
		case syscall.SIGHUP:
			if code != 129 || len(left) != 0 {
				t.Fatalf("run %d: exit %d with %d tasks left running, want a clean stop with 129\n%s", i+1, code, len(left), r.output.String())
			}
		}
	}
	by := outputRecords(t, out)
	if len(by) != n {
		t.Errorf("%d URLs in the output, want %d", len(by), n)
	}
	refetched := 0
	for u, rec := range by {
		if st, _ := rec["status"].(float64); st != 200 {
			t.Errorf("%s: %v", u, rec)
		}
		path := strings.TrimPrefix(u, s.URL)
		switch h := s.hitsOf(path); {
		case h > 1+stops:
			t.Errorf("%s served %d times", u, h)
		case h > 1:
			refetched++
		}
	}
	if sig == syscall.SIGKILL && len(orphans) == 0 {
		t.Error("no task was left running by a kill; the test proves nothing")
	}
	for _, o := range orphans {
		evs, err := q.History(context.Background(), o.id)
		if err != nil {
			t.Fatal(err)
		}
		if endedAtTheKill(evs, runs[o.after].started) {
			// The killed run's last transaction (this attempt's
			// outcome) reached PostgreSQL before the kill and was
			// committed by the server after the process died, just
			// after the snapshot saw the task running: not an orphan.
			continue
		}
		var at time.Time
		for _, e := range evs {
			if e.Kind == tasks.EventReclaimed && at.IsZero() && !e.At.Before(runs[o.after].started.Add(-time.Second)) {
				at = e.At
			}
		}
		if d := at.Sub(runs[o.after].started); at.IsZero() || d > resumeBound {
			t.Errorf("task %d, left running by run %d, taken back %v after run %d started (zero: never), want within %v; history:\n%v", o.id, o.after, d, o.after+1, resumeBound, evs)
		}
	}
	t.Logf("%d runs, %d tasks left running by kills and taken back, %d URLs fetched more than once", len(runs), len(orphans), refetched)
}

// endedAtTheKill reports whether the attempt a task was running when the
// next run started (its last claim before then) has an outcome of its own
// in the history: it ended in the killed run, not in a later one's hands.
func endedAtTheKill(evs []tasks.Event, next time.Time) bool {
	attempt := 0
	for _, e := range evs {
		if e.Kind == tasks.EventClaimed && e.At.Before(next) {
			attempt = e.Attempt
		}
	}
	for _, e := range evs {
		switch e.Kind {
		case tasks.EventCompleted, tasks.EventRescheduled, tasks.EventRetried, tasks.EventFailed:
			if attempt > 0 && e.Attempt == attempt {
				return true
			}
		}
	}
	return false
}

// waitFirstRequest returns when the simulator saw run r's first request.
func waitFirstRequest(t testing.TB, s *recordingSim, r *fetchRun) time.Time {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if at, ok := s.firstAfter(r.started); ok {
			return at
		}
		if r.ended() || time.Now().After(deadline) {
			t.Fatalf("no request from the run:\n%s", r.output.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFetchTakesBackOnlyItsOwnOutputsTasks: two batches on one database,
// each with its own output. The second is killed and run again while the
// first runs on: the rerun takes back the tasks its killed run left
// running (of either batch: every fetch works any pending task of its
// database), and never one the live process is running.
func TestFetchTakesBackOnlyItsOwnOutputsTasks(t *testing.T) {
	s := startRecordingSim(t, sim.APIConfig{Dialect: sim.DialectGitHub, Prefix: "/github",
		Tokens: []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}}, Limit: 5000, Window: time.Hour, Latency: 200 * time.Millisecond})
	dir := t.TempDir()
	db := filepath.Join(dir, "rk.db")
	batchOf := func(name string, n int) (input, out string, urls []string) {
		var b strings.Builder
		for i := range n {
			u := fmt.Sprintf("%s/github/repos/%s/r%03d", s.URL, name, i)
			urls = append(urls, u)
			b.WriteString(u + "\n")
		}
		input, out = filepath.Join(dir, name+".txt"), filepath.Join(dir, name+".jsonl")
		if err := os.WriteFile(input, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return input, out, urls
	}
	inA, outA, urlsA := batchOf("a", 300)
	inB, outB, urlsB := batchOf("b", 60)
	common := []string{"--db", db, "--provider", "github=" + s.URL + "/github", "--concurrency", "4", "--timeout", "1m"}
	q := openTasks(t, db)
	byPID := func(pid int) func(*tasks.Task) bool {
		tag := fmt.Sprintf("-%d-", pid)
		return func(task *tasks.Task) bool { return strings.Contains(task.Worker, tag) }
	}

	a := startFetch(t, dir, append([]string{"-i", inA, "-o", outA, "--progress", "off"}, common...)...)
	waitFirstRequest(t, s, a)
	b1 := startFetch(t, dir, append([]string{"-i", inB, "-o", outB, "--progress", "off"}, common...)...)
	ofB1, ofA := byPID(b1.cmd.Process.Pid), byPID(a.cmd.Process.Pid)
	var orphans []int64
	for deadline := time.Now().Add(20 * time.Second); ; {
		orphans = orphans[:0]
		for _, task := range running(t, q) {
			if ofB1(task) {
				orphans = append(orphans, task.ID)
			}
		}
		// Every fetch works any pending task of the database, so those
		// it claims may be the first batch's: the killed run's all the same.
		if len(orphans) >= 4 {
			break
		}
		if b1.ended() || time.Now().After(deadline) {
			t.Fatalf("the second batch never had tasks running:\n%s", b1.output.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := b1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	b1.wait(t)
	orphans = orphans[:0]
	liveRunning := 0
	for _, task := range running(t, q) {
		switch {
		case ofB1(task):
			orphans = append(orphans, task.ID)
		case ofA(task):
			liveRunning++
		}
	}
	if len(orphans) == 0 || liveRunning == 0 || a.ended() {
		t.Fatalf("at the rerun: %d tasks of the killed run, %d of the live one running (live process ended: %v); want both", len(orphans), liveRunning, a.ended())
	}

	b2 := startFetch(t, dir, append([]string{"-i", inB, "-o", outB, "--progress", "lines", "--progress-every", "1m"}, common...)...)
	if code := b2.wait(t); code != 0 {
		t.Fatalf("rerun of the second batch: exit %d\n%s", code, b2.output.String())
	}
	if want := fmt.Sprintf("taking back at once %d task", len(orphans)); !strings.Contains(b2.output.String(), want) {
		t.Errorf("rerun's summary lacks %q:\n%s", want, b2.output.String())
	}
	if code := a.wait(t); code != 0 {
		t.Fatalf("first batch: exit %d\n%s", code, a.output.String())
	}

	for out, urls := range map[string][]string{outA: urlsA, outB: urlsB} {
		by := outputRecords(t, out)
		for _, u := range urls {
			if rec, ok := by[u]; !ok || rec["status"] != float64(200) {
				t.Errorf("%s: %v (in output: %v)", u, rec, ok)
			}
		}
		if len(by) != len(urls) {
			t.Errorf("%s holds %d URLs, want %d", out, len(by), len(urls))
		}
	}
	all, err := q.List(context.Background(), tasks.Filter{Limit: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	isOrphan := map[int64]bool{}
	for _, id := range orphans {
		isOrphan[id] = true
	}
	aTag := fmt.Sprintf("-%d-", a.cmd.Process.Pid)
	for _, task := range all {
		evs, err := q.History(context.Background(), task.ID)
		if err != nil {
			t.Fatal(err)
		}
		reclaimed := false
		for _, e := range evs {
			if e.Kind != tasks.EventReclaimed {
				continue
			}
			reclaimed = true
			if strings.Contains(e.Worker, aTag) {
				t.Errorf("task %d was taken back from the live process: %s", task.ID, e)
			}
		}
		if isOrphan[task.ID] && !reclaimed {
			t.Errorf("task %d, left running by the killed run, was not taken back: %v", task.ID, evs)
		}
	}
	t.Logf("%d tasks of the killed run taken back; %d of the live one were running then, none touched", len(orphans), liveRunning)
}
