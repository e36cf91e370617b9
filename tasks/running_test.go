package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// A handler's context names the task it runs, for a client that orders
// its requests by the task (fetch's scheduler); other contexts name none.
func TestRunningNamesTheTask(t *testing.T) {
	if Running(context.Background()) != nil {
		t.Fatal("Running of a plain context is not nil")
	}
	q := openQueue(t, sqliteDSN(t), withHandlers(map[string]HandlerFunc{"t.who": func(ctx context.Context, task *Task) (json.RawMessage, error) {
		r := Running(ctx)
		if r == nil {
			return nil, Permanent(fmt.Errorf("no running task in the handler's context"))
		}
		return json.Marshal(map[string]int64{"id": r.ID, "priority": int64(r.Priority)})
	}}))
	id := mustSubmit(t, q, "t.who", `{}`, SubmitOptions{Priority: 3})
	startWorker(t, q, WorkOptions{})
	done := mustAwait(t, q, id)
	if want := fmt.Sprintf(`{"id":%d,"priority":3}`, id); done.State != StateCompleted || string(done.Result) != want {
		t.Fatalf("task %s %s, want completed with %s", done.State, done.Result, want)
	}
}

// A queue of many workers, freed a few at a time, claims several tasks per
// fetch: its cooldown grows with its workers (250µs each, 4,000 tasks/s),
// from 2ms up to the poll interval; a cooldown set by hand stays as set.
func TestFetchCooldownGrowsWithTheQueuesWorkers(t *testing.T) {
	sqlite, pg := Options{}.withDefaults(false), Options{}.withDefaults(true)
	set := Options{FetchCooldown: time.Millisecond}.withDefaults(false)
	for _, c := range []struct {
		name    string
		o       Options
		workers int
		want    time.Duration
	}{
		{"sqlite, 1 worker", sqlite, 1, 2 * time.Millisecond},
		{"sqlite, 8 workers", sqlite, 8, 2 * time.Millisecond},
		{"sqlite, 64 workers", sqlite, 64, 16 * time.Millisecond},
		{"sqlite, 200 workers", sqlite, 200, 20 * time.Millisecond},
		{"postgres, 64 workers", pg, 64, 16 * time.Millisecond},
		{"postgres, 200 workers", pg, 200, 50 * time.Millisecond},
		{"set by hand, 64 workers", set, 64, time.Millisecond},
	} {
		if got := c.o.fetchCooldown(c.workers); got != c.want {
			t.Errorf("%s: cooldown %v, want %v", c.name, got, c.want)
		}
	}
}

// Each type's queue gets its workers, its cooldown and, when WorkOptions
// names one, its own poll interval (never under its cooldown); other
// queues poll at Options.FetchPollInterval (River's client-wide value).
func TestQueueConfigs(t *testing.T) {
	o := Options{}.withDefaults(false)
	got := o.queueConfigs([]string{HTTPType, "poll", "t.fast"}, WorkOptions{Concurrency: 8,
		TypeConcurrency:  map[string]int{HTTPType: 64},
		TypePollInterval: map[string]time.Duration{"poll": 250 * time.Millisecond, "t.fast": time.Millisecond}})
	for typ, want := range map[string]struct {
		workers        int
		cooldown, poll time.Duration
	}{
		HTTPType: {64, 16 * time.Millisecond, 0},
		"poll":   {8, 2 * time.Millisecond, 250 * time.Millisecond},
		"t.fast": {8, 2 * time.Millisecond, 2 * time.Millisecond},
	} {
		qc, ok := got[queueFor(typ)]
		if !ok {
			t.Errorf("no queue for type %s in %v", typ, got)
			continue
		}
		if qc.MaxWorkers != want.workers || qc.FetchCooldown != want.cooldown || qc.FetchPollInterval != want.poll {
			t.Errorf("type %s: %d workers, cooldown %v, poll %v; want %d, %v, %v", typ,
				qc.MaxWorkers, qc.FetchCooldown, qc.FetchPollInterval, want.workers, want.cooldown, want.poll)
		}
	}
}
