package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
)

func TestDecide(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	backoff := func(retry int) time.Duration { return time.Duration(retry) * time.Second }
	base := attemptFacts{Attempt: 3, RiverAttempt: 1, MaxAttempts: 4, Reschedules: 2, MaxReschedules: 0, Retries: 0, Timeout: time.Minute}
	with := func(f func(*attemptFacts)) attemptFacts { a := base; f(&a); return a }
	boom := errors.New("boom")
	cases := []struct {
		name  string
		facts attemptFacts
		err   error
		end   ending
		want  outcome
	}{
		{"success", base, nil, ending{}, outcome{kind: EventCompleted}},
		{"success even if cancelled meanwhile", base, nil, ending{cancelled: true}, outcome{kind: EventCompleted}},
		{"cancelled", base, boom, ending{cancelled: true}, outcome{kind: EventCancelled, err: boom}},
		{"shutdown", base, context.Canceled, ending{stopping: true}, outcome{kind: EventInterrupted}},
		{"given back unsent as the worker stops", base, fmt.Errorf("get: %w", ErrStopping), ending{stopping: true, unsent: true},
			outcome{kind: EventInterrupted, unsent: true}},
		{"permanent", base, Permanent(boom), ending{}, outcome{kind: EventFailed, err: boom, early: true}},
		{"local fault", base, fmt.Errorf("get: %w", LocalFault(boom)), ending{}, outcome{kind: EventInterrupted, err: errors.New("get: boom"), local: true}},
		{"local fault on the last attempt", with(func(a *attemptFacts) { a.RiverAttempt = 4 }), LocalFault(boom), ending{},
			outcome{kind: EventInterrupted, err: boom, local: true}},
		{"claimed after a local fault stopped the worker", base, LocalFault(boom), ending{unsent: true},
			outcome{kind: EventInterrupted, err: boom, local: true, unsent: true}},
		{"local fault while cancelled", base, LocalFault(boom), ending{cancelled: true}, outcome{kind: EventCancelled, err: boom}},
		{"reschedule", base, Reschedule(time.Minute), ending{}, outcome{kind: EventRescheduled, delay: time.Minute}},
		{"reschedule wrapped", base, fmt.Errorf("x: %w", Reschedule(0)), ending{}, outcome{kind: EventRescheduled}},
		{"reschedule within limit", with(func(a *attemptFacts) { a.MaxReschedules = 3 }), Reschedule(0), ending{}, outcome{kind: EventRescheduled}},
		{"reschedule over limit", with(func(a *attemptFacts) { a.MaxReschedules = 2 }), Reschedule(0), ending{},
			outcome{kind: EventFailed, err: errors.New("max reschedules (2) exceeded"), early: true}},
		{"no reschedules allowed", with(func(a *attemptFacts) { a.Reschedules, a.MaxReschedules = 0, NoReschedules }), Reschedule(0), ending{},
			outcome{kind: EventFailed, err: errors.New("max reschedules (0) exceeded"), early: true}},
		{"retry at", base, fmt.Errorf("get: %w", quotaError{at: now.Add(90 * time.Second)}), ending{}, outcome{kind: EventRescheduled, delay: 90 * time.Second, rateLimited: true}},
		{"retry at in the past", base, quotaError{at: now.Add(-time.Hour)}, ending{}, outcome{kind: EventRescheduled, rateLimited: true}},
		{"retry at, retries spent", with(func(a *attemptFacts) { a.RiverAttempt = 4 }), quotaError{at: now.Add(time.Second)}, ending{},
			outcome{kind: EventRescheduled, delay: time.Second, rateLimited: true}},
		{"negative reschedule is a failure", base, Reschedule(-time.Second), ending{},
			outcome{kind: EventRetried, err: errors.New("tasks.Reschedule(-1s): the delay must be 0 (back of the queue) or positive"), delay: time.Second}},
		{"error retried", with(func(a *attemptFacts) { a.Retries = 1 }), boom, ending{}, outcome{kind: EventRetried, err: boom, delay: 2 * time.Second}},
		{"error on last attempt", with(func(a *attemptFacts) { a.RiverAttempt = 4 }), boom, ending{}, outcome{kind: EventFailed, err: boom}},
		{"timeout", base, context.DeadlineExceeded, ending{timedOut: true, stopping: true},
			outcome{kind: EventRetried, err: errors.New("attempt timed out after 1m0s: context deadline exceeded"), delay: time.Second}},
	}
	for _, c := range cases {
		got := decide(c.facts, c.err, c.end, now, backoff)
		if got.kind != c.want.kind || got.delay != c.want.delay || got.early != c.want.early || got.rateLimited != c.want.rateLimited || got.local != c.want.local || got.unsent != c.want.unsent ||
			fmt.Sprint(got.err) != fmt.Sprint(c.want.err) {
			t.Errorf("%s: decide = %+v (err %v), want %+v (err %v)", c.name, got, got.err, c.want, c.want.err)
		}
	}
}

