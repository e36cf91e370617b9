package tasks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/ratekeeper/ratekeeper/internal/holder"
)

// WorkOptions tune Queue.Work.
type WorkOptions struct {
	// Concurrency is how many tasks of each type run at once (each type has
	// its own River queue, so one type's backlog never starves another).
	// Zero means 10.
	Concurrency int
	// TypeConcurrency sets how many tasks of a type run at once, for the
	// types it names (others run Concurrency). A task "runs" from its
	// claim to its outcome: a process that sends its tasks' requests
	// through one scheduler (package taskbatch) claims more tasks than it
	// sends requests at once, so that a task whose quota cannot go waits
	// holding a claim, not a sender, while a poll task holds its claim
	// for as long as it polls.
	TypeConcurrency map[string]int
	// TypePollInterval sets how often an idle worker looks for tasks of a
	// type, for the types it names (others: Options.FetchPollInterval). On
	// SQLite each look is a query costing about a millisecond of CPU, so
	// a type whose tasks may start a little later (a poll task, which
	// holds its claim for as long as it polls) is better looked for less
	// often than every 20ms. It is at least the type's fetch cooldown.
	TypePollInterval map[string]time.Duration
	// WorkerID names this worker in task histories ("claimed by worker
	// W"). It must be unique among the workers running at the same time on
	// one database. Empty means host-pid-random.
	WorkerID string
	// ShutdownTimeout is how long running tasks may finish once ctx ends;
	// then their contexts are cancelled and the tasks go back to pending
	// (interrupted, counted neither as retries nor as reschedules), and Work
	// waits up to 30s more for the handlers to return. Zero means 10s.
	ShutdownTimeout time.Duration
	// RateLimitedPriority is what a reschedule for a rate limit does to the
	// task's priority. The zero value means RaisePriority.
	RateLimitedPriority PriorityRule
}

// PriorityRule says what a reschedule for a rate limit — an error with
// RetryAt, such as the rate-limit-aware client's or the http type's for a
// refusal — does to the task's priority. Other reschedules (Reschedule)
// keep it.
type PriorityRule string

const (
	// RaisePriority makes the task one better than it was submitted with
	// (never above HighestPriority, however often it is rescheduled), so
	// that once its quota returns it runs before work of its priority that
	// was submitted while it slept.
	RaisePriority PriorityRule = "raise"
	// KeepPriority leaves the priority as submitted: among tasks of equal
	// priority the one available earliest runs first, so work submitted
	// while it slept goes before it.
	KeepPriority PriorityRule = "keep"
)

// ParsePriorityRule returns the rule named s ("raise" or "keep").
func ParsePriorityRule(s string) (PriorityRule, error) {
	switch r := PriorityRule(strings.ToLower(strings.TrimSpace(s))); r {
	case RaisePriority, KeepPriority:
		return r, nil
	}
	return "", fmt.Errorf("%w: priority rule %q: want raise or keep", ErrInvalid, s)
}

// rateLimitedPriority returns the priority a task submitted with base and
// now at current gets when rescheduled for a rate limit under rule, and
// whether that changes it. Pure.
func rateLimitedPriority(rule PriorityRule, base, current int) (int, bool) {
	if rule == KeepPriority {
		return current, false
	}
	want := max(base-1, HighestPriority)
	return want, want < current
}

// Work claims and runs tasks until ctx ends, then shuts down gracefully:
// no new claims, running tasks get ShutdownTimeout to finish. It handles
// the types known when it starts (Types). It returns nil after a clean
// shutdown, or an error if it could not start. A handler's LocalFault
// shuts it down the same way, and the error it returns then holds that
// fault (IsLocalFault).
func (q *Queue) Work(ctx context.Context, wo WorkOptions) error {
	switch {
	case wo.Concurrency == 0:
		wo.Concurrency = 10
	case wo.Concurrency < 0 || wo.Concurrency > ConcurrencyLimit:
		return fmt.Errorf("%w: concurrency %d: use 1 to %d", ErrInvalid, wo.Concurrency, ConcurrencyLimit)
	}
	for typ, n := range wo.TypeConcurrency {
		if n < 1 || n > ConcurrencyLimit {
			return fmt.Errorf("%w: concurrency %d of type %s: use 1 to %d", ErrInvalid, n, typ, ConcurrencyLimit)
		}
	}
	if wo.ShutdownTimeout <= 0 {
		wo.ShutdownTimeout = 10 * time.Second
	}
	if wo.WorkerID == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "worker"
		}
		wo.WorkerID = fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.IntN(1<<16))
	}
	switch wo.RateLimitedPriority {
	case "":
		wo.RateLimitedPriority = RaisePriority
	case RaisePriority, KeepPriority:
	default:
		return fmt.Errorf("%w: rate-limited priority %q: want %s or %s", ErrInvalid, wo.RateLimitedPriority, RaisePriority, KeepPriority)
	}
	return q.b.work(ctx, q, q.handlers(), wo)
}

