package poll

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// fastPolicy polls every 150 ms whatever happens: durable tests run on the
// real clock (the task queue's), so they keep their schedules short.
func fastPolicy() Policy {
	p := DefaultPolicy()
	p.Location = time.UTC
	p.AfterChange, p.Business, p.Default, p.Idle, p.Night = 150*time.Millisecond, 150*time.Millisecond, 150*time.Millisecond, 150*time.Millisecond, 150*time.Millisecond
	p.Min, p.Max = 100*time.Millisecond, time.Second
	p.BackoffBase, p.BackoffMax = 100*time.Millisecond, time.Second
	return p
}

// waitFor polls cond every 10 ms for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestDurablePollingContinuesAfterARestart(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "ratekeeper.db")
	f := newFixture(t, sim.APIConfig{}, 0)
	path := "/repos/o/r"
	url := simBase + path

	start := func(rec *recorder) (stop func() error) {
		p, err := New(Options{URLs: []string{url}, Client: f.client, Policy: fastPolicy(), Sink: rec, OnEvent: rec.event})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.RunDurable(ctx, DurableOptions{DSN: dsn, Logger: quietLogger()}) }()
		return func() error { cancel(); return <-done }
	}
	polls := func(rec *recorder) int { return len(rec.kinds(EventPolled)) }

	// First run: a baseline, unchanged polls, one change.
	rec1 := &recorder{}
	stop1 := start(rec1)
	waitFor(t, "three polls", func() bool { return polls(rec1) >= 3 })
	if err := f.srv.Touch(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the change", func() bool { rec1.mu.Lock(); defer rec1.mu.Unlock(); return len(rec1.changes) == 1 })
	if err := stop1(); err != nil {
		t.Fatalf("first run: %v", err)
	}
	tasksOf := func() []*tasks.Task {
		q, err := tasks.Open(context.Background(), dsn, tasks.Options{Logger: quietLogger(),
			Handlers: map[string]tasks.HandlerFunc{TaskType: func(context.Context, *tasks.Task) (json.RawMessage, error) { return nil, nil }}})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		list, err := q.List(context.Background(), tasks.Filter{Type: TaskType})
		if err != nil {
			t.Fatal(err)
		}
		return list
	}
	list := tasksOf()
	if len(list) != 1 || list[0].State != tasks.StatePending || list[0].RescheduleCount < 3 {
		t.Fatalf("after the first run: %+v", list)
	}
	firstID, rescheduled := list[0].ID, list[0].RescheduleCount
	saved := readSaved(t, dsn, url)
	if saved.State.Changes != 1 || !saved.Baseline.Seen || saved.State.Polls < 4 {
		t.Fatalf("saved state %+v", saved.State)
	}
	charged := f.core(t).Charged
	notModified := f.core(t).NotModified

	// Second run: the same task goes on; the first poll is a free 304 and
	// nothing is emitted again; a new change is emitted once.
	rec2 := &recorder{}
	stop2 := start(rec2)
	waitFor(t, "two polls after the restart", func() bool { return polls(rec2) >= 2 })
	if f.core(t).Charged != charged || f.core(t).NotModified < notModified+2 {
		t.Fatalf("after the restart: charged %d→%d, 304s %d→%d", charged, f.core(t).Charged, notModified, f.core(t).NotModified)
	}
	if first := rec2.kinds(EventPolled)[0]; first.Outcome != Unchanged {
		t.Fatalf("first poll after the restart: %s", first.Outcome)
	}
	if err := f.srv.Touch(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second change", func() bool { rec2.mu.Lock(); defer rec2.mu.Unlock(); return len(rec2.changes) == 1 })
	if err := stop2(); err != nil {
		t.Fatalf("second run: %v", err)
	}
	list = tasksOf()
	if len(list) != 1 || list[0].ID != firstID || list[0].RescheduleCount <= rescheduled {
		t.Fatalf("after the second run: %+v (first id %d, %d reschedules)", list, firstID, rescheduled)
	}
	if task := rec2.kinds(EventTask); len(task) != 1 || task[0].Message == "" {
		t.Fatalf("task events %+v", task)
	}
	later := readSaved(t, dsn, url)
	if later.State.Changes != 2 || later.State.Polls <= saved.State.Polls || later.State.Started != saved.State.Started {
		t.Fatalf("state did not continue: %+v then %+v", saved.State, later.State)
	}
	if len(rec1.changes)+len(rec2.changes) != 2 {
		t.Fatal("a change was emitted twice")
	}
}

func readSaved(t *testing.T, dsn, url string) savedState {
	t.Helper()
	st, err := store.Open(context.Background(), dsn, store.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec, err := st.Get(context.Background(), stateKeyPrefix+urlKey(url))
	if err != nil {
		t.Fatal(err)
	}
	var s savedState
	if err := json.Unmarshal(rec.Value, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDurableStopsAfterMaxErrorsAndFailsTheTask(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "ratekeeper.db")
	var n atomic.Int32
	s := &scripted{handlers: []func(http.ResponseWriter, *http.Request){func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}}}
	pol := fastPolicy()
	pol.MaxErrors = 3
	p, err := New(Options{URLs: []string{"http://api.test/x"}, Client: &http.Client{Transport: s}, Policy: pol, Sink: &recorder{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = p.RunDurable(ctx, DurableOptions{DSN: dsn, Logger: quietLogger()})
	if !errors.Is(err, ErrTooManyErrors) {
		t.Fatalf("RunDurable: %v", err)
	}
	if n.Load() != 3 {
		t.Fatalf("%d polls", n.Load())
	}
	q, err := tasks.Open(context.Background(), dsn, tasks.Options{Logger: quietLogger(),
		Handlers: map[string]tasks.HandlerFunc{TaskType: func(context.Context, *tasks.Task) (json.RawMessage, error) { return nil, nil }}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	waitFor(t, "the task to fail", func() bool {
		list, err := q.List(context.Background(), tasks.Filter{Type: TaskType})
		return err == nil && len(list) == 1 && list[0].State == tasks.StateFailed
	})
}

// A task worker that was given no URL runs the durable poll tasks of its
// database (here one submitted by hand, without a key): it polls, emits
// the change on its sink, keeps the state and reschedules the task.
func TestTaskHandlerRunsPollTasksOfTheDatabase(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "ratekeeper.db")
	f := newFixture(t, sim.APIConfig{}, 0)
	path := "/repos/o/r"
	url := simBase + path
	rec := &recorder{}
	h, err := NewTaskHandler(context.Background(), dsn, Options{Client: f.client, Policy: fastPolicy(), Sink: rec, OnEvent: rec.event})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	q, err := tasks.Open(context.Background(), dsn, tasks.Options{Logger: quietLogger(), Handlers: map[string]tasks.HandlerFunc{TaskType: h.Handle}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := CheckTaskInput(json.RawMessage(`{"url":"ftp://x"}`)); err == nil {
		t.Error("CheckTaskInput accepted an ftp URL")
	}
	in := json.RawMessage(`{"url":"` + url + `"}`)
	if err := CheckTaskInput(in); err != nil {
		t.Fatal(err)
	}
	id, err := q.Submit(context.Background(), TaskType, in, tasks.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Work(ctx, tasks.WorkOptions{}) }()
	waitFor(t, "two polls", func() bool { return len(rec.kinds(EventPolled)) >= 2 })
	if err := f.srv.Touch(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the change", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.changes) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	task, err := q.Get(context.Background(), id)
	if err != nil || task.State != tasks.StatePending || task.RescheduleCount < 2 || task.RetryCount != 0 {
		t.Fatalf("poll task = %+v, %v; want pending, rescheduled after each poll", task, err)
	}
	if saved := readSaved(t, dsn, url); saved.State.Changes != 1 || saved.TaskID != id {
		t.Fatalf("saved state %+v", saved)
	}
}
