package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/sqlite"
)

// Options configure a Queue. The zero value is ready to use.
type Options struct {
	// HTTPClient sends the requests of the built-in http type. Nil means
	// http.DefaultClient; pass ratekeeper's rate-limit-aware client (see the
	// package documentation) to pace requests with the tokens and quota
	// state every ratekeeper process shares, and to turn long waits into
	// reschedules.
	HTTPClient *http.Client
	// BodyDir receives the bodies of http results larger than
	// InlineBodyLimit, named by their SHA-256. Empty means
	// "ratekeeper-bodies" in the current directory.
	BodyDir string
	// InlineBodyLimit is the largest body (valid UTF-8) an http result
	// carries inline. Zero means 64 KiB.
	InlineBodyLimit int64
	// FailOnStatus, when set, fails an http task whose final answer has a
	// status it accepts (a 404, say), instead of completing it with that
	// answer as its result. Rate-limit refusals are rescheduled and 5xx
	// answers retried before it is asked.
	FailOnStatus func(status int) bool
	// WireMarked says that HTTPClient sends its requests to the network
	// through WireTransport (as `ratekeeper fetch` and `ratekeeper tasks
	// worker` build it), so that its errors tell where they arose: one
	// marked by WireTransport is a failure of the network or the server, a
	// failed attempt retried with backoff and, once retries run out, the
	// task's outcome; any other (the client's quota state database failing,
	// say) arose on this machine and is a LocalFault, which no task records
	// as its outcome. False counts every error of HTTPClient as the
	// network's. Writing a body file fails locally either way.
	WireMarked bool

	// Handlers adds handlers for this Queue only; they win over those
	// registered with Handle and over built-in types.
	Handlers map[string]HandlerFunc

	// Registerer receives the Queue's Prometheus metrics. Nil means a
	// private registry (see Queue.Registry).
	Registerer prometheus.Registerer
	// Logger receives River's and the worker's logs. Nil means warnings and
	// errors on stderr.
	Logger *slog.Logger

	// Backoff is the wait before retry number retry (1, 2, ...) after a
	// failed attempt. Nil means DefaultBackoff.
	Backoff func(retry int) time.Duration

	// FetchPollInterval is how often an idle worker looks for tasks that
	// became available. PostgreSQL also wakes workers at once on insert
	// (LISTEN/NOTIFY); SQLite can only poll, so its default is short: a
	// task rescheduled with delay 0 is claimed again within about this
	// long. Zero means 20ms on SQLite and 200ms on PostgreSQL.
	FetchPollInterval time.Duration
	// FetchCooldown is the least time between two fetches of a worker's
	// queue; it caps the queue's throughput at its workers per cooldown.
	// Zero means 250µs per worker of the queue, at least 2ms (River's
	// 100ms default would cap a 10-worker SQLite queue at 100 tasks/s):
	// 4,000 tasks/s, while a queue of many workers, freed a few at a time,
	// claims several per fetch rather than one, each fetch a query costing
	// about a millisecond of CPU on SQLite.
	FetchCooldown time.Duration
	// cooldownPerWorker is set when FetchCooldown is the default.
	cooldownPerWorker bool
	// CancelPollInterval is how often a SQLite worker checks whether a task
	// it runs was cancelled by another process (PostgreSQL is told at
	// once). Zero means 1s.
	CancelPollInterval time.Duration
	// RescueStuckAfter is how long after a claim River's rescuer may put a
	// task that is still running back to pending, as a failed attempt;
	// tasks with a longer Timeout wait for it, and tasks without one are
	// rescued even if their worker still runs them. Workers that are gone
	// have their tasks taken back long before (see HeartbeatTimeout): the
	// rescuer is left with those of workers that recorded no row. Zero
	// means DefaultRescueAfter.
	RescueStuckAfter time.Duration
	// heartbeatEvery replaces HeartbeatInterval (tests).
	heartbeatEvery time.Duration

	// Retention is how long finished tasks are kept. Zero keeps them
	// forever, which submissions with a UniqueKey rely on to not redo
	// completed work.
	Retention time.Duration

	// DBOutageTimeout is how long the database may be away (restarting,
	// its connections lost, SQLite's write lock held by another process)
	// before a call of the Queue on it gives up: meanwhile Submit, Get,
	// List, Cancel, the worker's own records and heartbeat, and the
	// writes of finished tasks' outcomes (completer.go) wait for it to
	// come back, trying again with backoff and jitter (0:
	// store.DefaultOutageTimeout, 2m; negative: no wait). River's own
	// producer and notifier reconnect by themselves.
	DBOutageTimeout time.Duration
	// outageNow and outageAfter replace the outage's clock and timers,
	// and faults wraps the backend below the outage's wait (tests).
	outageNow   func() time.Time
	outageAfter func(time.Duration) <-chan time.Time
	faults      func(backend) backend
	// completerFaults wraps the executor of River's completer below the
	// outage's wait (tests).
	completerFaults func(riverdriver.Executor) riverdriver.Executor
	// clock is the wake's clock (wake.go): nil means the system's.
	clock clock
	// noWake leaves sleeping tasks to River alone, as before the wake
	// (a benchmark's baseline).
	noWake bool
}

