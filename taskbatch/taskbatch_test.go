package taskbatch_test

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/taskbatch"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// A worker sending through the scheduler claims more tasks than it sends
// at once (ClaimAhead per request in flight), and its one sender takes
// the claimed tasks' requests by the task's priority, 1 first, then by
// ID: while the first request is held at the server, the other six wait
// in the scheduler, and they reach the server in that order.
func TestClaimedTasksGoByPriorityThenID(t *testing.T) {
	var mu sync.Mutex
	var arrived []string
	release := make(chan struct{})
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived = append(arrived, r.URL.Path)
		held := len(arrived) == 1
		mu.Unlock()
		if held {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(releaseAll)

	q, sched := openScheduled(t)
	ctx := context.Background()
	type sub struct {
		path     string
		priority int
		id       int64
	}
	subs := []sub{{path: "/a", priority: 2}, {path: "/b", priority: 2}, {path: "/c", priority: 1}, {path: "/d", priority: 3},
		{path: "/e", priority: 2}, {path: "/f", priority: 1}, {path: "/g", priority: 4}}
	for i, s := range subs {
		in, _ := json.Marshal(tasks.HTTPInput{URL: ts.URL + s.path})
		var err error
		if subs[i].id, err = q.Submit(ctx, tasks.HTTPType, in, tasks.SubmitOptions{Priority: s.priority}); err != nil {
			t.Fatal(err)
		}
	}
	workCtx, stop := context.WithCancel(ctx)
	worked := make(chan error, 1)
	go func() {
		worked <- q.Work(workCtx, tasks.WorkOptions{Concurrency: 1,
			TypeConcurrency: map[string]int{tasks.HTTPType: taskbatch.Claims(1)}})
	}()
	defer func() {
		stop()
		if err := <-worked; err != nil {
			t.Errorf("Work: %v", err)
		}
	}()

	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if p := sched.Progress(); p.Sending == 1 && p.Ready == len(subs)-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scheduler: %+v; want 1 request sending and %d ready", sched.Progress(), len(subs)-1)
		}
	}
	releaseAll()
	for _, s := range subs {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		task, err := q.Await(waitCtx, s.id)
		cancel()
		if err != nil {
			t.Fatalf("task %d (%s): %v (%+v)", s.id, s.path, err, task)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	rest := slices.DeleteFunc(slices.Clone(subs), func(s sub) bool { return s.path == arrived[0] })
	slices.SortFunc(rest, func(a, b sub) int { return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(a.id, b.id)) })
	var want []string
	for _, s := range rest {
		want = append(want, s.path)
	}
	if got := arrived[1:]; !slices.Equal(got, want) {
		t.Errorf("after %s, the server received %v, want %v (priority 1 first, then by ID)", arrived[0], got, want)
	}
}

func TestClaims(t *testing.T) {
	for _, c := range []struct{ inFlight, want int }{{1, taskbatch.ClaimAhead}, {10, 10 * taskbatch.ClaimAhead}, {tasks.ConcurrencyLimit, tasks.ConcurrencyLimit}} {
		if got := taskbatch.Claims(c.inFlight); got != c.want {
			t.Errorf("Claims(%d) = %d, want %d", c.inFlight, got, c.want)
		}
	}
}

// When the worker stops, the tasks whose requests only wait in the
// scheduler go back to pending at once, unsent, while the one at the
// server finishes; a write among them (SendOnce) is sent by the next
// worker, not failed as a request that may have reached the server.
func TestStopGivesBackWhatOnlyWaits(t *testing.T) {
	var mu sync.Mutex
	arrived := map[string]int{}
	held := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived[r.Method+" "+r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/held" {
			close(held)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(releaseAll)

	q, sched := openScheduled(t)
	ctx := context.Background()
	submit := func(in tasks.HTTPInput) int64 {
		t.Helper()
		raw, _ := json.Marshal(in)
		id, err := q.Submit(ctx, tasks.HTTPType, raw, tasks.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	heldID := submit(tasks.HTTPInput{URL: ts.URL + "/held"})
	work := func(workCtx context.Context) chan error {
		worked := make(chan error, 1)
		go func() {
			worked <- q.Work(workCtx, tasks.WorkOptions{Concurrency: 1, ShutdownTimeout: 45 * time.Second,
				TypeConcurrency: map[string]int{tasks.HTTPType: taskbatch.Claims(1)}})
		}()
		return worked
	}
	workCtx, stop := context.WithCancel(ctx)
	worked := work(workCtx)
	<-held
	waiting := []int64{submit(tasks.HTTPInput{URL: ts.URL + "/write", Method: http.MethodPost, SendOnce: true}),
		submit(tasks.HTTPInput{URL: ts.URL + "/read"})}
	for deadline := time.Now().Add(30 * time.Second); sched.Progress().Ready < len(waiting); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("scheduler: %+v; want the two later requests waiting", sched.Progress())
		}
	}

	stop()
	for _, id := range waiting {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			task, err := q.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if task.State == tasks.StatePending {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %d is %s with the held request still at the server; want it back to pending at once", id, task.State)
			}
		}
	}
	releaseAll()
	if err := <-worked; err != nil {
		t.Fatalf("Work: %v", err)
	}
	if task, err := q.Get(ctx, heldID); err != nil || task.State != tasks.StateCompleted {
		t.Fatalf("the held task: %+v, %v; want it completed with its answer", task, err)
	}

	workCtx, stop = context.WithCancel(ctx)
	worked = work(workCtx)
	for _, id := range waiting {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		task, err := q.Await(waitCtx, id)
		cancel()
		if err != nil || task.State != tasks.StateCompleted || task.RetryCount != 0 {
			t.Errorf("task %d after the restart: %+v, %v; want completed, no retry", id, task, err)
		}
	}
	stop()
	if err := <-worked; err != nil {
		t.Errorf("Work: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if arrived["POST /write"] != 1 || arrived["GET /read"] != 1 || arrived["GET /held"] != 1 {
		t.Errorf("the server received %v; want each request once", arrived)
	}
}

// openScheduled opens a task queue on a fresh SQLite database whose http
// tasks send through a scheduler of one request in flight.
func openScheduled(t *testing.T) (*tasks.Queue, *taskbatch.Scheduler) {
	t.Helper()
	client, sched := taskbatch.Start(&http.Client{}, 1, time.Minute)
	t.Cleanup(sched.Close)
	q, err := tasks.Open(context.Background(), filepath.Join(t.TempDir(), "tasks.db"), tasks.Options{
		HTTPClient: client, BodyDir: filepath.Join(t.TempDir(), "bodies"),
		FetchPollInterval: 10 * time.Millisecond, FetchCooldown: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q, sched
}