func TestRecordApplyCounts(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	var rec record
	f := attemptFacts{Attempt: 1, Reschedules: 0}
	ev := rec.apply(7, f, outcome{kind: EventRescheduled, delay: time.Minute}, "w", now)
	if ev.RescheduleCount != 1 || ev.RetryCount != 0 || ev.Key != "end-1" || rec.Claims != 1 || ev.String() != "rescheduled +60s (count 1)" {
		t.Errorf("after reschedule: event %+v, record %+v", ev, rec)
	}
	f = attemptFacts{Attempt: 2, Reschedules: 1}
	ev = rec.apply(7, f, outcome{kind: EventRetried, err: errors.New("x"), delay: time.Second}, "w", now)
	if ev.RescheduleCount != 1 || ev.RetryCount != 1 || rec.Retries != 1 || rec.Claims != 2 {
		t.Errorf("after retry: event %+v, record %+v", ev, rec)
	}
	f = attemptFacts{Attempt: 3, Reschedules: 1}
	rec.apply(7, f, outcome{kind: EventInterrupted}, "w", now)
	if rec.Interrupted != 1 || rec.Retries != 1 {
		t.Errorf("after interruption: record %+v", rec)
	}
	rec.apply(7, attemptFacts{Attempt: 4}, outcome{kind: EventFailed, err: errors.New("x"), early: true}, "w", now)
	if !rec.Failed {
		t.Error("early failure not marked failed")
	}
}

func TestTaskFromRow(t *testing.T) {
	created := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	attempted := created.Add(time.Minute)
	rec := record{Result: json.RawMessage(`{"a":1}`), Retries: 1, Interrupted: 1, Claims: 4, UpdatedAt: created.Add(2 * time.Minute)}
	meta, _ := json.Marshal(map[string]any{
		"ratekeeper": submitMeta{MaxReschedules: 100, TimeoutMillis: -1},
		"snoozes":    3,
		"output":     rec,
	})
	row := &rivertype.JobRow{
		ID: 9, Kind: "http", EncodedArgs: []byte(`{"input":{"url":"x"},"unique_key":"k"}`), State: rivertype.JobStateRetryable,
		Attempt: 1, MaxAttempts: 4, Metadata: meta, CreatedAt: created, AttemptedAt: &attempted, AttemptedBy: []string{"a", "b"},
		ScheduledAt: created.Add(time.Hour), Errors: []rivertype.AttemptError{{At: attempted, Error: "JobCancelError: nope"}},
	}
	task, got, err := taskFromRow(row)
	if err != nil {
		t.Fatal(err)
	}
	if task.State != StatePending || task.Attempt != 4 || task.RescheduleCount != 2 || task.RetryCount != 1 || task.MaxRetries != 3 ||
		task.MaxReschedules != 100 || task.Timeout != NoTimeout || task.LastError != "nope" || task.Worker != "b" || task.UniqueKey != "k" ||
		string(task.Input) != `{"url":"x"}` || string(task.Result) != `{"a":1}` || !task.UpdatedAt.Equal(rec.UpdatedAt) || !task.AvailableAt.Equal(row.ScheduledAt) {
		t.Errorf("task = %+v", task)
	}
	if got.Claims != 4 {
		t.Errorf("record = %+v", got)
	}
	for _, c := range []struct {
		river  rivertype.JobState
		failed bool
		want   State
	}{
		{rivertype.JobStateAvailable, false, StatePending},
		{rivertype.JobStateScheduled, false, StatePending},
		{rivertype.JobStateRunning, false, StateRunning},
		{rivertype.JobStateCompleted, false, StateCompleted},
		{rivertype.JobStateDiscarded, false, StateFailed},
		{rivertype.JobStateCancelled, true, StateFailed},
		{rivertype.JobStateCancelled, false, StateCancelled},
	} {
		if got := mapState(c.river, c.failed); got != c.want {
			t.Errorf("mapState(%s, %v) = %s, want %s", c.river, c.failed, got, c.want)
		}
	}
}