// DefaultRescueAfter is Options.RescueStuckAfter's default: above the
// default attempt timeout (DefaultTimeout) and a durable poll's, with room
// for an attempt that timed out to record its outcome, and minutes rather
// than River's hour.
const DefaultRescueAfter = 15 * time.Minute

func (o Options) withDefaults(postgres bool) Options {
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	if o.BodyDir == "" {
		o.BodyDir = "ratekeeper-bodies"
	}
	if o.InlineBodyLimit <= 0 {
		o.InlineBodyLimit = 64 << 10
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.Backoff == nil {
		o.Backoff = DefaultBackoff
	}
	if o.FetchPollInterval <= 0 {
		o.FetchPollInterval = 200 * time.Millisecond
		if !postgres {
			o.FetchPollInterval = 20 * time.Millisecond
		}
	}
	if o.FetchCooldown <= 0 {
		o.FetchCooldown, o.cooldownPerWorker = 2*time.Millisecond, true
	}
	o.FetchCooldown = min(o.FetchCooldown, o.FetchPollInterval)
	if o.CancelPollInterval <= 0 {
		o.CancelPollInterval = time.Second
	}
	if o.RescueStuckAfter <= 0 {
		o.RescueStuckAfter = DefaultRescueAfter
	}
	if o.clock == nil {
		o.clock = systemClock{}
	}
	if o.heartbeatEvery <= 0 {
		o.heartbeatEvery = HeartbeatInterval
	}
	return o
}

// fetchCooldown is the FetchCooldown of a queue with the given number of
// workers.
func (o Options) fetchCooldown(workers int) time.Duration {
	if !o.cooldownPerWorker {
		return o.FetchCooldown
	}
	return min(max(o.FetchCooldown, time.Duration(workers)*fetchCooldownPerWorker), o.FetchPollInterval)
}

// fetchCooldownPerWorker is the default FetchCooldown per worker of a
// queue.
const fetchCooldownPerWorker = 250 * time.Microsecond

// Queue is a durable task queue in one database. It is safe for concurrent
// use.
type Queue struct {
	name    string // the database, printable (password masked)
	opts    Options
	b       backend
	metrics *metrics

	mu sync.Mutex
	// localCancel pokes the worker sessions of this process running on
	// SQLite, which have no LISTEN/NOTIFY to learn about cancellations.
	localCancel map[int]func(ctx context.Context, id int64)
	nextLocal   int
	closed      bool
}

// backend is the database side of a Queue, one implementation per River
// driver (generic over the driver's transaction type).
type backend interface {
	migrate(ctx context.Context) (MigrateResult, error)
	insert(ctx context.Context, specs []insertSpec, created func(rows []*rivertype.JobRow, dup []bool) []Event) ([]Submitted, error)
	get(ctx context.Context, id int64) (*rivertype.JobRow, error)
	getMany(ctx context.Context, ids []int64) ([]*rivertype.JobRow, error)
	list(ctx context.Context, f Filter, limit int) ([]*rivertype.JobRow, error)
	cancel(ctx context.Context, id int64, now time.Time, events func(before, after *rivertype.JobRow) []Event) (before, after *rivertype.JobRow, err error)
	events(ctx context.Context, id int64) ([]Event, error)
	workers(ctx context.Context) (rows []workerInfo, nowUS int64, err error)
	reclaim(ctx context.Context, judged func(worker string) (workerVerdict, bool), now time.Time) ([]int64, error)
	work(ctx context.Context, q *Queue, handlers map[string]HandlerFunc, wo WorkOptions) error
	close()
}

// insertSpec is one River insert.
type insertSpec struct {
	args jobArgs
	opts *river.InsertOpts
}

// MigrateResult lists the schema versions a migration applied.
type MigrateResult struct {
	River []int // River's own (river_* tables)
	Tasks []int // ratekeeper's task tables (ratekeeper_task_*)
}

// Open opens the task database named by dsn and brings its schema up to
// date (River's tables and ratekeeper's). A dsn starting with postgres://
// or postgresql:// is a PostgreSQL database; anything else is a SQLite file
// path, created if missing.
func Open(ctx context.Context, dsn string, opts Options) (*Queue, error) {
	postgres := store.KindOf(dsn) == store.Postgres
	opts = opts.withDefaults(postgres)
	b, err := openBackend(ctx, dsn, opts)
	if err != nil {
		return nil, err
	}
	if _, err := b.migrate(ctx); err != nil {
		b.close()
		return nil, fmt.Errorf("migrate task database %s: %w", store.Redact(dsn), err)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		b.close()
		return nil, fmt.Errorf("tasks: register metrics: %w", err)
	}
	return &Queue{name: store.Redact(dsn), opts: opts, b: b, metrics: m, localCancel: map[int]func(context.Context, int64){}}, nil
}

// Migrate brings the schema of the task database named by dsn up to date
// and returns what it applied. Open does the same; Migrate is for running
// it ahead of time (`ratekeeper tasks migrate`).
func Migrate(ctx context.Context, dsn string) (MigrateResult, error) {
	opts := Options{}.withDefaults(store.KindOf(dsn) == store.Postgres)
	b, err := openBackend(ctx, dsn, opts)
	if err != nil {
		return MigrateResult{}, err
	}
	defer b.close()
	res, err := b.migrate(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate task database %s: %w", store.Redact(dsn), err)
	}
	return res, nil
}

func openBackend(ctx context.Context, dsn string, opts Options) (backend, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, fmt.Errorf("%w: empty database: give a SQLite file path or a postgres:// URL", ErrInvalid)
	}
	var b backend
	var err error
	if store.KindOf(dsn) == store.Postgres {
		b, err = openPostgres(ctx, dsn, opts)
	} else {
		b, err = openSQLite(ctx, dsn, opts)
	}
	if err != nil {
		return nil, err
	}
	o := store.SharedOutage(dsn, store.OutageOptions{
		Timeout: opts.DBOutageTimeout, Logger: opts.Logger, Now: opts.outageNow, After: opts.outageAfter,
	})
	if rb, ok := b.(interface{ setOutage(*store.Outage) }); ok {
		rb.setOutage(o)
	}
	if opts.faults != nil {
		b = opts.faults(b)
	}
	return &outageBackend{backend: b, o: o}, nil
}