// taskWorker is the River worker of every task type: it runs the type's
// handler and turns what it returns into River's outcome plus ratekeeper's
// record and history.
type taskWorker[TD riverdriver.Driver[TTx], TTx any] struct {
	river.WorkerDefaults[jobArgs]
	q        *Queue
	b        *riverBackend[TD, TTx]
	handlers map[string]HandlerFunc
	rule     PriorityRule
	// retryAt holds, per job id, the retry time Work decided, for River to
	// read back through NextRetry.
	retryAt sync.Map
	// running holds, per job id, the cancel function of the running
	// handler's context.
	running  sync.Map
	stopping atomic.Bool
	// wind ends when Work begins to stop (its context ended, or a
	// local fault): the handlers' Stopping.
	wind     context.Context
	windDown context.CancelFunc
	// faulted is closed at the first LocalFault, which stops Work; faultErr
	// says what it was.
	faulted   chan struct{}
	faultOnce sync.Once
	faultErr  error
	// wake puts the tasks this worker put to sleep for quota back when
	// their quota returns early (wake.go).
	wake *waker
}

// fault records the first local fault, met by task id, and makes Work stop:
// a machine that cannot keep its database or write its disk would meet it
// again with every task.
func (w *taskWorker[TD, TTx]) fault(id int64, err error) {
	w.stopWith(fmt.Errorf("task %d met a fault on this machine, not in its work, and went back to pending: %w", id, err))
}

// stopWith makes Work stop gracefully and return err (the first one
// given).
func (w *taskWorker[TD, TTx]) stopWith(err error) {
	w.faultOnce.Do(func() {
		w.faultErr = err
		close(w.faulted)
	})
}

// stopped reports whether stopWith was called: Work is stopping.
func (w *taskWorker[TD, TTx]) stopped() bool {
	select {
	case <-w.faulted:
		return true
	default:
		return false
	}
}

// errCancelRequested is the cause of a handler context cancelled because
// its task was cancelled.
var errCancelRequested = errors.New("task cancelled")

// cancelRunning cancels the handler of task id if it runs here.
func (w *taskWorker[TD, TTx]) cancelRunning(_ context.Context, id int64) {
	if cancel, ok := w.running.Load(id); ok {
		cancel.(context.CancelCauseFunc)(errCancelRequested)
	}
}

