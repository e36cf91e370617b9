package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// TestKilledTasksWorkerTasksComeBackAtOnce is the acceptance test of dead
// workers: a `tasks worker` (--concurrency 10: 10 requests in flight, 80
// tasks claimed) killed (kill -9) holding 19 tasks, 10 of them at a
// server that has not answered and 9 waiting in its scheduler for a
// sender. Before the restart, `tasks list` marks every one of them as a
// gone worker's and `tasks cancel` cancels one at once; then a worker
// started at once sends the other 18 within 10 s of its start (River's
// rescuer would have waited --rescue-after, 15 min), no request is sent
// twice but those that were in flight, and every task completes.
func TestKilledTasksWorkerTasksComeBackAtOnce(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { killWorkerAndRestart(t, filepath.Join(t.TempDir(), "rk.db"), "") })
	// A supervisor restarting a worker under its fixed name.
	t.Run("sqlite/same-worker-id", func(t *testing.T) { killWorkerAndRestart(t, filepath.Join(t.TempDir(), "rk.db"), "w-1") })
	t.Run("postgres", func(t *testing.T) { killWorkerAndRestart(t, storetest.NewPostgresDatabase(t, "rk_e2e_crash_"), "") })
}

// taskPaths starts the paths of the tasks' requests.
const taskPaths = "/repos/crash/"

func killWorkerAndRestart(t *testing.T, db, workerID string) {
	const n, inFlight = 20, 10
	// The server answers the first request (a probe of a bucket nothing is
	// known about goes alone) and holds every other until released, so
	// that when the worker is killed nothing but that first task has
	// completed: 10 requests are at the server and the other 9 tasks,
	// claimed, wait in the scheduler for a sender. No provider owns the
	// server, and --no-auto-hosts keeps it from becoming one: a request
	// holds no quota reservation held past its answer and no concurrency
	// cap (a cap ramping up from 4 would never have 10 in flight), and
	// what comes back after the kill is the tasks' doing alone.
	s, release := startHoldingServer(t)
	var lines strings.Builder
	for i := range n {
		fmt.Fprintf(&lines, `{"url":"%s%sr%02d"}`+"\n", s.URL, taskPaths, i)
	}
	file := filepath.Join(t.TempDir(), "requests.jsonl")
	if err := os.WriteFile(file, []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, nil, "tasks", "--db", db, "submit", "-t", "http", "--jsonl", "-i", "@"+file)
	var env []string
	args := []string{"tasks", "worker", "--db", db, "--concurrency", strconv.Itoa(inFlight), "--no-auto-hosts"}
	if workerID != "" {
		args = append(args, "--worker-id", workerID)
	}

	first := startProcess(t, env, args...)
	q := openTasks(t, db)
	var left []*tasks.Task
	// A generous bound: under -race on a loaded machine a worker on
	// PostgreSQL can take long to start; what is timed is the restart.
	// Nothing the worker holds can end before the kill, so what it
	// reaches it keeps: every task but the first claimed, and the first
	// plus 10 sent.
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if left = running(t, q); len(left) == n-1 && len(s.pathsHit(taskPaths)) == 1+inFlight {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks running, want %d claimed; %d paths hit, want %d:\n%s", len(left), n-1, len(s.pathsHit(taskPaths)), 1+inFlight, first.out())
		}
	}
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.done
	sentBefore := s.pathsHit(taskPaths)
	if again := running(t, q); len(again) != len(left) {
		t.Fatalf("%d tasks running after the kill, %d before", len(again), len(left))
	}
	held := 0
	for _, task := range left {
		if !slices.Contains(sentBefore, pathOf(t, task)) {
			held++
		}
	}
	if held != n-1-inFlight {
		t.Errorf("%d claimed tasks not sent at the kill, want %d (the rest of the claims beside %d in flight)", held, n-1-inFlight, inFlight)
	}

	list := mustRun(t, nil, "tasks", "--db", db, "list", "--state", "running")
	if gone := regexp.MustCompile(`worker \S+ is gone \(its process \(PID \d+\) has ended\)`).FindAllString(list, -1); len(gone) != len(left) {
		t.Errorf("tasks list marks %d tasks as a gone worker's, want %d:\n%s", len(gone), len(left), list)
	}
	cancelled := left[0].ID
	if out := mustRun(t, nil, "tasks", "--db", db, "cancel", strconv.FormatInt(cancelled, 10)); out != fmt.Sprintf("task %d cancelled\n", cancelled) {
		t.Errorf("tasks cancel of a gone worker's task said %q, want it cancelled at once", out)
	}

	release()
	restart := time.Now()
	second := startProcess(t, env, args...)
	var worst time.Duration
	for _, task := range left[1:] {
		path := pathOf(t, task)
		at, ok := s.waitForHitAfter(path, restart, 30*time.Second)
		if !ok {
			t.Fatalf("task %d (%s) not sent again within 30 s of the restart; the worker said:\n%s\ntasks:\n%s", task.ID, path, second.out(),
				mustRun(t, nil, "tasks", "--db", db, "list"))
		}
		if d := at.Sub(restart); d > 10*time.Second {
			t.Errorf("task %d (%s) sent again %v after the restart, want within 10 s", task.ID, path, d.Round(time.Millisecond))
		} else {
			worst = max(worst, d)
		}
	}
	for deadline := time.Now().Add(60 * time.Second); countDone(t, db) < n; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not every task done a minute after the restart:\n%s", second.out())
		}
	}
	second.stop(t)
	if !strings.Contains(second.out(), "took back at once the running tasks of workers that are gone") {
		t.Errorf("the restarted worker did not say what it took back:\n%s", second.out())
	}

	twice := 0
	for path, hits := range s.pathHits() {
		switch {
		case !strings.HasPrefix(path, taskPaths):
		case hits > 2 || hits == 2 && !slices.Contains(sentBefore, path):
			t.Errorf("%s sent %d times (in flight at the kill: %v)", path, hits, slices.Contains(sentBefore, path))
		case hits == 2:
			twice++
		}
	}
	all, err := q.List(context.Background(), tasks.Filter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range all {
		want := tasks.StateCompleted
		if task.ID == cancelled {
			want = tasks.StateCancelled
		}
		if task.State != want || task.RetryCount != 0 {
			t.Errorf("task %d: %s after %d retries, want %s after none", task.ID, task.State, task.RetryCount, want)
		}
	}
	t.Logf("killed holding %d tasks, %d in flight; %d sent after the restart, the last %v after it; %d requests sent twice",
		len(left), inFlight, len(left)-1, worst.Round(time.Millisecond), twice)
}