// String names the Queue's database, with any password masked.
func (q *Queue) String() string { return q.name }

// Close releases the database. Stop Work (cancel its context and wait for
// it to return) before closing.
func (q *Queue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		q.b.close()
	}
	return nil
}

// Registry returns the registry the Queue's metrics are registered on when
// Options.Registerer was nil, or nil when the caller supplied a Registerer.
func (q *Queue) Registry() *prometheus.Registry {
	r, _ := q.opts.Registerer.(*prometheus.Registry)
	return r
}

// handlers returns the handler of every type this Queue knows: built-in,
// registered with Handle, then Options.Handlers.
func (q *Queue) handlers() map[string]HandlerFunc {
	hs := map[string]HandlerFunc{
		HTTPType: httpHandler(q.opts.HTTPClient, q.opts.BodyDir, q.opts.InlineBodyLimit, q.opts.FailOnStatus, q.opts.WireMarked),
	}
	maps.Copy(hs, registered())
	maps.Copy(hs, q.opts.Handlers)
	return hs
}

// Types lists the task types this Queue can run, sorted.
func (q *Queue) Types() []string {
	return slices.Sorted(maps.Keys(q.handlers()))
}

// Submit adds one task of type typ with input (JSON; empty means {}) and
// returns its id. With a UniqueKey matching a live task it returns that
// task's id and adds nothing.
func (q *Queue) Submit(ctx context.Context, typ string, input json.RawMessage, opts SubmitOptions) (int64, error) {
	res, err := q.SubmitMany(ctx, []Submission{{Type: typ, Input: input, Options: opts}})
	if err != nil {
		return 0, err
	}
	return res[0].ID, nil
}

