package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// eventually polls cond until it holds; it fails the test after 20s with
// cond's last description of what it saw.
func eventually(t testing.TB, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met in 20s; last saw: %s", saw)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitTask polls task id until cond holds.
func waitTask(t testing.TB, q *Queue, id int64, cond func(*Task) bool) *Task {
	t.Helper()
	var last *Task
	eventually(t, func() (bool, string) {
		task, err := q.Get(ctxT(t), id)
		if err != nil {
			return false, err.Error()
		}
		last = task
		return cond(task), fmt.Sprintf("%+v", *task)
	})
	return last
}

// history returns the task's history once its last event is of kind last.
func history(t testing.TB, q *Queue, id int64, last EventKind) []Event {
	t.Helper()
	var evs []Event
	eventually(t, func() (bool, string) {
		var err error
		evs, err = q.History(ctxT(t), id)
		if err != nil {
			return false, err.Error()
		}
		return len(evs) > 0 && evs[len(evs)-1].Kind == last, fmt.Sprint(kinds(evs))
	})
	return evs
}

// storedHistory waits until the history table itself (not the row's
// outbox) holds n events for the task.
func storedHistory(t testing.TB, q *Queue, id int64, n int) []Event {
	t.Helper()
	var evs []Event
	eventually(t, func() (bool, string) {
		var err error
		evs, err = q.b.events(ctxT(t), id)
		if err != nil {
			return false, err.Error()
		}
		return len(evs) == n, fmt.Sprint(kinds(evs))
	})
	return evs
}

func wantKinds(t testing.TB, evs []Event, want ...EventKind) {
	t.Helper()
	if got := kinds(evs); !slices.Equal(got, want) {
		t.Fatalf("history kinds = %v, want %v\n%s", got, want, render(evs))
	}
}

func render(evs []Event) string {
	var sb strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&sb, "  %s %s\n", e.At.Format("15:04:05.000000"), e)
	}
	return sb.String()
}

// script returns a handler that plays the given steps in turn, one per
// attempt (the last one repeats), and a log of the attempts it saw.
type step func(ctx context.Context, t *Task) (json.RawMessage, error)

type scripted struct {
	mu    sync.Mutex
	steps []step
	calls []*Task
}

func (s *scripted) handle(ctx context.Context, t *Task) (json.RawMessage, error) {
	s.mu.Lock()
	cp := *t
	s.calls = append(s.calls, &cp)
	st := s.steps[min(len(s.calls), len(s.steps))-1]
	s.mu.Unlock()
	return st(ctx, t)
}

func (s *scripted) seen() []*Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func reschedule(d time.Duration) step {
	return func(context.Context, *Task) (json.RawMessage, error) { return nil, Reschedule(d) }
}

func fail(msg string) step {
	return func(context.Context, *Task) (json.RawMessage, error) { return nil, errors.New(msg) }
}

func succeed(result string) step {
	return func(context.Context, *Task) (json.RawMessage, error) { return json.RawMessage(result), nil }
}

func withHandlers(hs map[string]HandlerFunc) Options {
	o := testOptions()
	o.Handlers = hs
	return o
}

func near(got, want time.Time, tol time.Duration) bool {
	d := got.Sub(want)
	return d > -tol && d < tol
}