func TestResolveSubmitOptions(t *testing.T) {
	r, err := SubmitOptions{}.resolve()
	if err != nil || r.maxAttempts != DefaultMaxRetries+1 || r.meta.MaxReschedules != 0 || r.meta.TimeoutMillis != DefaultTimeout.Milliseconds() {
		t.Errorf("defaults = %+v, %v", r, err)
	}
	r, err = SubmitOptions{MaxRetries: NoRetries, MaxReschedules: NoReschedules, Timeout: NoTimeout}.resolve()
	if err != nil || r.maxAttempts != 1 || r.meta.MaxReschedules != NoReschedules || r.meta.TimeoutMillis != -1 {
		t.Errorf("none = %+v, %v", r, err)
	}
	if r.priority() != DefaultPriority {
		t.Errorf("default priority = %d, want %d", r.priority(), DefaultPriority)
	}
	if r, err := (SubmitOptions{Priority: 4}).resolve(); err != nil || r.priority() != 4 {
		t.Errorf("priority 4 = %+v, %v", r, err)
	}
	for _, o := range []SubmitOptions{{MaxRetries: -3}, {MaxRetries: 10_000}, {MaxReschedules: -2}, {Timeout: -2}, {Timeout: time.Microsecond},
		{UniqueKey: strings.Repeat("k", 1001)}, {Priority: -1}, {Priority: 5}} {
		if _, err := o.resolve(); !errors.Is(err, ErrInvalid) {
			t.Errorf("resolve(%+v) error = %v, want ErrInvalid", o, err)
		}
	}
}

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 250 * time.Millisecond: "250ms", 60 * time.Second: "60s", 1500 * time.Millisecond: "1.5s",
		time.Hour: "1h0m0s", 90 * time.Minute: "1h30m0s",
	} {
		if got := HumanDuration(d); got != want {
			t.Errorf("HumanDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

var registerOnce sync.Once

func TestHandleRejectsMistakes(t *testing.T) {
	ok := func(context.Context, *Task) (json.RawMessage, error) { return nil, nil }
	registerOnce.Do(func() { Handle("test.registered-once", ok) })
	for name, f := range map[string]func(){
		"bad name":  func() { Handle("Bad Name", ok) },
		"nil":       func() { Handle("test.nil", nil) },
		"duplicate": func() { Handle("test.registered-once", ok) },
		"built in":  func() { Handle(HTTPType, ok) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Handle with %s did not panic", name)
				}
			}()
			f()
		}()
	}
	if _, ok := registered()["test.registered-once"]; !ok {
		t.Error("registered handler missing")
	}
}

func TestDefaultBackoff(t *testing.T) {
	for retry, bounds := range map[int][2]time.Duration{
		1: {500 * time.Millisecond, time.Second}, 2: {time.Second, 2 * time.Second}, 5: {8 * time.Second, 16 * time.Second},
		20: {30 * time.Minute, time.Hour}, 100: {30 * time.Minute, time.Hour},
	} {
		for range 20 {
			if d := DefaultBackoff(retry); d < bounds[0] || d > bounds[1] {
				t.Fatalf("DefaultBackoff(%d) = %s, want within %s", retry, d, bounds)
			}
		}
	}
}

func TestJSONForms(t *testing.T) {
	e := Event{TaskID: 1, At: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC), Kind: EventRescheduled, Attempt: 2, Delay: 90 * time.Second, RescheduleCount: 1, Key: "end-2"}
	b, err := json.Marshal(e)
	if err != nil || !strings.Contains(string(b), `"delay":"1m30s"`) {
		t.Fatalf("event JSON = %s, %v", b, err)
	}
	var back Event
	if err := json.Unmarshal(b, &back); err != nil || back != e {
		t.Fatalf("event round trip = %+v, %v; want %+v", back, err, e)
	}
	for _, c := range []struct {
		max     int
		timeout time.Duration
		want    []string
	}{
		{0, DefaultTimeout, []string{`"max_reschedules":null`, `"timeout":"5m0s"`}},
		{NoReschedules, NoTimeout, []string{`"max_reschedules":0`, `"timeout":null`}},
		{100, time.Second, []string{`"max_reschedules":100`, `"timeout":"1s"`}},
	} {
		b, err := json.Marshal(Task{ID: 1, MaxReschedules: c.max, Timeout: c.timeout})
		for _, w := range c.want {
			if err != nil || !strings.Contains(string(b), w) {
				t.Errorf("task JSON = %s, want %s", b, w)
			}
		}
	}
}

