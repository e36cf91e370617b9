package poll

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// TaskType is the task type of durable polls.
const TaskType = "poll"

// stateKeyPrefix starts the store keys of durable polls' state.
const stateKeyPrefix = "ratekeeper/poll/1/"

// DurableOptions configure RunDurable.
type DurableOptions struct {
	// DSN names the database holding the tasks and the polls' state: a
	// SQLite file path, or a postgres:// URL shared by a fleet (the CLI's
	// --db).
	DSN string
	// Concurrency bounds the polls running at once; 0 means one per URL,
	// at most 10.
	Concurrency int
	// AttemptTimeout bounds one poll, waits for quota included; 0 means
	// 10 minutes.
	AttemptTimeout time.Duration
	// Logger receives the task queue's logs; nil means warnings on
	// stderr.
	Logger *slog.Logger
	// Registerer receives the task queue's metrics; nil means a private
	// registry.
	Registerer prometheus.Registerer
	// DBOutageTimeout is how long the database may be away before a call
	// on it gives up; meanwhile every call waits for it (0: 2m, negative:
	// no wait). See tasks.Options.DBOutageTimeout.
	DBOutageTimeout time.Duration
}

// taskInput is a durable poll task's input. The URL is shown masked; the
// key (a digest of the URL as given) finds the poller's own URL, with its
// credentials, in the process that runs the task.
type taskInput struct {
	URL string `json:"url"`
	Key string `json:"key"`
}

// savedState is what a durable poll keeps between its runs.
type savedState struct {
	URL      string   `json:"url"`
	TaskID   int64    `json:"task_id"`
	State    State    `json:"state"`
	Baseline Baseline `json:"baseline"`
}

func urlKey(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(sum[:16])
}

// RunDurable polls like Run, but each URL is a durable task (type
// TaskType, one per URL, submitted with a unique key so that submitting
// again finds the live task): a task polls once, saves the policy's state
// and the baseline in the database, emits a change if there is one, and
// reschedules itself for the next poll (a durable sleep). Stopping and
// starting again — after a crash, a reboot, Ctrl-C — continues each URL's
// schedule where it was, with its first poll a free 304.
//
// The process works the task database while it runs: the poll tasks, the
// built-in http tasks and the types registered with tasks.Handle (tasks of
// other types wait for a worker that handles them). A poll task runs
// wherever a poll worker is free — another RunDurable, or a TaskHandler in
// `ratekeeper tasks worker` — emitting its change on that worker's Sink. A task whose URL this Poller was not given is polled with
// this Poller's policy when its URL holds no credential, and otherwise
// left to a poller that has it (rescheduled by Policy.Max); cancel tasks
// of URLs no longer wanted with `ratekeeper tasks cancel ID`.
//
// A change is emitted before the state that records it is saved: a crash
// between the two emits it again after the restart (at least once, never
// lost). A Sink that fails leaves the state unsaved, so the change is seen
// again at the next poll.
//
// A rescheduled task becomes runnable when the queue's scheduler next
// looks (River's, every 5 seconds), so a durable poll may come up to about
// 5 s after its decided time: nothing next to intervals of minutes.
//
// Stop conditions are those of Run: MaxErrors consecutive errors fail the
// URL's task (a later start submits a new one, with a fresh error count)
// and stop this process; the idle timeout and the quota floor stop it and
// leave the tasks pending. RunDurable returns nil when ctx ends.
func (p *Poller) RunDurable(ctx context.Context, o DurableOptions) error {
	start := time.Now()
	if err := p.checkStart(ctx, start); err != nil {
		return err
	}
	st, err := openState(ctx, o.DSN, o.Logger, o.DBOutageTimeout)
	if err != nil {
		return err
	}
	defer st.Close()
	d := &durable{p: p, st: st}
	q, err := tasks.Open(ctx, o.DSN, tasks.Options{
		Handlers:   map[string]tasks.HandlerFunc{TaskType: d.handle},
		HTTPClient: p.client, // for the built-in http tasks this worker may run too
		Logger:     o.Logger,
		Registerer: o.Registerer,

		DBOutageTimeout: o.DBOutageTimeout,
	})
	if err != nil {
		return err
	}
	defer q.Close()
	timeout := o.AttemptTimeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	var subs []tasks.Submission
	for _, tg := range p.targets {
		in, _ := json.Marshal(taskInput{URL: tg.shown, Key: urlKey(tg.raw)})
		subs = append(subs, tasks.Submission{Type: TaskType, Input: in, Options: tasks.SubmitOptions{
			UniqueKey: "poll:" + urlKey(tg.raw),
			At:        start.Add(p.firstOffset(tg, start)),
			Timeout:   timeout,
		}})
	}
	submitted, err := q.SubmitMany(ctx, subs)
	if err != nil {
		return fmt.Errorf("submitting the poll tasks: %w", err)
	}
	for i, s := range submitted {
		what := "submitted as task"
		if s.Duplicate {
			what = "continues as task"
		}
		p.event(Event{Kind: EventTask, URL: p.targets[i].shown, At: start, Message: fmt.Sprintf("%s %d", what, s.ID)})
	}

	p.mu.Lock()
	p.lastChange = time.Time{}
	p.mu.Unlock()
	workCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	d.stop = stop
	var wg sync.WaitGroup
	if p.policy.IdleTimeout > 0 {
		wg.Go(func() { p.watchIdle(workCtx, stop, start) })
	}
	concurrency := o.Concurrency
	if concurrency <= 0 {
		concurrency = min(len(p.targets), 10)
	}
	werr := q.Work(workCtx, tasks.WorkOptions{Concurrency: concurrency, WorkerID: p.opts.WorkerID})
	stop(nil)
	wg.Wait()
	if werr != nil {
		return werr
	}
	if cause := context.Cause(workCtx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return cause
	}
	return nil
}