func TestRescheduleIsADurableSleepNotARetry(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		sleeper := &scripted{steps: []step{reschedule(time.Hour)}}
		other := &scripted{steps: []step{succeed(`"done"`)}}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.sleeper": sleeper.handle, "t.other": other.handle}))

		a := mustSubmit(t, q, "t.sleeper", `{}`, SubmitOptions{})
		b := mustSubmit(t, q, "t.other", `{}`, SubmitOptions{})
		before := time.Now()
		// One worker slot: b can only run if the rescheduled a gave it up.
		startWorker(t, q, WorkOptions{Concurrency: 1, WorkerID: "w1"})

		if got := mustAwait(t, q, b); got.State != StateCompleted || string(got.Result) != `"done"` {
			t.Fatalf("other task = %+v, want completed with its result while the first sleeps", got)
		}
		ta := waitTask(t, q, a, func(t *Task) bool { return t.RescheduleCount == 1 })
		after := time.Now()
		if ta.State != StatePending || ta.RetryCount != 0 || ta.Attempt != 1 || ta.LastError != "" {
			t.Errorf("rescheduled task = state %s, retries %d, attempt %d, last error %q; want pending, 0, 1, none",
				ta.State, ta.RetryCount, ta.Attempt, ta.LastError)
		}
		if ta.AvailableAt.Before(before.Add(time.Hour-time.Second)) || ta.AvailableAt.After(after.Add(time.Hour+time.Second)) {
			t.Errorf("available_at = %s, want now+1h (between %s and %s)", ta.AvailableAt, before.Add(time.Hour), after.Add(time.Hour))
		}
		evs := history(t, q, a, EventRescheduled)
		wantKinds(t, evs, EventCreated, EventClaimed, EventRescheduled)
		if e := evs[2]; e.Delay != time.Hour || e.RescheduleCount != 1 || e.RetryCount != 0 || e.String() != "rescheduled +1h0m0s (count 1)" {
			t.Errorf("reschedule event = %+v (%q)", e, e.String())
		}
		if e := evs[1]; e.Worker != "w1" || e.String() != "claimed by worker w1 (attempt 1)" {
			t.Errorf("claim event = %q, want claimed by worker w1 (attempt 1)", e.String())
		}
		if n := len(sleeper.seen()); n != 1 {
			t.Errorf("sleeping handler ran %d times, want 1", n)
		}
	})
}

func TestMaxReschedulesFailsTheTask(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		h := &scripted{steps: []step{reschedule(0)}}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.bounce": h.handle}))
		limited := mustSubmit(t, q, "t.bounce", `{}`, SubmitOptions{MaxReschedules: 2})
		none := mustSubmit(t, q, "t.bounce", `{"n":0}`, SubmitOptions{MaxReschedules: NoReschedules})
		startWorker(t, q, WorkOptions{Concurrency: 2})

		got := mustAwait(t, q, limited)
		if got.State != StateFailed || got.LastError != "max reschedules (2) exceeded" || got.RescheduleCount != 2 ||
			got.MaxReschedules != 2 || got.Attempt != 3 || got.RetryCount != 0 {
			t.Fatalf("task = %+v\nwant failed with \"max reschedules (2) exceeded\", 2 reschedules, attempt 3, no retries", got)
		}
		evs := history(t, q, limited, EventFailed)
		wantKinds(t, evs, EventCreated, EventClaimed, EventRescheduled, EventClaimed, EventRescheduled, EventClaimed, EventFailed)
		if evs[6].String() != "failed: max reschedules (2) exceeded" {
			t.Errorf("last event = %q", evs[6])
		}
		if got := mustAwait(t, q, none); got.State != StateFailed || got.LastError != "max reschedules (0) exceeded" || got.RescheduleCount != 0 {
			t.Fatalf("NoReschedules task = %+v, want failed at its first reschedule", got)
		}
		// failed, not cancelled, in lists too
		failed, err := q.List(ctxT(t), Filter{State: StateFailed})
		if err != nil || len(failed) != 2 {
			t.Fatalf("List(failed) = %d tasks, %v; want 2", len(failed), err)
		}
		if c, err := q.List(ctxT(t), Filter{State: StateCancelled}); err != nil || len(c) != 0 {
			t.Fatalf("List(cancelled) = %d tasks, %v; want 0", len(c), err)
		}
	})
}

func TestRescheduleZeroGoesToTheBackOfTheQueue(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		var mu sync.Mutex
		var order []string
		run := func(ctx context.Context, task *Task) (json.RawMessage, error) {
			var in struct{ Name string }
			_ = json.Unmarshal(task.Input, &in)
			mu.Lock()
			order = append(order, in.Name)
			mu.Unlock()
			if in.Name == "a" && task.RescheduleCount == 0 {
				return nil, Reschedule(0)
			}
			return nil, nil
		}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.named": run}))
		var ids []int64
		for _, name := range []string{"a", "b", "c", "d"} {
			ids = append(ids, mustSubmit(t, q, "t.named", `{"name":"`+name+`"}`, SubmitOptions{}))
		}
		startWorker(t, q, WorkOptions{Concurrency: 1})
		ta := mustAwait(t, q, ids[0])
		for _, id := range ids[1:] {
			mustAwait(t, q, id)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"a", "b", "c", "d", "a"}; !slices.Equal(order, want) {
			t.Fatalf("run order = %v, want %v: a task rescheduled with delay 0 runs after those already waiting", order, want)
		}
		if ta.RescheduleCount != 1 || ta.RetryCount != 0 || ta.State != StateCompleted {
			t.Errorf("task a = %+v, want completed after 1 reschedule", ta)
		}
	})
}

