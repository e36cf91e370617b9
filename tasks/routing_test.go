package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A task of a type this worker does not handle is never claimed by it: it
// stays pending, untouched, List says why, and a worker that handles the
// type runs it later.
func TestTaskOfAnUnhandledTypeWaitsForItsWorker(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.mine": (&scripted{steps: []step{succeed(`1`)}}).handle}))
		ctx := ctxT(t)
		other := mustSubmit(t, q, "t.other", `{"n":1}`, SubmitOptions{})
		if got, err := q.Get(ctx, other); err != nil || got.Waiting != "no worker is running on this database" {
			t.Fatalf("before any worker: %+v, %v; want it waiting for a worker", got, err)
		}
		startWorker(t, q, WorkOptions{WorkerID: "w-mine"})
		mustAwait(t, q, mustSubmit(t, q, "t.mine", `{}`, SubmitOptions{}))
		var got *Task
		eventually(t, func() (bool, string) {
			list, err := q.List(ctx, Filter{State: StatePending})
			if err != nil || len(list) != 1 {
				return false, "pending list: " + err.Error()
			}
			got = list[0]
			return strings.HasPrefix(got.Waiting, "no running worker handles type t.other (they handle "), got.Waiting
		})
		if got.ID != other || got.Attempt != 0 || got.RetryCount != 0 || !strings.Contains(got.Waiting, "t.mine") {
			t.Fatalf("unhandled task = %+v, want it pending, never attempted, the reason listing t.mine", got)
		}

		q2 := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.other": (&scripted{steps: []step{succeed(`"done"`)}}).handle}))
		startWorker(t, q2, WorkOptions{WorkerID: "w-other"})
		if done := mustAwait(t, q, other); done.State != StateCompleted || done.Attempt != 1 || done.Waiting != "" {
			t.Errorf("task once its worker runs = %+v, want completed at its first attempt", done)
		}
	})
}

// runOrder returns a handler of type t.order that records the "name" of
// each task it runs, and a way to read the record.
func runOrder(first func(ctx context.Context, task *Task, name string) error) (HandlerFunc, func() []string) {
	var mu sync.Mutex
	var order []string
	h := func(ctx context.Context, task *Task) (json.RawMessage, error) {
		var in struct{ Name string }
		_ = json.Unmarshal(task.Input, &in)
		mu.Lock()
		order = append(order, in.Name)
		mu.Unlock()
		if first != nil {
			if err := first(ctx, task, in.Name); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	return h, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(order) }
}

func TestPriorityOrdersWork(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		h, order := runOrder(nil)
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.order": h}))
		var ids []int64
		for _, p := range []struct {
			name string
			prio int
		}{{"p4", 4}, {"p2", 0}, {"p3", 3}, {"p1", 1}} {
			ids = append(ids, mustSubmit(t, q, "t.order", `{"name":"`+p.name+`"}`, SubmitOptions{Priority: p.prio}))
		}
		if got, _ := q.Get(ctxT(t), ids[1]); got.Priority != DefaultPriority {
			t.Errorf("task submitted without a priority has %d, want %d", got.Priority, DefaultPriority)
		}
		startWorker(t, q, WorkOptions{Concurrency: 1})
		for _, id := range ids {
			mustAwait(t, q, id)
		}
		if got := order(); !slices.Equal(got, []string{"p1", "p2", "p3", "p4"}) {
			t.Errorf("run order = %v, want by priority, 1 first", got)
		}
	})
}

// A task rescheduled for a rate limit runs, once its quota returns, before
// newer work of its priority — work submitted while it slept, which River
// would otherwise run first (it became available earlier) — because its
// priority is raised. With KeepPriority that newer work goes first.
func TestRateLimitedTaskRunsBeforeNewerWork(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		for _, c := range []struct {
			rule      PriorityRule
			order     []string
			priority  int
			whyBefore string
		}{
			{RaisePriority, []string{"old", "old", "new"}, HighestPriority, "its priority was raised"},
			{KeepPriority, []string{"old", "new", "old"}, DefaultPriority, "it became available earlier"},
		} {
			t.Run(string(c.rule), func(t *testing.T) {
				h, order := runOrder(func(_ context.Context, task *Task, name string) error {
					if name == "old" && task.RescheduleCount == 0 {
						// Long enough for the first worker to be stopped
						// before it comes, even on a loaded machine (1 s
						// was not, once, in a full CI run).
						return quotaError{at: time.Now().Add(3 * time.Second)}
					}
					return nil
				})
				q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.order": h}))
				old := mustSubmit(t, q, "t.order", `{"name":"old"}`, SubmitOptions{})
				stop := startWorker(t, q, WorkOptions{Concurrency: 1, RateLimitedPriority: c.rule})
				slept := waitTask(t, q, old, func(task *Task) bool { return task.RescheduleCount == 1 })
				stop()
				if slept.Priority != c.priority || slept.State != StatePending {
					t.Fatalf("rate-limited task = %+v, want pending with priority %d", slept, c.priority)
				}
				newer := mustSubmit(t, q, "t.order", `{"name":"new"}`, SubmitOptions{})
				time.Sleep(time.Until(slept.AvailableAt) + 20*time.Millisecond) // both available when the worker looks
				startWorker(t, q, WorkOptions{Concurrency: 1, RateLimitedPriority: c.rule})
				mustAwait(t, q, old)
				mustAwait(t, q, newer)
				if got := order(); !slices.Equal(got, c.order) {
					t.Errorf("run order = %v, want %v: %s", got, c.order, c.whyBefore)
				}
			})
		}
	})
}