// SubmitMany adds tasks in one transaction: all are added (or found as
// duplicates of their UniqueKey), or none is. Every submission is checked
// before anything is written.
//
// A type need not be one this process handles: a task waits, pending, for
// a worker that handles its type, wherever that runs (List and Get say
// when no running worker does). Its name must be well-formed, and the input
// of the built-in http type must be a valid request.
func (q *Queue) SubmitMany(ctx context.Context, subs []Submission) ([]Submitted, error) {
	if len(subs) == 0 {
		return nil, nil
	}
	httpBuiltin := q.opts.Handlers[HTTPType] == nil
	specs := make([]insertSpec, len(subs))
	for i, s := range subs {
		spec, err := prepare(httpBuiltin, s)
		if err != nil {
			if len(subs) > 1 {
				return nil, fmt.Errorf("submission %d: %w", i+1, err)
			}
			return nil, err
		}
		specs[i] = spec
	}
	created := func(rows []*rivertype.JobRow, dup []bool) []Event {
		evs := make([]Event, 0, len(rows))
		for i, row := range rows {
			if dup[i] {
				continue
			}
			evs = append(evs, Event{TaskID: row.ID, At: row.CreatedAt, Kind: EventCreated, Key: "created"})
		}
		return evs
	}
	res, err := q.b.insert(ctx, specs, created)
	if err != nil {
		return nil, fmt.Errorf("submit to %s: %w", q.name, err)
	}
	for i, r := range res {
		if !r.Duplicate {
			q.metrics.submitted.WithLabelValues(subs[i].Type).Inc()
		}
	}
	return res, nil
}

// Validate checks a submission as Queue.Submit does, without touching a
// database: the type's name, the input (of the built-in http type, the
// request), the options.
func Validate(s Submission) error {
	_, err := prepare(true, s)
	return err
}

// prepare validates one submission and builds its River insert. httpBuiltin
// says that the http type is the built-in one, whose input it checks.
func prepare(httpBuiltin bool, s Submission) (insertSpec, error) {
	if err := validType(s.Type); err != nil {
		return insertSpec{}, err
	}
	input, err := normalizeInput(s.Input)
	if err != nil {
		return insertSpec{}, err
	}
	if s.Type == HTTPType && httpBuiltin {
		if _, err := parseHTTPInput(input); err != nil {
			return insertSpec{}, fmt.Errorf("%w: http input: %v", ErrInvalid, err)
		}
	}
	ro, err := s.Options.resolve()
	if err != nil {
		return insertSpec{}, err
	}
	meta, err := json.Marshal(map[string]submitMeta{"ratekeeper": ro.meta})
	if err != nil {
		return insertSpec{}, err
	}
	opts := &river.InsertOpts{
		MaxAttempts: ro.maxAttempts,
		Metadata:    meta,
		Priority:    ro.priority(),
		Queue:       queueFor(s.Type),
		ScheduledAt: ro.at,
	}
	if ro.uniqueKey != "" {
		// Unique by (type, unique_key): the args struct tags only UniqueKey.
		// River's default ByState leaves out cancelled and discarded, so a
		// task that failed or was cancelled can be submitted again.
		opts.UniqueOpts = river.UniqueOpts{ByArgs: true}
	}
	return insertSpec{args: jobArgs{kind: s.Type, Input: input, UniqueKey: ro.uniqueKey}, opts: opts}, nil
}

// normalizeInput checks that input is JSON and compacts it.
func normalizeInput(input json.RawMessage) (json.RawMessage, error) {
	if len(strings.TrimSpace(string(input))) == 0 {
		return json.RawMessage(`{}`), nil
	}
	var v any
	if err := json.Unmarshal(input, &v); err != nil {
		return nil, fmt.Errorf("%w: input is not valid JSON: %v", ErrInvalid, err)
	}
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("%w: input: %v", ErrInvalid, err)
	}
	return json.RawMessage(strings.TrimSuffix(sb.String(), "\n")), nil
}

// Get returns the task with id, or an error wrapping ErrNotFound. A
// pending task's Waiting says when no running worker handles its type; a
// running task's WorkerGone, when the worker running it is gone.
func (q *Queue) Get(ctx context.Context, id int64) (*Task, error) {
	t, err := q.get(ctx, id)
	if err != nil {
		return nil, err
	}
	q.explain(ctx, []*Task{t})
	return t, nil
}