// quotaError stands for the rate-limit-aware client's error: the wait for
// quota is longer than the client may block.
type quotaError struct{ at time.Time }

func (e quotaError) Error() string      { return "quota exhausted until " + e.at.Format(time.RFC3339) }
func (e quotaError) RetryAt() time.Time { return e.at }

func TestRetryAtErrorsReschedule(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		at := time.Now().Add(2 * time.Hour).Truncate(time.Second)
		h := &scripted{steps: []step{func(context.Context, *Task) (json.RawMessage, error) {
			// wrapped twice, as an http.Client would
			return nil, fmt.Errorf("GET https://api.example.test/x: %w", fmt.Errorf("pace: %w", quotaError{at: at}))
		}}}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.api": h.handle}))
		id := mustSubmit(t, q, "t.api", `{}`, SubmitOptions{MaxRetries: NoRetries})
		startWorker(t, q, WorkOptions{})
		got := waitTask(t, q, id, func(t *Task) bool { return t.RescheduleCount == 1 })
		if got.State != StatePending || got.RetryCount != 0 || got.LastError != "" {
			t.Fatalf("task = %+v, want pending, rescheduled, not retried (it has no retries to spend)", got)
		}
		if !near(got.AvailableAt, at, time.Second) {
			t.Errorf("available_at = %s, want the error's RetryAt %s", got.AvailableAt, at)
		}
		evs := history(t, q, id, EventRescheduled)
		if d := evs[len(evs)-1].Delay; d < 2*time.Hour-2*time.Second || d > 2*time.Hour {
			t.Errorf("reschedule delay = %s, want about 2h", d)
		}
	})
}

func TestFailuresRetryWithBackoffAndCountAsRetries(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		flaky := &scripted{steps: []step{fail("boom 1"), fail("boom 2"), succeed(`{"ok":true}`)}}
		broken := &scripted{steps: []step{fail("always")}}
		fatal := &scripted{steps: []step{func(context.Context, *Task) (json.RawMessage, error) {
			return nil, Permanent(errors.New("bad input"))
		}}}
		opts := withHandlers(map[string]HandlerFunc{"t.flaky": flaky.handle, "t.broken": broken.handle, "t.fatal": fatal.handle})
		var backoffMu sync.Mutex
		var asked []int
		opts.Backoff = func(retry int) time.Duration {
			backoffMu.Lock()
			asked = append(asked, retry)
			backoffMu.Unlock()
			return time.Duration(retry) * 10 * time.Millisecond
		}
		q := openQueue(t, dsn, opts)
		f := mustSubmit(t, q, "t.flaky", `{}`, SubmitOptions{})
		startWorker(t, q, WorkOptions{})

		got := mustAwait(t, q, f)
		if got.State != StateCompleted || got.RetryCount != 2 || got.RescheduleCount != 0 || got.Attempt != 3 || got.MaxRetries != DefaultMaxRetries {
			t.Fatalf("flaky task = %+v, want completed after 2 retries, 0 reschedules, 3 attempts", got)
		}
		if got.LastError != "boom 2" {
			t.Errorf("last error = %q, want boom 2", got.LastError)
		}
		evs := history(t, q, f, EventCompleted)
		wantKinds(t, evs, EventCreated, EventClaimed, EventRetried, EventClaimed, EventRetried, EventClaimed, EventCompleted)
		if e := evs[2]; e.Message != "boom 1" || e.Delay != 10*time.Millisecond || e.RetryCount != 1 {
			t.Errorf("first retry event = %+v", e)
		}
		if e := evs[4]; e.String() != "retried after error: boom 2 (retry 2, next in 20ms)" {
			t.Errorf("second retry event = %q", e)
		}
		backoffMu.Lock()
		if !slices.Equal(asked, []int{1, 2}) {
			t.Errorf("backoff asked for retries %v, want [1 2]", asked)
		}
		backoffMu.Unlock()

		b := mustSubmit(t, q, "t.broken", `{}`, SubmitOptions{MaxRetries: 1})
		if got := mustAwait(t, q, b); got.State != StateFailed || got.RetryCount != 1 || got.Attempt != 2 || got.LastError != "always" {
			t.Fatalf("broken task = %+v, want failed after 1 retry", got)
		}
		wantKinds(t, history(t, q, b, EventFailed), EventCreated, EventClaimed, EventRetried, EventClaimed, EventFailed)

		n := mustSubmit(t, q, "t.broken", `{"n":1}`, SubmitOptions{MaxRetries: NoRetries})
		if got := mustAwait(t, q, n); got.State != StateFailed || got.RetryCount != 0 || got.Attempt != 1 {
			t.Fatalf("NoRetries task = %+v, want failed on its first error", got)
		}
		p := mustSubmit(t, q, "t.fatal", `{}`, SubmitOptions{})
		if got := mustAwait(t, q, p); got.State != StateFailed || got.RetryCount != 0 || got.LastError != "bad input" {
			t.Fatalf("Permanent task = %+v, want failed at once with its error", got)
		}
	})
}