// pathOf is the URL path of an http task's request.
func pathOf(t *testing.T, task *tasks.Task) string {
	t.Helper()
	var in struct{ URL string }
	if err := json.Unmarshal(task.Input, &in); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(in.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Path
}

// pathsHit lists the distinct paths starting with prefix the simulator
// received, in the order of their first arrival.
func (s *recordingSim) pathsHit(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, a := range s.arrivals {
		if strings.HasPrefix(a.path, prefix) && !slices.Contains(out, a.path) {
			out = append(out, a.path)
		}
	}
	return out
}

// pathHits counts the requests of every path.
func (s *recordingSim) pathHits() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.hits)
}

// waitForHitAfter returns the arrival of the first request for path at or
// after from, waiting up to timeout for it.
func (s *recordingSim) waitForHitAfter(path string, from time.Time, timeout time.Duration) (time.Time, bool) {
	for deadline := time.Now().Add(timeout); ; time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		for _, a := range s.arrivals {
			if a.path == path && !a.at.Before(from) {
				s.mu.Unlock()
				return a.at, true
			}
		}
		s.mu.Unlock()
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
	}
}

// startHoldingServer is a server on a loopback port that records when
// each request arrived and answers the first at once with a 200; it holds
// every other until release is called (or its client goes away), then
// answers it, and every later one, at once.
func startHoldingServer(t *testing.T) (s *recordingSim, release func()) {
	t.Helper()
	s = &recordingSim{hits: map[string]int{}}
	released := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	var seen atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.record(r.URL.Path)
		if seen.Add(1) > 1 {
			select {
			case <-released:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(release) // before Close, which waits for the handlers
	s.URL = ts.URL
	return s, release
}