// TaskHandler runs durable poll tasks (type TaskType) in a process that
// works a task database without having been given their URLs: `ratekeeper
// tasks worker`, or a Go program's own worker. It learns each task's URL
// from the task, polls it once with the handler's Options (policy, client,
// sink), saves the URL's state in the database and reschedules the task
// for its next poll, as RunDurable does. A URL that carries credentials is
// shown masked in its task, so only a poller given that URL can poll it:
// such a task is rescheduled by Policy.Max and left to it.
type TaskHandler struct {
	d *durable
}

// NewTaskHandler opens the poll state in the database named by dsn (the
// task database) and returns the handler; Close releases the database.
// opts.URLs may be empty; URLs given there are polled with their
// credentials when their tasks come. Options.Policy applies to every task
// it runs: a durable poll keeps its state (activity, last change, errors)
// in the database, but its intervals come from whoever runs it.
func NewTaskHandler(ctx context.Context, dsn string, opts Options) (*TaskHandler, error) {
	p, err := newPoller(opts)
	if err != nil {
		return nil, err
	}
	st, err := openState(ctx, dsn, opts.Logger, opts.DBOutageTimeout)
	if err != nil {
		return nil, err
	}
	return &TaskHandler{d: &durable{p: p, st: st}}, nil
}

// Handle runs one poll task; it is a tasks.HandlerFunc for TaskType.
func (h *TaskHandler) Handle(ctx context.Context, t *tasks.Task) (json.RawMessage, error) {
	return h.d.handle(ctx, t)
}

// Close releases the poll state database.
func (h *TaskHandler) Close() error { return h.d.st.Close() }

// durable is the task handler of one RunDurable or TaskHandler.
type durable struct {
	p  *Poller
	st store.Store
	// stop ends RunDurable; nil in a TaskHandler, whose worker goes on.
	stop context.CancelCauseFunc

	mu      sync.Mutex
	adopted map[string]*target
}