func TestAttemptTimeoutIsAFailedAttempt(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		h := &scripted{steps: []step{func(ctx context.Context, _ *Task) (json.RawMessage, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, succeed(`1`)}}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.slow": h.handle}))
		id := mustSubmit(t, q, "t.slow", `{}`, SubmitOptions{Timeout: 50 * time.Millisecond})
		startWorker(t, q, WorkOptions{})
		got := mustAwait(t, q, id)
		if got.State != StateCompleted || got.RetryCount != 1 || got.Timeout != 50*time.Millisecond {
			t.Fatalf("task = %+v, want completed after one timed-out attempt", got)
		}
		if want := "attempt timed out after 50ms: context deadline exceeded"; got.LastError != want {
			t.Errorf("last error = %q, want %q", got.LastError, want)
		}
	})
}

func TestHistoryRecordsEveryStateChange(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		h := &scripted{steps: []step{reschedule(0), reschedule(30 * time.Millisecond), fail("flaky upstream"), succeed(`"ok"`)}}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.story": h.handle}))
		id := mustSubmit(t, q, "t.story", `{"x":1}`, SubmitOptions{MaxReschedules: 100})
		startWorker(t, q, WorkOptions{WorkerID: "hist-worker"})
		mustAwait(t, q, id)

		want := []string{
			"created",
			"claimed by worker hist-worker (attempt 1)",
			"rescheduled +0s (count 1)",
			"claimed by worker hist-worker (attempt 2)",
			"rescheduled +30ms (count 2)",
			"claimed by worker hist-worker (attempt 3)",
			"retried after error: flaky upstream (retry 1, next in 5ms)",
			"claimed by worker hist-worker (attempt 4)",
			"completed",
		}
		// What the API shows, and what the history table itself holds once
		// the projector caught up: the same 9 events.
		for name, evs := range map[string][]Event{
			"History": history(t, q, id, EventCompleted),
			"table":   storedHistory(t, q, id, len(want)),
		} {
			var got []string
			for _, e := range evs {
				got = append(got, e.String())
				if e.TaskID != id {
					t.Errorf("%s: event for task %d in task %d's history", name, e.TaskID, id)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s =\n  %s\nwant\n  %s", name, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			for i := 1; i < len(evs); i++ {
				if evs[i].At.Before(evs[i-1].At) {
					t.Errorf("%s: event %d (%s) is older than event %d", name, i, evs[i], i-1)
				}
			}
		}
		got, _ := q.Get(ctxT(t), id)
		if got.RescheduleCount != 2 || got.RetryCount != 1 || got.Attempt != 4 || got.MaxReschedules != 100 {
			t.Errorf("task = %+v, want 2 reschedules (of 100), 1 retry, attempt 4", got)
		}
	})
}