func (b *riverBackend[TD, TTx]) work(ctx context.Context, q *Queue, handlers map[string]HandlerFunc, wo WorkOptions) error {
	w := &taskWorker[TD, TTx]{q: q, b: b, handlers: handlers, rule: wo.RateLimitedPriority, faulted: make(chan struct{})}
	w.wind, w.windDown = context.WithCancel(context.Background())
	defer w.windDown()
	w.wake = newWaker(q.opts.clock, func(ctx context.Context, sleeps map[int64]int) ([]int64, error) {
		// River's times are this machine's (its snooze is time.Now plus
		// the delay), whatever clock the wake runs on.
		return wakeTasks(ctx, b.pool(), b.postgres, sleeps, time.Now())
	}, q.opts.Logger, func(typ string) { q.metrics.woken.WithLabelValues(typ).Inc() })
	types := slices.Sorted(maps.Keys(handlers))
	client, err := b.newClient(q, w, types, wo)
	if err != nil {
		return fmt.Errorf("tasks: start worker: %w", err)
	}
	stopProjecting := w.startProjecting(client)
	defer stopProjecting()

	// Record this worker before it claims anything, so that a task it
	// finishes never reads as waiting for a worker of its type, and take
	// back first the tasks of workers that are gone.
	self := holder.Self().String()
	leave, err := b.enter(ctx, q, wo.WorkerID, self, types)
	if err != nil {
		return fmt.Errorf("tasks: start worker on %s: %w", q.name, err)
	}
	defer leave()
	// River's client stops hard when the context given to Start ends; the
	// graceful part is ours, so it runs on a context only we cancel.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	if err := client.Start(runCtx); err != nil {
		return fmt.Errorf("tasks: start worker on %s: %w", q.name, err)
	}

	var bg sync.WaitGroup
	bg.Go(func() { w.sweep(runCtx) })
	bg.Go(func() { w.heartbeat(runCtx, wo.WorkerID, self) })
	if !q.opts.noWake {
		bg.Go(func() { w.wake.run(runCtx) })
	}
	if !b.postgres {
		// River in poll-only mode learns of a running job's cancellation
		// only through LISTEN/NOTIFY, which SQLite lacks (v0.31.0 ignores a
		// cancel for a running job even within the process), so the worker
		// cancels its own handlers: at once for Queue.Cancel in this
		// process, within CancelPollInterval for other processes.
		defer q.addLocalCancel(w.cancelRunning)()
		bg.Go(func() { w.watchCancels(runCtx, wo.WorkerID, q.opts.CancelPollInterval) })
	}

	select {
	case <-ctx.Done():
	case <-w.faulted:
	}
	// Handlers only waiting (for quota, say) may give their tasks back
	// now (Stopping), while those at work get ShutdownTimeout.
	w.windDown()
	err = w.stopClient(client, wo.ShutdownTimeout)
	stopRun()
	bg.Wait()
	return w.stopError(wo.WorkerID, err)
}

// newClient makes River's client working the given task types, each on
// its own queue with wo.Concurrency workers (or the type's
// TypeConcurrency).
func (b *riverBackend[TD, TTx]) newClient(q *Queue, w *taskWorker[TD, TTx], types []string, wo WorkOptions) (*river.Client[TTx], error) {
	workers := river.NewWorkers()
	for _, typ := range types {
		river.AddWorkerArgs(workers, jobArgs{kind: typ}, river.Worker[jobArgs](w)) // types are distinct map keys: no duplicate panic
	}
	queues := q.opts.queueConfigs(types, wo)
	retention := q.opts.Retention
	if retention <= 0 {
		retention = -1 // River: never delete
	}
	driver := withOutageCompletions[TTx](b.driver, b.outage, q.opts.completerFaults)
	return river.NewClient[TTx](driver, &river.Config{
		ID:     wo.WorkerID,
		Logger: q.opts.Logger,
		Queues: queues,
		// Throughput settings: see Options.FetchCooldown and
		// FetchPollInterval for why they differ from River's defaults.
		FetchCooldown:     q.opts.FetchCooldown,
		FetchPollInterval: q.opts.FetchPollInterval,
		// Each task carries its own timeout (taskWorker.Timeout); -1 means
		// no client-wide one on top.
		JobTimeout:                  -1,
		RescueStuckJobsAfter:        q.opts.RescueStuckAfter,
		CompletedJobRetentionPeriod: retention,
		CancelledJobRetentionPeriod: retention,
		DiscardedJobRetentionPeriod: retention,
		PollOnly:                    !b.postgres,
		Workers:                     workers,
	})
}

// queueConfigs is River's configuration of each type's queue: its
// workers (wo.Concurrency or the type's TypeConcurrency), its fetch
// cooldown (fetchCooldown) and, for a type given one, its poll interval.
func (o Options) queueConfigs(types []string, wo WorkOptions) map[string]river.QueueConfig {
	queues := make(map[string]river.QueueConfig, len(types))
	for _, typ := range types {
		n := cmp.Or(wo.TypeConcurrency[typ], wo.Concurrency)
		qc := river.QueueConfig{MaxWorkers: n, FetchCooldown: o.fetchCooldown(n)}
		if d := wo.TypePollInterval[typ]; d > 0 {
			qc.FetchPollInterval = max(d, qc.FetchCooldown)
		}
		queues[queueFor(typ)] = qc
	}
	return queues
}