// target finds the URL of a task: one of the Poller's, or one adopted
// from the task's input when it holds no credential.
func (d *durable) target(in taskInput) *target {
	for _, tg := range d.p.targets {
		if urlKey(tg.raw) == in.Key {
			return tg
		}
	}
	if strings.Contains(in.URL, "REDACTED") || urlKey(in.URL) != in.Key {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if tg, ok := d.adopted[in.Key]; ok {
		return tg
	}
	tg, err := d.p.newTarget(in.URL)
	if err != nil {
		return nil
	}
	if d.adopted == nil {
		d.adopted = map[string]*target{}
	}
	d.adopted[in.Key] = tg
	return tg
}

// parseTaskInput reads a poll task's input. The key may be left out (a
// task submitted by hand): it is then the digest of the URL.
func parseTaskInput(raw json.RawMessage) (taskInput, error) {
	var in taskInput
	if err := json.Unmarshal(raw, &in); err != nil || in.URL == "" {
		return in, fmt.Errorf(`poll task input %s: want {"url": "https://…"}`, raw)
	}
	u, err := url.Parse(in.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return in, fmt.Errorf("poll task input: url %q: want an absolute http:// or https:// URL", in.URL)
	}
	if in.Key == "" {
		in.Key = urlKey(in.URL)
	}
	return in, nil
}

// CheckTaskInput checks the input of a task of type TaskType:
// {"url": "https://…"}, as `ratekeeper tasks submit -t poll` sends it.
func CheckTaskInput(raw json.RawMessage) error {
	_, err := parseTaskInput(raw)
	return err
}

func (d *durable) handle(ctx context.Context, t *tasks.Task) (json.RawMessage, error) {
	in, err := parseTaskInput(t.Input)
	if err != nil {
		return nil, tasks.Permanent(err)
	}
	tg := d.target(in)
	if tg == nil {
		d.p.event(Event{Kind: EventWarning, URL: in.URL, At: time.Now(),
			Message: fmt.Sprintf("task %d polls a URL with credentials that this poller was not given; leaving it to one that was", t.ID)})
		return nil, tasks.Reschedule(d.p.policy.Max)
	}
	key := stateKeyPrefix + in.Key
	if err := d.load(ctx, key, tg, t.ID); err != nil {
		return nil, err // retried by the queue
	}
	dec, err := d.p.pollOnce(ctx, tg)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	var se *StopError
	if err != nil && !errors.As(err, &se) {
		// The sink failed: the change was not delivered, so the state is
		// not saved and the next run sees the change again. RunDurable
		// stops; a task worker retries the task later.
		if d.stop == nil {
			return nil, err
		}
		d.stop(err)
		return nil, tasks.Reschedule(0)
	}
	if serr := d.save(ctx, key, tg, t.ID); serr != nil {
		return nil, serr
	}
	if se != nil {
		if d.stop != nil {
			d.stop(se)
		}
		if errors.Is(se, ErrTooManyErrors) {
			return nil, tasks.Permanent(se)
		}
		return nil, tasks.Reschedule(time.Minute)
	}
	return nil, tasks.Reschedule(max(time.Until(dec.Next), 0))
}

// load puts the saved state of a task's URL into tg. A state saved by an
// earlier task of the URL (one that failed) keeps everything but its error
// count.
func (d *durable) load(ctx context.Context, key string, tg *target, taskID int64) error {
	rec, err := d.st.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("loading the poll state of %s: %w", tg.shown, err)
	}
	var saved savedState
	if err := json.Unmarshal(rec.Value, &saved); err != nil {
		d.p.event(Event{Kind: EventWarning, URL: tg.shown, At: time.Now(), Err: err, Message: "unreadable saved state; starting afresh"})
		return nil
	}
	if saved.TaskID != taskID {
		saved.State.Errors = 0
	}
	tg.mu.Lock()
	tg.state, tg.base = saved.State, saved.Baseline
	tg.mu.Unlock()
	return nil
}

func (d *durable) save(ctx context.Context, key string, tg *target, taskID int64) error {
	tg.mu.Lock()
	b, err := json.Marshal(savedState{URL: tg.shown, TaskID: taskID, State: tg.state, Baseline: tg.base})
	tg.mu.Unlock()
	if err != nil {
		return err
	}
	if err := d.st.Update(ctx, key, func(rec *store.Record) error { rec.Value = b; return nil }); err != nil {
		return fmt.Errorf("saving the poll state of %s: %w", tg.shown, err)
	}
	return nil
}

// openState opens the store of the polls' state, waiting out outages of
// its database for up to outage (0: the default).
func openState(ctx context.Context, dsn string, log *slog.Logger, outage time.Duration) (store.Store, error) {
	st, err := store.Open(ctx, dsn, store.Options{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("poll state database: %w", err)
	}
	return store.WaitOutages(st, store.SharedOutage(dsn, store.OutageOptions{Timeout: outage, Logger: log})), nil
}