func TestCancel(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		started := make(chan int64, 1)
		blocker := func(ctx context.Context, task *Task) (json.RawMessage, error) {
			started <- task.ID
			<-ctx.Done()
			return nil, context.Cause(ctx)
		}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.block": blocker}))
		ctx := ctxT(t)

		// pending: cancelled at once
		later := mustSubmit(t, q, "t.block", `{}`, SubmitOptions{At: time.Now().Add(time.Hour)})
		got, err := q.Cancel(ctx, later)
		if err != nil || got.State != StateCancelled || got.FinishedAt == nil {
			t.Fatalf("Cancel(pending) = %+v, %v; want cancelled", got, err)
		}
		wantKinds(t, history(t, q, later, EventCancelled), EventCreated, EventCancelled)
		if _, err := q.Cancel(ctx, later); !errors.Is(err, ErrFinished) || !strings.Contains(err.Error(), "already cancelled") {
			t.Errorf("Cancel(cancelled) error = %v, want ErrFinished saying already cancelled", err)
		}
		if _, err := q.Cancel(ctx, 999_999); !errors.Is(err, ErrNotFound) {
			t.Errorf("Cancel(unknown) error = %v, want ErrNotFound", err)
		}

		// running: cancelled through another Queue on the same database, as
		// `ratekeeper tasks cancel` in another process would
		running := mustSubmit(t, q, "t.block", `{"n":2}`, SubmitOptions{})
		startWorker(t, q, WorkOptions{})
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("handler never started")
		}
		other := openQueue(t, dsn, testOptions())
		got, err = other.Cancel(ctx, running)
		if err != nil || got.State != StateRunning {
			t.Fatalf("Cancel(running) = %+v, %v; want still running, cancel requested", got, err)
		}
		if got := mustAwait(t, q, running); got.State != StateCancelled {
			t.Fatalf("running task after cancel = %+v, want cancelled", got)
		}
		wantKinds(t, history(t, q, running, EventCancelled), EventCreated, EventClaimed, EventCancelRequested, EventCancelled)
	})
}