// startProjecting subscribes to the client's events of finished attempts
// and projects them into task histories; the returned func stops it once
// every event River sent is projected.
func (w *taskWorker[TD, TTx]) startProjecting(client *river.Client[TTx]) (stop func()) {
	finished, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobSnoozed,
			river.EventKindJobFailed, river.EventKindJobCancelled},
		// Events beyond the buffer are dropped by River; their history
		// then waits for the next claim or sweep, so make that rare.
		ChanSize: 20_000,
	})
	var projector sync.WaitGroup
	projector.Go(func() { w.project(finished) })
	return func() {
		unsubscribe() // closes finished once River has stopped sending
		projector.Wait()
	}
}

// stopClient stops River's client, letting running handlers finish within
// timeout.
func (w *taskWorker[TD, TTx]) stopClient(client *river.Client[TTx], timeout time.Duration) error {
	stopCtx, cancelStop := context.WithTimeout(context.Background(), timeout)
	err := client.Stop(stopCtx)
	cancelStop()
	if err != nil {
		// Time is up: cancel the handlers still running; their tasks go
		// back to pending as interrupted.
		w.stopping.Store(true)
		hardCtx, cancelHard := context.WithTimeout(context.Background(), hardStopTimeout)
		err = client.StopAndCancel(hardCtx)
		cancelHard()
	}
	return err
}

// stopError is what Work returns once stopped: the local fault that made
// it stop, if any, joined with stopErr, the client's failure to stop.
func (w *taskWorker[TD, TTx]) stopError(workerID string, stopErr error) error {
	var err error
	if stopErr != nil {
		err = fmt.Errorf("tasks: worker %s did not stop cleanly: %w", workerID, stopErr)
	}
	select {
	case <-w.faulted:
		return errors.Join(fmt.Errorf("tasks: worker %s stopped: %w", workerID, w.faultErr), err)
	default:
	}
	return err
}

// hardStopTimeout is how long Work waits, after cancelling the handlers
// still running at the end of ShutdownTimeout, for them to return and for
// River to record their tasks as interrupted.
const hardStopTimeout = 30 * time.Second

// Timeout is the task's own attempt timeout.
func (w *taskWorker[TD, TTx]) Timeout(job *river.Job[jobArgs]) time.Duration {
	meta, _, err := decodeMeta(job.JobRow)
	if err != nil {
		return DefaultTimeout
	}
	return timeoutFromMillis(meta.Ratekeeper.TimeoutMillis) // NoTimeout is River's -1
}

// NextRetry returns the retry time Work decided for the attempt that just
// failed; for an attempt River's rescuer gave up on, the backoff of the next
// retry.
func (w *taskWorker[TD, TTx]) NextRetry(job *river.Job[jobArgs]) time.Time {
	if at, ok := w.retryAt.LoadAndDelete(job.ID); ok {
		return at.(time.Time)
	}
	_, rec, _ := decodeMeta(job.JobRow)
	return time.Now().Add(w.q.opts.Backoff(rec.Retries + 1))
}