// A database from before one queue per type keeps every task in the http
// queue; opening it moves the other types' tasks to theirs, and they run.
func TestMigrationMovesTasksToTheirTypesQueues(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		hs := map[string]HandlerFunc{"t.old": (&scripted{steps: []step{succeed(`1`)}}).handle}
		q := openQueue(t, dsn, withHandlers(hs))
		id := mustSubmit(t, q, "t.old", `{}`, SubmitOptions{})
		b := rawBackend(q).(interface{ pool() runner })
		ctx := ctxT(t)
		for _, stmt := range []string{
			"UPDATE river_job SET queue = 'ratekeeper' WHERE kind = 't.old'",
			"DELETE FROM ratekeeper_task_migrations WHERE version = 2",
		} {
			if err := b.pool().exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := q.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("task in the old queue: Get error %v, want not found (it is not where its type lives)", err)
		}
		res, err := Migrate(ctx, dsn)
		if err != nil || !slices.Equal(res.Tasks, []int{2}) {
			t.Fatalf("Migrate = %+v, %v; want version 2 applied", res, err)
		}
		q2 := openQueue(t, dsn, withHandlers(hs))
		startWorker(t, q2, WorkOptions{})
		if got := mustAwait(t, q2, id); got.State != StateCompleted {
			t.Errorf("moved task = %+v, want completed", got)
		}
	})
}

// TypeConcurrency runs as many tasks of a type at once as it says, and the
// other types Concurrency each: 3 of t.wide beside 1 of t.narrow, as
// `tasks worker` claims http tasks ahead of its requests in flight while
// its poll tasks keep one claim per poll.
func TestTypeConcurrency(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		var mu sync.Mutex
		running, most := map[string]int{}, map[string]int{}
		started, release := make(chan string, 16), make(chan struct{})
		h := func(ctx context.Context, task *Task) (json.RawMessage, error) {
			mu.Lock()
			running[task.Type]++
			most[task.Type] = max(most[task.Type], running[task.Type])
			mu.Unlock()
			started <- task.Type
			select {
			case <-release:
			case <-ctx.Done():
			}
			mu.Lock()
			running[task.Type]--
			mu.Unlock()
			return nil, nil
		}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.wide": h, "t.narrow": h}))
		if err := q.Work(ctxT(t), WorkOptions{TypeConcurrency: map[string]int{"t.wide": 0}}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Work with a type's concurrency of 0: %v, want ErrInvalid", err)
		}
		var ids []int64
		for range 5 {
			ids = append(ids, mustSubmit(t, q, "t.wide", `{}`, SubmitOptions{}), mustSubmit(t, q, "t.narrow", `{}`, SubmitOptions{}))
		}
		startWorker(t, q, WorkOptions{Concurrency: 1, TypeConcurrency: map[string]int{"t.wide": 3}})
		// Every handler holds its task until release: 3 wide and 1 narrow
		// at once, whatever the order they start in.
		seen := map[string]int{}
		for seen["t.wide"] < 3 || seen["t.narrow"] < 1 {
			select {
			case typ := <-started:
				seen[typ]++
			case <-ctxT(t).Done():
				t.Fatalf("started %v, want 3 t.wide and 1 t.narrow at once", seen)
			}
		}
		close(release)
		for _, id := range ids {
			mustAwait(t, q, id)
		}
		mu.Lock()
		defer mu.Unlock()
		if most["t.wide"] != 3 || most["t.narrow"] != 1 {
			t.Errorf("at most %d t.wide and %d t.narrow ran at once, want 3 and 1", most["t.wide"], most["t.narrow"])
		}
	})
}