func TestUniqueKeyMakesSubmitIdempotent(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.u": (&scripted{steps: []step{succeed(`1`)}}).handle}))
		ctx := ctxT(t)
		opts := SubmitOptions{UniqueKey: "https://example.test/a", At: time.Now().Add(time.Hour)}
		first := mustSubmit(t, q, "t.u", `{"url":"https://example.test/a"}`, opts)
		res, err := q.SubmitMany(ctx, []Submission{
			{Type: "t.u", Input: json.RawMessage(`{"url":"https://example.test/a","again":true}`), Options: opts},
			{Type: "t.u", Input: json.RawMessage(`{}`), Options: SubmitOptions{UniqueKey: "https://example.test/b"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res[0] != (Submitted{ID: first, Duplicate: true}) || res[1].Duplicate || res[1].ID == first {
			t.Fatalf("SubmitMany = %+v, want the first a duplicate of %d, the second new", res, first)
		}
		if all, _ := q.List(ctx, Filter{}); len(all) != 2 {
			t.Fatalf("%d tasks stored, want 2", len(all))
		}
		wantKinds(t, history(t, q, first, EventCreated), EventCreated)
		got, _ := q.Get(ctx, first)
		if got.UniqueKey != "https://example.test/a" {
			t.Errorf("unique key = %q", got.UniqueKey)
		}
		// A cancelled (or failed) task no longer blocks its key.
		if _, err := q.Cancel(ctx, first); err != nil {
			t.Fatal(err)
		}
		if again := mustSubmit(t, q, "t.u", `{}`, opts); again == first {
			t.Errorf("submit after cancel returned the cancelled task %d, want a new one", first)
		}
	})
}

func TestTasksSurviveARestart(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		var mu sync.Mutex
		var workers []string
		// The first process reschedules the task once and cannot finish it
		// (a later attempt there blocks until shutdown interrupts it); only
		// the second process completes it.
		h := func(ctx context.Context, task *Task) (json.RawMessage, error) {
			mu.Lock()
			workers = append(workers, task.Worker)
			mu.Unlock()
			switch {
			case task.Worker == "first" && task.RescheduleCount == 0:
				return nil, Reschedule(0)
			case task.Worker == "first":
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return json.RawMessage(`"second life"`), nil
		}
		q1 := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.phoenix": h}))
		id := mustSubmit(t, q1, "t.phoenix", `{}`, SubmitOptions{})
		untouched := mustSubmit(t, q1, "t.phoenix", `{"n":2}`, SubmitOptions{At: time.Now().Add(time.Hour)})
		stop := startWorker(t, q1, WorkOptions{WorkerID: "first", Concurrency: 1, ShutdownTimeout: 20 * time.Millisecond})
		waitTask(t, q1, id, func(t *Task) bool { return t.RescheduleCount == 1 })
		stop()
		if err := q1.Close(); err != nil {
			t.Fatal(err)
		}

		q2 := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.phoenix": h}))
		if got, err := q2.Get(ctxT(t), untouched); err != nil || got.State != StatePending {
			t.Fatalf("untouched task after restart = %+v, %v; want pending", got, err)
		}
		startWorker(t, q2, WorkOptions{WorkerID: "second", Concurrency: 1})
		got := mustAwait(t, q2, id)
		if got.State != StateCompleted || string(got.Result) != `"second life"` || got.RescheduleCount != 1 || got.Worker != "second" || got.RetryCount != 0 {
			t.Fatalf("task after restart = %+v, want completed by the second worker, its one reschedule kept", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if workers[0] != "first" || workers[len(workers)-1] != "second" {
			t.Errorf("attempts ran on %v, want the first worker first and the second last", workers)
		}
	})
}

// A handler that only waits gives its task back as soon as its worker
// begins to stop (Stopping, ErrStopping): back to pending at once,
// interrupted and counted as sent nothing, long before ShutdownTimeout.
// ErrStopping returned while the worker runs on is an error like any
// other: retried.
func TestStoppingGivesBackAWaitingTask(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		started := make(chan struct{}, 1)
		h := &scripted{steps: []step{
			func(ctx context.Context, _ *Task) (json.RawMessage, error) {
				return nil, fmt.Errorf("not stopping yet: %w", ErrStopping)
			},
			func(ctx context.Context, _ *Task) (json.RawMessage, error) {
				started <- struct{}{}
				<-Stopping(ctx).Done()
				return nil, fmt.Errorf("waiting for quota: %w", ErrStopping)
			}, succeed(`3`)}}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.waits": h.handle}))
		id := mustSubmit(t, q, "t.waits", `{}`, SubmitOptions{})
		stop := startWorker(t, q, WorkOptions{WorkerID: "leaving", ShutdownTimeout: time.Hour})
		<-started
		stop() // returns once the handler gave its task back, not in an hour
		got, err := q.Get(ctxT(t), id)
		// unsent is 2 when River handed the stopping worker the task
		// again before its producers stopped: given back unrun.
		if err != nil || got.State != StatePending || got.RetryCount != 1 || got.RescheduleCount != 0 || got.unsent < 1 {
			t.Fatalf("task = %+v, %v; want pending, the first ErrStopping retried, the second given back unsent", got, err)
		}
		if mayHaveSent(got) {
			t.Errorf("a task given back unsent reads as one that may have reached the server")
		}
		evs := history(t, q, id, EventInterrupted)
		if s := evs[len(evs)-1].String(); s != "interrupted: worker leaving shut down; back to pending" {
			t.Errorf("event = %q", s)
		}
		startWorker(t, q, WorkOptions{})
		if got := mustAwait(t, q, id); got.State != StateCompleted {
			t.Fatalf("task = %+v, want completed by the next worker", got)
		}
	})
}

func TestShutdownInterruptsAndRequeues(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		started := make(chan struct{}, 1)
		h := &scripted{steps: []step{func(ctx context.Context, _ *Task) (json.RawMessage, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}, succeed(`2`)}}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.long": h.handle}))
		id := mustSubmit(t, q, "t.long", `{}`, SubmitOptions{})
		stop := startWorker(t, q, WorkOptions{WorkerID: "leaving", ShutdownTimeout: 50 * time.Millisecond})
		<-started
		stop()
		got, err := q.Get(ctxT(t), id)
		if err != nil || got.State != StatePending || got.RetryCount != 0 || got.RescheduleCount != 0 {
			t.Fatalf("interrupted task = %+v, %v; want pending, no retry, no reschedule counted", got, err)
		}
		evs := history(t, q, id, EventInterrupted)
		if s := evs[len(evs)-1].String(); s != "interrupted: worker leaving shut down; back to pending" {
			t.Errorf("event = %q", s)
		}
		startWorker(t, q, WorkOptions{})
		// Attempt 2, or later when the stopping worker was handed the
		// task again before its producers stopped (it gives it back
		// unrun: Work).
		if got := mustAwait(t, q, id); got.State != StateCompleted || got.Attempt < 2 || got.RescheduleCount != 0 {
			t.Fatalf("task = %+v, want completed on attempt 2 or later", got)
		}
	})
}