// Work runs one attempt of a task.
func (w *taskWorker[TD, TTx]) Work(ctx context.Context, job *river.Job[jobArgs]) error {
	row := job.JobRow
	claimedAt := time.Now()
	if row.AttemptedAt != nil {
		claimedAt = *row.AttemptedAt
	}
	t, rec, err := taskFromRow(row)
	if err != nil {
		// Nothing can run a task whose row cannot be read: fail it and say
		// why, rather than retry forever.
		_ = river.RecordOutput(ctx, record{Failed: true, UpdatedAt: time.Now(), Outbox: []Event{}})
		return river.JobCancel(err)
	}
	meta, _, _ := decodeMeta(row)
	w.wake.forget(t.ID)

	// Events of earlier attempts still on the row go to the history table
	// now, so that the outbox stays small across long reschedule chains. If
	// that fails they stay in the outbox and are written later.
	var outbox []Event
	if len(rec.Outbox) > 0 {
		if err := w.b.inTx(ctx, func(_ TTx, r runner) error { return insertEvents(ctx, r, rec.Outbox) }); err != nil {
			outbox = rec.Outbox
		}
	}
	outbox = append(outbox, claimEvents(row, t, &rec, claimedAt)...)
	t.RetryCount = rec.Retries
	t.State = StateRunning

	facts := attemptFacts{Attempt: t.Attempt, RiverAttempt: row.Attempt, MaxAttempts: row.MaxAttempts,
		Reschedules: t.RescheduleCount, MaxReschedules: t.MaxReschedules, Retries: rec.Retries, Timeout: t.Timeout,
		ClaimedAt: claimedAt, Priority: row.Priority, BasePriority: cmp.Or(meta.Ratekeeper.Priority, row.Priority)}

	var (
		result json.RawMessage
		herr   error
		end    ending
	)
	if meta.CancelAttemptedAt != nil {
		// Cancelled while it waited with a reschedule River does not check
		// for cancellation (one made available at once).
		herr, end.cancelled = errors.New("cancelled"), true
	} else if w.stopped() {
		// Claimed once a local fault (or a lost heartbeat) has made Work
		// stop: River may fetch the task that met the fault again before
		// its producers stop. It does not run here, to meet the fault
		// again: back to pending untouched, counted unsent, its history
		// naming the fault. (Checked before the stopping below, which
		// the fault also brings about once Work winds down: a claim
		// then was named a shutdown, and the task's last event no
		// longer said why the worker stopped.)
		herr, end.unsent = LocalFault(w.faultErr), true
	} else if w.stopping.Load() || w.wind.Err() != nil {
		// Claimed while the worker stops: River may fetch a task one of
		// its handlers just gave back (ErrStopping, or cancelled at the
		// hard stop) before its producers stop. It does not run here:
		// back to pending, for the next worker, counted unsent — it
		// never ran, so a send_once task is not taken for one that may
		// have reached the server.
		herr, end.stopping, end.unsent = context.Canceled, true, true
	} else {
		hctx, cancel := context.WithCancelCause(ctx)
		w.running.Store(t.ID, cancel)
		start := time.Now()
		result, herr = runHandler(context.WithValue(hctx, stoppingKey{}, w.wind), w.handlers[t.Type], t)
		w.q.metrics.duration.WithLabelValues(t.Type).Observe(time.Since(start).Seconds())
		w.running.Delete(t.ID)
		if hctx.Err() != nil {
			cause := context.Cause(hctx)
			end.cancelled = errors.Is(cause, rivertype.ErrJobCancelledRemotely) || errors.Is(cause, errCancelRequested)
			end.timedOut = errors.Is(hctx.Err(), context.DeadlineExceeded)
			end.stopping = w.stopping.Load()
		}
		if errors.Is(herr, ErrStopping) && w.wind.Err() != nil {
			// Given back before its work began: back to pending.
			end.stopping, end.unsent = true, true
		}
		cancel(nil)
		if herr == nil && len(result) > 0 && !json.Valid(result) {
			herr = fmt.Errorf("handler of type %s returned a result that is not JSON", t.Type)
		}
	}
	err = w.finish(ctx, t, rec, facts, outbox, result, herr, end)
	var snooze *rivertype.JobSnoozeError
	if errors.As(err, &snooze) {
		w.wake.sleep(t.ID, t.Type, snooze.Duration, snoozesOf(row)+1, herr)
	}
	return err
}

