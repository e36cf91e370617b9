package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/riverqueue/river/rivertype"
)

// The wake: a task that sleeps for quota (a River snooze) is put back
// before its time when the quota it waits for comes back early: another
// process's answer shows more remaining, a pause is lifted, a reading
// raises a learnt limit.
//
// The worker that put a task to sleep remembers, in its memory, when the
// sleep ends and which quota it waits for, when the handler's error can
// name that quota (the rate-limit-aware client's *transport.WaitError:
// QuotaKey, ReadyAt). Once a second per quota at most it asks the
// client's decision, which reserves nothing, when a request could go; when
// that is now, its tasks of that quota become available at once. A task
// woken while its quota is in fact not free (another process took it
// first) decides again as it starts, sends nothing, and sleeps again.
//
// A sleep's end needs no wake: River v0.31.0's scheduler makes a
// scheduled job available one interval (5 s) before its time, and a
// worker fetches it at its scheduled_at. What is remembered is lost with
// the process: its sleeping tasks then sleep to their end, as before.

// quotaWait is a handler error that names the quota it waits for and can
// say when that quota returns, deciding without reserving anything
// (*transport.WaitError).
type quotaWait interface {
	QuotaKey() string
	ReadyAt(ctx context.Context) (time.Time, error)
}

// wakeCheckEvery is how often the quota of sleeping tasks is asked about,
// at most, per quota: a task whose quota comes back is woken within about
// this long.
const wakeCheckEvery = time.Second

// wakeBatch bounds the tasks one statement wakes.
const wakeBatch = 200

// clock is the time the wake reads and waits on (tests inject one).
type clock interface {
	Now() time.Time
	NewTimer(d time.Duration) (c <-chan time.Time, stop func() bool)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// sleeper is a task this worker put to sleep.
type sleeper struct {
	typ   string
	until time.Time // when the sleep ends, on the wake's clock
	// snoozes is River's count of the task's snoozes once this one is
	// written: a later sleep (of another worker) is not this one.
	snoozes int
	key     string // its quota's key; "" for none known
}

// quotaWatch is the quota some sleeping tasks wait for.
type quotaWatch struct {
	ready func(ctx context.Context) (time.Time, error)
	tasks map[int64]struct{}
	next  time.Time // not asked again before
	// failing: the last question failed (and was logged).
	failing bool
}

// waker wakes the tasks one worker put to sleep (see above).
type waker struct {
	clock clock
	// move makes the given tasks available, each only in the sleep
	// given (its snoozes), and returns those it moved.
	move    func(ctx context.Context, sleeps map[int64]int) ([]int64, error)
	log     *slog.Logger
	counted func(typ string)

	mu       sync.Mutex
	sleeping map[int64]sleeper
	quotas   map[string]*quotaWatch
	poke     chan struct{}
}

func newWaker(c clock, move func(context.Context, map[int64]int) ([]int64, error), log *slog.Logger, counted func(typ string)) *waker {
	return &waker{clock: c, move: move, log: log, counted: counted,
		sleeping: map[int64]sleeper{}, quotas: map[string]*quotaWatch{}, poke: make(chan struct{}, 1)}
}

// sleep remembers that task id of type typ sleeps for d from now, its
// River snooze count becoming snoozes, for what herr waits for: only a
// sleep for quota whose error names it (quotaWait; a handler's own
// Reschedule is not one) is remembered.
func (k *waker) sleep(id int64, typ string, d time.Duration, snoozes int, herr error) {
	var re *RescheduleError
	var qw quotaWait
	if d <= 0 || errors.As(herr, &re) || !errors.As(herr, &qw) {
		return
	}
	key := qw.QuotaKey()
	if key == "" {
		return
	}
	now := k.clock.Now()
	k.mu.Lock()
	k.forgetLocked(id)
	k.sleeping[id] = sleeper{typ: typ, until: now.Add(d), snoozes: snoozes, key: key}
	w := k.quotas[key]
	if w == nil {
		w = &quotaWatch{tasks: map[int64]struct{}{}, next: now.Add(wakeCheckEvery)}
		k.quotas[key] = w
	}
	// The latest error asks for all: the same quota, asked the same (but
	// for a language model's units).
	w.ready = qw.ReadyAt
	w.tasks[id] = struct{}{}
	k.mu.Unlock()
	select {
	case k.poke <- struct{}{}:
	default:
	}
}

// forget drops task id (claimed again: it runs).
func (k *waker) forget(id int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.forgetLocked(id)
}

func (k *waker) forgetLocked(id int64) {
	s, ok := k.sleeping[id]
	if !ok {
		return
	}
	delete(k.sleeping, id)
	if w := k.quotas[s.key]; w != nil {
		delete(w.tasks, id)
		if len(w.tasks) == 0 {
			delete(k.quotas, s.key)
		}
	}
}

// run wakes tasks until ctx ends.
func (k *waker) run(ctx context.Context) {
	for {
		next, ok := k.round(ctx)
		var timer <-chan time.Time
		stop := func() bool { return false }
		if ok {
			timer, stop = k.clock.NewTimer(max(next.Sub(k.clock.Now()), 0))
		}
		select {
		case <-ctx.Done():
			stop()
			return
		case <-k.poke:
		case <-timer:
		}
		stop()
	}
}

// round forgets the tasks whose sleep has ended (River runs them) and
// wakes those whose quota, asked if its time to be asked has come, could
// go now; it returns when it has next to do something, if ever.
func (k *waker) round(ctx context.Context) (time.Time, bool) {
	now := k.clock.Now()
	type ask struct {
		key   string
		ready func(context.Context) (time.Time, error)
	}
	var asks []ask
	k.mu.Lock()
	for id, s := range k.sleeping {
		if !s.until.After(now) {
			k.forgetLocked(id)
		}
	}
	for key, w := range k.quotas {
		if !w.next.After(now) {
			w.next = now.Add(wakeCheckEvery)
			asks = append(asks, ask{key, w.ready})
		}
	}
	k.mu.Unlock()

	for _, a := range asks {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		at, err := a.ready(actx)
		cancel()
		if k.failed(a.key, err) {
			if ctx.Err() == nil {
				k.log.Warn("tasks: ask when sleeping tasks' quota returns (said once, until it answers again)", "quota", a.key, "err", err)
			}
		}
		if err != nil {
			continue
		}
		if at.After(k.clock.Now()) {
			continue
		}
		sleeps := map[int64]int{}
		k.mu.Lock()
		if w := k.quotas[a.key]; w != nil {
			for id := range w.tasks {
				sleeps[id] = k.sleeping[id].snoozes
			}
		}
		k.mu.Unlock()
		k.wake(ctx, sleeps)
	}

	k.mu.Lock()
	defer k.mu.Unlock()
	var next time.Time
	for _, s := range k.sleeping {
		if next.IsZero() || s.until.Before(next) {
			next = s.until
		}
	}
	for _, w := range k.quotas {
		if next.IsZero() || w.next.Before(next) {
			next = w.next
		}
	}
	return next, !next.IsZero()
}

// failed records whether asking about quota key failed, and reports
// whether that is news: the first failure since it last answered.
func (k *waker) failed(key string, err error) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	w := k.quotas[key]
	if w == nil {
		return false
	}
	news := err != nil && !w.failing
	w.failing = err != nil
	return news
}