func TestSubmitRejectsBadInputWithoutWriting(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.ok": (&scripted{steps: []step{succeed(`1`)}}).handle}))
		ctx := ctxT(t)
		cases := []struct {
			typ, input string
			opts       SubmitOptions
			is         error
			says       string
		}{
			{"T nope", `{}`, SubmitOptions{}, ErrInvalid, `task type "T nope": use 2-64 characters`},
			{"t.ok", `{}`, SubmitOptions{Priority: 5}, ErrInvalid, "priority 5: use 1 (first) to 4 (last)"},
			{"t.ok", `{"a":`, SubmitOptions{}, ErrInvalid, "input is not valid JSON"},
			{"t.ok", `{}`, SubmitOptions{MaxRetries: -2}, ErrInvalid, "max retries -2"},
			{"t.ok", `{}`, SubmitOptions{MaxReschedules: -5}, ErrInvalid, "max reschedules -5"},
			{"t.ok", `{}`, SubmitOptions{Timeout: -time.Second}, ErrInvalid, "timeout -1s"},
			{"http", `{"url":"ftp://x"}`, SubmitOptions{}, ErrInvalid, `url "ftp://x": want an absolute http:// or https:// URL`},
			{"http", `{"link":"https://x"}`, SubmitOptions{}, ErrInvalid, `unknown field "link"`},
		}
		for _, c := range cases {
			_, err := q.Submit(ctx, c.typ, json.RawMessage(c.input), c.opts)
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("Submit(%s, %s, %+v) error = %v, want %v saying %q", c.typ, c.input, c.opts, err, c.is, c.says)
			}
		}
		// one bad submission in a batch writes nothing
		_, err := q.SubmitMany(ctx, []Submission{{Type: "t.ok"}, {Type: "t.ok", Input: json.RawMessage(`nope`)}})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "submission 2") {
			t.Errorf("SubmitMany error = %v, want submission 2 invalid", err)
		}
		if all, err := q.List(ctx, Filter{}); err != nil || len(all) != 0 {
			t.Errorf("after rejected submissions: %d tasks, %v; want none", len(all), err)
		}
		if _, err := q.List(ctx, Filter{State: "done"}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "valid: pending, running, completed, failed, cancelled") {
			t.Errorf("List(bad state) error = %v", err)
		}
		if _, err := q.Get(ctx, 12345); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(unknown) error = %v, want ErrNotFound", err)
		}
	})
}

func TestListFiltersAndPages(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{
			"t.a": (&scripted{steps: []step{succeed(`1`)}}).handle,
			"t.b": (&scripted{steps: []step{succeed(`1`)}}).handle,
		}))
		ctx := ctxT(t)
		later := SubmitOptions{At: time.Now().Add(time.Hour)}
		var ids []int64
		for i := range 5 {
			typ := "t.a"
			if i%2 == 1 {
				typ = "t.b"
			}
			ids = append(ids, mustSubmit(t, q, typ, fmt.Sprintf(`{"i":%d}`, i), later))
		}
		if _, err := q.Cancel(ctx, ids[4]); err != nil {
			t.Fatal(err)
		}
		check := func(f Filter, want ...int64) {
			t.Helper()
			got, err := q.List(ctx, f)
			if err != nil {
				t.Fatalf("List(%+v): %v", f, err)
			}
			var gotIDs []int64
			for _, task := range got {
				gotIDs = append(gotIDs, task.ID)
			}
			if !slices.Equal(gotIDs, want) {
				t.Errorf("List(%+v) = %v, want %v", f, gotIDs, want)
			}
		}
		check(Filter{}, ids...)
		check(Filter{Type: "t.b"}, ids[1], ids[3])
		check(Filter{State: StatePending}, ids[:4]...)
		check(Filter{State: StateCancelled}, ids[4])
		check(Filter{State: StateCancelled, Type: "t.b"})
		check(Filter{Limit: 2}, ids[0], ids[1])
		check(Filter{Limit: 2, AfterID: ids[1]}, ids[2], ids[3])

		many, err := q.GetMany(ctx, []int64{ids[3], 999_999, ids[0]})
		if err != nil || len(many) != 3 || many[0].ID != ids[3] || many[1] != nil || many[2].ID != ids[0] {
			t.Errorf("GetMany = %v, %v; want tasks %d, nil, %d", many, err, ids[3], ids[0])
		}
	})
}