// finish records the attempt's outcome and tells River what to do. The
// record, with this attempt's events in its outbox, goes into River's
// recorded output, which River writes in the same UPDATE that changes the
// job's state; the projector copies the events into the history table
// once that UPDATE is done.
func (w *taskWorker[TD, TTx]) finish(ctx context.Context, t *Task, rec record, facts attemptFacts, outbox []Event, result json.RawMessage, herr error, end ending) error {
	// An attempt never ends before it began, whatever the clocks of the
	// database and this machine say.
	now := time.Now()
	if now.Before(facts.ClaimedAt) {
		now = facts.ClaimedAt
	}
	o := decide(facts, herr, end, now, w.q.opts.Backoff)
	ev := rec.apply(t.ID, facts, o, t.Worker, now)
	rec.Outbox = append(slices.Clone(outbox), ev)
	if o.kind == EventCompleted && len(result) > 0 {
		rec.Result = result
	}
	if err := river.RecordOutput(ctx, rec); err != nil {
		if o.kind == EventCompleted {
			// River refuses outputs over 32 MB: the result cannot be kept,
			// which fails the attempt.
			rec.Result = nil
			return w.finish(ctx, t, rec, facts, outbox, nil, Permanent(fmt.Errorf("result too large to store: %w", err)), ending{})
		}
		rec.Outbox = []Event{ev}
		_ = river.RecordOutput(ctx, rec)
	}
	switch o.kind {
	case EventCompleted:
		w.count(t.Type, outcomeCompleted, o)
		return nil
	case EventRescheduled:
		w.count(t.Type, outcomeRescheduled, o)
		if o.rateLimited {
			w.raise(ctx, t.ID, facts)
		}
		return river.JobSnooze(o.delay)
	case EventInterrupted:
		w.count(t.Type, outcomeInterrupted, o)
		if o.local {
			w.fault(t.ID, o.err)
		}
		return river.JobSnooze(0)
	case EventRetried:
		w.count(t.Type, outcomeRetried, o)
		w.retryAt.Store(t.ID, now.Add(o.delay))
		return o.err
	case EventCancelled:
		w.count(t.Type, outcomeCancelled, o)
		return river.JobCancel(o.err)
	default: // EventFailed
		w.count(t.Type, outcomeFailed, o)
		if o.early {
			// River has no "fail now" for a job with attempts left; it
			// cancels, and the record says failed.
			return river.JobCancel(o.err)
		}
		return o.err
	}
}

// raise applies the rate-limited priority rule to task id before River
// makes it pending again. River's snooze keeps a job's priority and has no
// way to change it, so this one column of the running row (which River's
// completer does not write) is set here. A failure only costs the task its
// place in line, so it is logged, not fatal.
func (w *taskWorker[TD, TTx]) raise(ctx context.Context, id int64, f attemptFacts) {
	p, change := rateLimitedPriority(w.rule, f.BasePriority, f.Priority)
	if !change {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := w.b.pool().exec(ctx, "UPDATE river_job SET priority = $1 WHERE id = $2 AND state = 'running'", p, id); err != nil {
		w.q.opts.Logger.Warn("tasks: raise the priority of a rate-limited task", "task", id, "err", err)
	}
}

func (w *taskWorker[TD, TTx]) count(typ, outcome string, o outcome) {
	w.q.metrics.outcomes.WithLabelValues(typ, outcome).Inc()
	if o.kind == EventRescheduled {
		w.q.metrics.rescheduled.WithLabelValues(typ).Inc()
		w.q.metrics.delay.WithLabelValues(typ).Observe(o.delay.Seconds())
	}
}

// runHandler calls h, turning a panic into an error.
func runHandler(ctx context.Context, h HandlerFunc, t *Task) (result json.RawMessage, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("handler of type %s panicked: %v\n%s", t.Type, v, debug.Stack())
		}
	}()
	if h == nil {
		return nil, Permanent(fmt.Errorf("%w %q: this worker has no handler for it", ErrUnknownType, t.Type))
	}
	return h(context.WithValue(ctx, runningKey{}, t), t)
}

type runningKey struct{}

// stoppingKey holds, in a handler's context, its worker's wind (Stopping).
type stoppingKey struct{}

// Stopping returns a context that ends when the worker running the task
// under ctx begins to stop (Work's context ended, or a local fault), or nil
// outside a task. A handler that has not begun its work when it ends — it
// only waits, for quota say — may give its task back untouched by returning
// an error wrapping ErrStopping: the task goes back to pending at once, as
// interrupted (no retry, no reschedule counted), instead of holding the
// worker for up to ShutdownTimeout. Work already under way goes on: the
// handler's own context ends only at ShutdownTimeout.
func Stopping(ctx context.Context) context.Context {
	c, _ := ctx.Value(stoppingKey{}).(context.Context)
	return c
}

// ErrStopping is what a handler wraps to give its task back while its
// worker stops (see Stopping). Returned while the worker is not stopping,
// it is an error like any other.
var ErrStopping = errors.New("tasks: the worker is stopping")