// wake makes sleeps' tasks available and forgets those it moved; the
// others (their sleep not written yet, or over) are asked about again.
func (k *waker) wake(ctx context.Context, sleeps map[int64]int) {
	if len(sleeps) == 0 {
		return
	}
	moved, err := k.move(ctx, sleeps)
	if err != nil && ctx.Err() == nil {
		k.log.Warn("tasks: wake sleeping tasks", "tasks", len(sleeps), "err", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range moved {
		k.counted(k.sleeping[id].typ)
		k.forgetLocked(id)
	}
}

// wakeTasks makes the given tasks available now, each only while it
// sleeps the sleep given by its River snooze count (a scheduled task, or
// an available one not due yet), and returns those it moved. A task due
// already keeps its time, so that it keeps its place in line.
func wakeTasks(ctx context.Context, r runner, postgres bool, sleeps map[int64]int, now time.Time) ([]int64, error) {
	var moved []int64
	ids := make([]int64, 0, len(sleeps))
	for id := range sleeps {
		ids = append(ids, id)
	}
	for len(ids) > 0 {
		n := min(len(ids), wakeBatch)
		batch := ids[:n]
		ids = ids[n:]
		var sb strings.Builder
		var at any = now.UTC()
		snoozes, least := "coalesce((metadata->>'snoozes')::bigint, 0)", "LEAST"
		if !postgres {
			// River's SQLite times are text in this one format, which
			// compares as time.
			at = now.UTC().Round(time.Millisecond).Format("2006-01-02 15:04:05.999")
			snoozes, least = "coalesce(metadata ->> 'snoozes', 0)", "min"
		}
		args := []any{at}
		fmt.Fprintf(&sb, "UPDATE river_job SET state = 'available', scheduled_at = %s(scheduled_at, $1) WHERE (state = 'scheduled' OR state = 'available' AND scheduled_at > $1) AND (", least)
		for i, id := range batch {
			if i > 0 {
				sb.WriteString(" OR ")
			}
			fmt.Fprintf(&sb, "id = $%d AND %s = $%d", len(args)+1, snoozes, len(args)+2)
			args = append(args, id, sleeps[id])
		}
		sb.WriteString(") RETURNING id")
		rows, err := r.query(ctx, sb.String(), args...)
		if err != nil {
			return moved, err
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return moved, err
			}
			moved = append(moved, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// snoozesOf is River's count of a job's snoozes so far.
func snoozesOf(row *rivertype.JobRow) int {
	var m struct {
		Snoozes int `json:"snoozes"`
	}
	_ = json.Unmarshal(row.Metadata, &m)
	return m.Snoozes
}