func TestMetrics(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		h := &scripted{steps: []step{reschedule(0), reschedule(2 * time.Millisecond), fail("x"), succeed(`1`)}}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.m": h.handle}))
		id := mustSubmit(t, q, "t.m", `{}`, SubmitOptions{})
		startWorker(t, q, WorkOptions{})
		mustAwait(t, q, id)
		if got := counterValue(q.metrics.rescheduled.WithLabelValues("t.m")); got != 2 {
			t.Errorf("ratekeeper_tasks_rescheduled_total{type=t.m} = %v, want 2", got)
		}
		for outcome, want := range map[string]float64{"rescheduled": 2, "retried": 1, "completed": 1, "failed": 0} {
			if got := counterValue(q.metrics.outcomes.WithLabelValues("t.m", outcome)); got != want {
				t.Errorf("ratekeeper_tasks_total{type=t.m,outcome=%s} = %v, want %v", outcome, got, want)
			}
		}
		if got := counterValue(q.metrics.submitted.WithLabelValues("t.m")); got != 1 {
			t.Errorf("submitted = %v, want 1", got)
		}
		families, err := q.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		var delays *dto.Histogram
		for _, f := range families {
			if f.GetName() == "ratekeeper_reschedule_delay_seconds" {
				delays = f.GetMetric()[0].GetHistogram()
			}
		}
		if delays == nil || delays.GetSampleCount() != 2 || delays.GetSampleSum() < 0.002 || delays.GetSampleSum() > 0.003 {
			t.Errorf("ratekeeper_reschedule_delay_seconds = %v, want 2 samples summing to 2ms", delays)
		}
	})
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// A worker that dies between River's update of a task and the copy of its
// events into the history table leaves them on the row: History still
// shows them, and the next worker's sweep copies them.
func TestSweepCopiesHistoryLeftOnRows(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		h := &scripted{steps: []step{reschedule(0), succeed(`1`)}}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.s": h.handle}))
		id := mustSubmit(t, q, "t.s", `{}`, SubmitOptions{})
		stop := startWorker(t, q, WorkOptions{})
		mustAwait(t, q, id)
		storedHistory(t, q, id, 5)
		stop()
		// The crash: the table lost what the projector wrote (the final
		// claim and completion are still in the row's outbox).
		b := rawBackend(q).(interface{ pool() runner })
		if err := b.pool().exec(ctxT(t), "DELETE FROM ratekeeper_task_events WHERE task_id = $1 AND event_key IN ('claim-2', 'end-2')", id); err != nil {
			t.Fatal(err)
		}
		wantKinds(t, history(t, q, id, EventCompleted), EventCreated, EventClaimed, EventRescheduled, EventClaimed, EventCompleted)
		startWorker(t, q, WorkOptions{})
		wantKinds(t, storedHistory(t, q, id, 5), EventCreated, EventClaimed, EventRescheduled, EventClaimed, EventCompleted)
	})
}

// An attempt whose worker vanished (River's rescuer put the task back)
// shows up at the next claim as abandoned, counted as a retry.
func TestAbandonedAttemptsAreRecorded(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		h := &scripted{steps: []step{succeed(`"ok"`)}}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.a": h.handle}))
		id := mustSubmit(t, q, "t.a", `{}`, SubmitOptions{})
		// What the rescuer leaves after a worker "ghost" was killed during
		// attempt 1: River counted the attempt, nothing else recorded it.
		b := rawBackend(q).(interface{ pool() runner })
		fake := "UPDATE river_job SET attempt = 1, attempted_at = CURRENT_TIMESTAMP, attempted_by = json_array('ghost') WHERE id = $1"
		if strings.HasPrefix(dsn, "postgres") {
			fake = "UPDATE river_job SET attempt = 1, attempted_at = now(), attempted_by = ARRAY['ghost'] WHERE id = $1"
		}
		if err := b.pool().exec(ctxT(t), fake, id); err != nil {
			t.Fatal(err)
		}
		startWorker(t, q, WorkOptions{WorkerID: "w2"})
		got := mustAwait(t, q, id)
		if got.State != StateCompleted || got.Attempt != 2 || got.RetryCount != 1 {
			t.Fatalf("task = %+v, want completed on attempt 2 with the abandoned one counted as a retry", got)
		}
		evs := history(t, q, id, EventCompleted)
		wantKinds(t, evs, EventCreated, EventAbandoned, EventClaimed, EventCompleted)
		if s := evs[1].String(); !strings.HasPrefix(s, "attempt 1 by worker ghost abandoned") {
			t.Errorf("abandoned event = %q", s)
		}
	})
}
