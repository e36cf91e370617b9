package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// recordingSim is the simulator on a loopback port, remembering when each
// request arrived and how often each path was served.
type recordingSim struct {
	URL string
	srv *sim.Server

	mu       sync.Mutex
	hits     map[string]int
	arrivals []arrival
}

// arrival is one request the simulator received.
type arrival struct {
	path string
	at   time.Time
}

func startRecordingSim(t testing.TB, api sim.APIConfig) *recordingSim {
	t.Helper()
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{api}})
	if err != nil {
		t.Fatal(err)
	}
	s := &recordingSim{srv: srv, hits: map[string]int{}}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.record(r.URL.Path)
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	s.URL = ts.URL
	return s
}

// record notes a request for path, arrived now.
func (s *recordingSim) record(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hits[path]++
	s.arrivals = append(s.arrivals, arrival{path, time.Now()})
}

// firstAfter returns the arrival of the first request at or after t.
func (s *recordingSim) firstAfter(t time.Time) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.arrivals {
		if !a.at.Before(t) {
			return a.at, true
		}
	}
	return time.Time{}, false
}

func (s *recordingSim) hitsOf(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[path]
}

// fetchRun is one `ratekeeper fetch` process.
type fetchRun struct {
	cmd     *exec.Cmd
	started time.Time
	output  lockedBuffer
	exited  chan struct{} // closed once the process has ended
}

// lockedBuffer is the output of a process, read while it is written.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startFetch(t testing.TB, dir string, args ...string) *fetchRun {
	t.Helper()
	return startFetchAs(t, dir, "tok-alice-1", args...)
}

// startFetchAs starts `ratekeeper fetch` with token as GITHUB_TOKEN.
func startFetchAs(t testing.TB, dir, token string, args ...string) *fetchRun {
	t.Helper()
	r := &fetchRun{exited: make(chan struct{})}
	r.cmd = exec.Command(binary, append([]string{"fetch"}, args...)...)
	r.cmd.Dir = dir
	r.cmd.Env = append(os.Environ(), "GITHUB_TOKEN="+token)
	r.cmd.Stdout, r.cmd.Stderr = &r.output, &r.output
	r.started = time.Now()
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = r.cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() {
		if !r.ended() {
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
	})
	return r
}

func (r *fetchRun) ended() bool {
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

// wait waits for the process to end and returns its exit status (-1 when
// a signal killed it).
func (r *fetchRun) wait(t testing.TB) int {
	t.Helper()
	select {
	case <-r.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("fetch still running after 2 minutes:\n%s", r.output.String())
	}
	return r.cmd.ProcessState.ExitCode()
}

// outputLines returns the records of an output file by URL, failing on a
// URL written twice.
func outputRecords(t testing.TB, path string) map[string]map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	by := map[string]map[string]any{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		u, _ := rec["url"].(string)
		if _, dup := by[u]; dup {
			t.Errorf("%s is in the output twice", u)
		}
		by[u] = rec
	}
	return by
}

// countLines counts the complete lines of path.
func countLines(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte("\n"))
}

// openTasks opens the task database to look at it.
func openTasks(t testing.TB, dsn string) *tasks.Queue {
	t.Helper()
	q, err := tasks.Open(context.Background(), dsn, tasks.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// running lists the running tasks of the database.
func running(t testing.TB, q *tasks.Queue) []*tasks.Task {
	t.Helper()
	ts, err := q.List(context.Background(), tasks.Filter{State: tasks.StateRunning, Limit: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