// get is Get without Waiting.
func (q *Queue) get(ctx context.Context, id int64) (*Task, error) {
	row, err := q.b.get(ctx, id)
	if err != nil {
		return nil, err
	}
	t, _, err := taskFromRow(row)
	return t, err
}

// explain sets Waiting on the tasks that are due but that no running
// worker handles, and WorkerGone on the running tasks whose worker is
// gone. Reading the workers is best effort: without them, nothing is said.
func (q *Queue) explain(ctx context.Context, ts []*Task) {
	now := time.Now()
	needed := false
	for _, t := range ts {
		needed = needed || t.State == StateRunning || t.State == StatePending && !t.AvailableAt.After(now)
	}
	if !needed {
		return
	}
	rows, nowUS, err := q.b.workers(ctx)
	if err != nil {
		return
	}
	verdicts := judgeWorkers(rows, nowUS, thisMachine)
	alive := live(rows, verdicts)
	for _, t := range ts {
		t.Waiting = waitingReason(t, alive, now)
		if v := verdicts[t.Worker]; t.State == StateRunning && v.gone {
			t.WorkerGone = v.reason
		}
	}
}

// GetMany returns the tasks with the given ids, in the order of ids; an id
// with no task gives nil at its place. It reads in batches of 10,000.
func (q *Queue) GetMany(ctx context.Context, ids []int64) ([]*Task, error) {
	byID := make(map[int64]*Task, len(ids))
	for start := 0; start < len(ids); start += 10_000 {
		rows, err := q.b.getMany(ctx, ids[start:min(start+10_000, len(ids))])
		if err != nil {
			return nil, fmt.Errorf("get tasks from %s: %w", q.name, err)
		}
		for _, row := range rows {
			t, _, err := taskFromRow(row)
			if err != nil {
				return nil, err
			}
			byID[t.ID] = t
		}
	}
	out := make([]*Task, len(ids))
	for i, id := range ids {
		out[i] = byID[id]
	}
	return out, nil
}