// Running returns the task whose handler runs under ctx (the context of a
// request its handler sends, for example), or nil. A client that
// schedules requests — fetch's — orders them by the task's priority and
// age with it. The task must not be changed.
func Running(ctx context.Context) *Task {
	t, _ := ctx.Value(runningKey{}).(*Task)
	return t
}

// claimEvents returns the events of the claim of t's latest attempt, read
// from its row: the attempts between the last one with a recorded outcome
// and this claim, whose worker vanished (River counted them against
// MaxRetries, and so does rec), then the claim itself. Pure.
func claimEvents(row *rivertype.JobRow, t *Task, rec *record, claimedAt time.Time) []Event {
	var evs []Event
	for n := rec.Claims + 1; n < t.Attempt; n++ {
		rec.Retries++
		evs = append(evs, Event{TaskID: t.ID, At: claimedAt, Kind: EventAbandoned, Attempt: n,
			Worker:          attemptedBy(row, t.Attempt-n),
			Message:         "the worker stopped without reporting an outcome; River's rescuer put the task back",
			RescheduleCount: t.RescheduleCount, RetryCount: rec.Retries, Key: fmt.Sprintf("end-%d", n)})
	}
	return append(evs, Event{TaskID: t.ID, At: claimedAt, Kind: EventClaimed, Attempt: t.Attempt, Worker: t.Worker,
		RescheduleCount: t.RescheduleCount, RetryCount: rec.Retries, Key: fmt.Sprintf("claim-%d", t.Attempt)})
}

// attemptedBy returns the worker of the attempt back attempts before the
// latest (0 is the latest), if River still lists it.
func attemptedBy(row *rivertype.JobRow, back int) string {
	i := len(row.AttemptedBy) - 1 - back
	if i < 0 || i >= len(row.AttemptedBy) {
		return ""
	}
	return row.AttemptedBy[i]
}

// project copies the events River's completer just wrote into job rows
// (the outbox of each record) into the history table, batching many
// tasks into one insert. It returns once events is closed and drained.
func (w *taskWorker[TD, TTx]) project(events <-chan *river.Event) {
	const batch = 1000
	var pending []Event
	flush := func() {
		if len(pending) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.b.inTx(ctx, func(_ TTx, r runner) error { return insertEvents(ctx, r, pending) }); err != nil {
			// The events stay on the rows; the sweep copies them later.
			w.q.opts.Logger.Warn("tasks: copy task history", "events", len(pending), "err", err)
		}
		pending = pending[:0]
	}
	tick := time.NewTicker(projectInterval)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				flush()
				return
			}
			if ev.Job == nil || !ours(ev.Job) {
				continue
			}
			if _, rec, err := decodeMeta(ev.Job); err == nil {
				pending = append(pending, rec.Outbox...)
			}
			if len(pending) >= batch {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

// projectInterval bounds how long a finished attempt's events wait on the
// job row before the history table has them too.
const projectInterval = 100 * time.Millisecond

// sweepInterval is how often a worker looks for finished tasks whose events
// never reached the history table (a worker died between River's update
// and the projector's insert).
const sweepInterval = 5 * time.Minute

// sweep copies such events, at start and every sweepInterval.
func (w *taskWorker[TD, TTx]) sweep(ctx context.Context) {
	for {
		w.sweepOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(sweepInterval):
		}
	}
}