// TestQueueFor: every type gets a River queue of its own, valid by River's
// rules, readable, and never shared with another type.
func TestQueueFor(t *testing.T) {
	riverName := regexp.MustCompile(`^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$`) // River's nameRegex (v0.31.0)
	seen := map[string]string{}
	long := "a" + strings.Repeat("b.", 31) + "c"
	for _, typ := range []string{"http", "poll", "t.a", "t_a", "t-a", "t:a", "t..a", "a--b", "report.daily:v2", long, "x1"} {
		q := queueFor(typ)
		if !riverName.MatchString(q) || len(q) > 64 {
			t.Errorf("queueFor(%q) = %q: not a valid River queue name", typ, q)
		}
		if other, dup := seen[q]; dup {
			t.Errorf("queueFor(%q) = queueFor(%q) = %q", typ, other, q)
		}
		seen[q] = typ
		if row := (&rivertype.JobRow{Kind: typ, Queue: q}); !ours(row) {
			t.Errorf("ours(kind %s in %s) = false", typ, q)
		}
	}
	if q := queueFor("http"); q != "ratekeeper" {
		t.Errorf("queueFor(http) = %q, want the original queue", q)
	}
	if q := queueFor("report.daily:v2"); !strings.HasPrefix(q, "ratekeeper-report_daily_v2-") {
		t.Errorf("queueFor(report.daily:v2) = %q, want the type readable in it", q)
	}
	if ours(&rivertype.JobRow{Kind: "poll", Queue: "ratekeeper"}) || ours(&rivertype.JobRow{Kind: "mail", Queue: "default"}) {
		t.Error("ours accepts a job outside its type's queue")
	}
}

func TestRateLimitedPriority(t *testing.T) {
	for _, c := range []struct {
		rule          PriorityRule
		base, current int
		want          int
		change        bool
	}{
		{RaisePriority, 2, 2, 1, true},
		{RaisePriority, 4, 4, 3, true},
		{RaisePriority, 4, 3, 3, false}, // raised once, not again and again
		{RaisePriority, 1, 1, 1, false},
		{KeepPriority, 3, 3, 3, false},
	} {
		got, change := rateLimitedPriority(c.rule, c.base, c.current)
		if got != c.want || change != c.change {
			t.Errorf("rateLimitedPriority(%s, %d, %d) = %d, %v; want %d, %v", c.rule, c.base, c.current, got, change, c.want, c.change)
		}
	}
	if _, err := ParsePriorityRule("lower"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParsePriorityRule(lower) error = %v", err)
	}
}

func TestWaitingReason(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	due := &Task{Type: "mail", State: StatePending, AvailableAt: now.Add(-time.Second)}
	workers := []workerInfo{{ID: "a", Types: []string{"http", "poll"}}, {ID: "b", Types: []string{"http"}}}
	for _, c := range []struct {
		name string
		task *Task
		live []workerInfo
		want string
	}{
		{"no worker", due, nil, "no worker is running on this database"},
		{"none handles it", due, workers, "no running worker handles type mail (they handle http, poll)"},
		{"one handles it", due, append(workers, workerInfo{Types: []string{"mail"}}), ""},
		{"not due yet", &Task{Type: "mail", State: StatePending, AvailableAt: now.Add(time.Minute)}, nil, ""},
		{"running", &Task{Type: "mail", State: StateRunning}, nil, ""},
	} {
		if got := waitingReason(c.task, c.live, now); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