// List returns the tasks matching f, by increasing id. Pending tasks that
// are due say in Waiting when no running worker handles their type;
// running tasks say in WorkerGone when their worker is gone.
func (q *Queue) List(ctx context.Context, f Filter) ([]*Task, error) {
	limit := f.Limit
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > 10_000:
		return nil, fmt.Errorf("%w: list limit %d: use 1 to 10000 (0 means 100)", ErrInvalid, limit)
	}
	if f.State != "" {
		if _, err := ParseState(string(f.State)); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	rows, err := q.b.list(ctx, f, limit)
	if err != nil {
		return nil, fmt.Errorf("list tasks in %s: %w", q.name, err)
	}
	out := make([]*Task, 0, len(rows))
	for _, row := range rows {
		t, _, err := taskFromRow(row)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	q.explain(ctx, out)
	return out, nil
}

// History returns every recorded state change of task id, oldest first.
// Besides the stored history it shows what the task's row already says but
// no event records yet: the running attempt's claim, and an end reached
// without a worker reporting it (River's rescuer, a cancel landing as an
// attempt ended).
func (q *Queue) History(ctx context.Context, id int64) ([]Event, error) {
	stored, err := q.b.events(ctx, id)
	if err != nil {
		return nil, err
	}
	row, err := q.b.get(ctx, id)
	if err != nil {
		if errors.Is(err, ErrNotFound) && len(stored) > 0 {
			return stored, nil // the task row was removed by retention
		}
		return nil, err
	}
	t, rec, err := taskFromRow(row)
	if err != nil {
		return nil, err
	}
	return mergeHistory(stored, rec.Outbox, t, row), nil
}

// mergeHistory joins stored events with those still on the task row and
// adds the ones only the row's state tells.
func mergeHistory(stored, outbox []Event, t *Task, row *rivertype.JobRow) []Event {
	seen := map[string]bool{}
	var out []Event
	for _, list := range [][]Event{stored, outbox} {
		for _, e := range list {
			if !seen[e.Key] {
				seen[e.Key] = true
				out = append(out, e)
			}
		}
	}
	claimKey := fmt.Sprintf("claim-%d", t.Attempt)
	if t.State == StateRunning && !seen[claimKey] && row.AttemptedAt != nil {
		out = append(out, Event{TaskID: t.ID, At: *row.AttemptedAt, Kind: EventClaimed, Attempt: t.Attempt,
			Worker: t.Worker, RescheduleCount: t.RescheduleCount, RetryCount: t.RetryCount, Key: claimKey})
	}
	if t.State.Final() {
		ended := false
		for _, e := range out {
			switch e.Kind {
			case EventCompleted, EventFailed, EventCancelled:
				ended = true
			}
		}
		if !ended {
			kind := map[State]EventKind{StateCompleted: EventCompleted, StateFailed: EventFailed, StateCancelled: EventCancelled}[t.State]
			at := t.UpdatedAt
			if t.FinishedAt != nil {
				at = *t.FinishedAt
			}
			out = append(out, Event{TaskID: t.ID, At: at, Kind: kind, Attempt: t.Attempt, Worker: t.Worker,
				Message: t.LastError, RescheduleCount: t.RescheduleCount, RetryCount: t.RetryCount, Key: "final"})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// Cancel cancels task id. A pending task is cancelled at once, and so is
// a running one whose worker is gone (see HeartbeatTimeout): nobody runs
// it anymore. Another running one is cancelled when its attempt stops:
// its handler's context is cancelled right away on PostgreSQL and within
// CancelPollInterval on SQLite; if the handler still returns a result,
// the task completes. An error wrapping ErrFinished says the task had
// already finished.
func (q *Queue) Cancel(ctx context.Context, id int64) (*Task, error) {
	now := time.Now()
	events := func(_, after *rivertype.JobRow) []Event {
		t, rec, err := taskFromRow(after)
		if err != nil {
			return nil
		}
		if after.State == rivertype.JobStateRunning {
			return []Event{{TaskID: id, At: now, Kind: EventCancelRequested, Attempt: t.Attempt,
				RescheduleCount: t.RescheduleCount, RetryCount: t.RetryCount,
				Key: fmt.Sprintf("cancel-%d", now.UnixMicro())}}
		}
		// Events of earlier attempts still on the row go along.
		return append(slices.Clone(rec.Outbox), Event{TaskID: id, At: now, Kind: EventCancelled, Attempt: t.Attempt,
			RescheduleCount: t.RescheduleCount, RetryCount: t.RetryCount, Key: "cancelled"})
	}
	before, after, err := q.b.cancel(ctx, id, now, events)
	if err != nil {
		if errors.Is(err, ErrFinished) && before != nil {
			return nil, fmt.Errorf("task %d is already %s: %w", id, mapState(before.State, false), ErrFinished)
		}
		return nil, err
	}
	if after.State == rivertype.JobStateRunning {
		q.pokeLocalWorkers(ctx, id)
	}
	t, _, err := taskFromRow(after)
	return t, err
}

func (q *Queue) pokeLocalWorkers(ctx context.Context, id int64) {
	q.mu.Lock()
	pokes := slices.Collect(maps.Values(q.localCancel))
	q.mu.Unlock()
	for _, poke := range pokes {
		poke(ctx, id)
	}
}

func (q *Queue) addLocalCancel(f func(context.Context, int64)) (remove func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.nextLocal++
	n := q.nextLocal
	q.localCancel[n] = f
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		delete(q.localCancel, n)
	}
}

// Await waits until task id reaches a final state and returns it, or
// returns when ctx ends. It polls, every FetchPollInterval.
func (q *Queue) Await(ctx context.Context, id int64) (*Task, error) {
	tick := time.NewTicker(max(q.opts.FetchPollInterval, 10*time.Millisecond))
	defer tick.Stop()
	for {
		t, err := q.get(ctx, id)
		if err != nil {
			return nil, err
		}
		if t.State.Final() {
			return t, nil
		}
		select {
		case <-ctx.Done():
			return t, context.Cause(ctx)
		case <-tick.C:
		}
	}
}

// describeDBError makes a connection failure say which database and what
// to check, without the password.
func describeDBError(dsn string, err error) error {
	if store.KindOf(dsn) == store.Postgres {
		return fmt.Errorf("task database %s unreachable (is PostgreSQL running and the URL right?): %w", store.Redact(dsn), err)
	}
	if perr := sqlite.CheckPath(store.SQLitePath(dsn)); perr != nil {
		return fmt.Errorf("task database %s: %w", dsn, perr)
	}
	return fmt.Errorf("task database %s cannot be opened (is its directory writable?): %w", dsn, err)
}