func (w *taskWorker[TD, TTx]) sweepOnce(ctx context.Context) {
	// A finished task's last event is "end-<claims>"; if the table lacks
	// it, the row's outbox was never copied.
	pred := `coalesce(json_array_length(metadata, '$.output.outbox'), 0) > 0 AND NOT EXISTS (
		SELECT 1 FROM ratekeeper_task_events e
		WHERE e.task_id = river_job.id AND e.event_key = 'end-' || json_extract(river_job.metadata, '$.output.claims'))`
	if w.b.postgres {
		pred = `jsonb_array_length(coalesce(metadata->'output'->'outbox', '[]'::jsonb)) > 0 AND NOT EXISTS (
		SELECT 1 FROM ratekeeper_task_events e
		WHERE e.task_id = river_job.id AND e.event_key = 'end-' || (river_job.metadata->'output'->>'claims'))`
	}
	var after int64
	for ctx.Err() == nil {
		p := river.NewJobListParams().Where(oursSQL).
			States(rivertype.JobStateCompleted, rivertype.JobStateCancelled, rivertype.JobStateDiscarded).
			OrderBy(river.JobListOrderByID, river.SortOrderAsc).First(500).
			Where(pred).Where("id > @after_id", river.NamedArgs{"after_id": after})
		res, err := w.b.client.JobList(ctx, p)
		if err != nil {
			if ctx.Err() == nil {
				w.q.opts.Logger.Warn("tasks: look for uncopied task history", "err", err)
			}
			return
		}
		var evs []Event
		for _, row := range res.Jobs {
			if _, rec, err := decodeMeta(row); err == nil {
				evs = append(evs, rec.Outbox...)
			}
			after = row.ID
		}
		if err := w.b.inTx(ctx, func(_ TTx, r runner) error { return insertEvents(ctx, r, evs) }); err != nil {
			if ctx.Err() == nil {
				w.q.opts.Logger.Warn("tasks: copy task history", "err", err)
			}
			return
		}
		if len(res.Jobs) < 500 {
			return
		}
	}
}

// watchCancels finds tasks this SQLite worker runs that another process
// cancelled, and cancels their handlers.
func (w *taskWorker[TD, TTx]) watchCancels(ctx context.Context, workerID string, every time.Duration) {
	eachTick(ctx, every, func() bool {
		p := river.NewJobListParams().Where(oursSQL).States(rivertype.JobStateRunning).First(1000).
			Where("metadata ->> '$.cancel_attempted_at' IS NOT NULL")
		res, err := w.b.client.JobList(ctx, p)
		if err != nil {
			if ctx.Err() == nil {
				w.q.opts.Logger.Warn("tasks: look for cancelled tasks", "err", err)
			}
			return true
		}
		for _, row := range res.Jobs {
			if attemptedBy(row, 0) == workerID {
				w.cancelRunning(ctx, row.ID)
			}
		}
		return true
	})
}

// heartbeat renews this worker's heartbeat every HeartbeatInterval and
// takes back the tasks of workers that have gone since, until ctx ends.
// A worker whose row another process removed was judged gone (its
// heartbeat went unrenewed too long) and its tasks are being run
// elsewhere: it stops.
func (w *taskWorker[TD, TTx]) heartbeat(ctx context.Context, id, self string) {
	eachTick(ctx, w.q.opts.heartbeatEvery, func() bool {
		var found bool
		err := w.b.waitOut(ctx, func(ctx context.Context) (err error) {
			found, err = renewHeartbeat(ctx, w.b.pool(), w.b.postgres, id, self)
			return err
		})
		switch {
		case err != nil:
			if ctx.Err() == nil {
				w.q.opts.Logger.Warn("tasks: renew this worker's heartbeat", "err", err)
			}
			return true
		case !found:
			w.stopWith(fmt.Errorf("its heartbeat went unrenewed for over %s, so another worker took it for gone and took back its tasks; it stops so that none runs twice", HeartbeatTimeout))
			return false
		}
		if _, err := w.b.takeBack(ctx, w.q, self); err != nil && ctx.Err() == nil {
			w.q.opts.Logger.Warn("tasks: take back the tasks of workers that are gone", "err", err)
		}
		return true
	})
}

// eachTick calls do every d, until ctx ends or do returns false.
func eachTick(ctx context.Context, d time.Duration, do func() (more bool)) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !do() {
			return
		}
	}
}

// waitingReason says why pending task t, available by now, has not
// started, judging by the workers running (live): "" when one of them
// handles its type. Pure.
func waitingReason(t *Task, live []workerInfo, now time.Time) string {
	if t.State != StatePending || t.AvailableAt.After(now) {
		return ""
	}
	if len(live) == 0 {
		return "no worker is running on this database"
	}
	var handled []string
	for _, w := range live {
		if slices.Contains(w.Types, t.Type) {
			return ""
		}
		for _, typ := range w.Types {
			if !slices.Contains(handled, typ) {
				handled = append(handled, typ)
			}
		}
	}
	slices.Sort(handled)
	return fmt.Sprintf("no running worker handles type %s (they handle %s)", t.Type, strings.Join(handled, ", "))
}
