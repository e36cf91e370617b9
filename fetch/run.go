package fetch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper/taskbatch"
	"github.com/ratekeeper/ratekeeper/tasks"
	"github.com/ratekeeper/ratekeeper/transport"
)

// Defaults of Options.
const (
	DefaultConcurrency = 10
	// DefaultTimeout bounds one attempt: the wait for quota (the client's
	// MaxWait, which must be shorter) plus the request and its retries.
	DefaultTimeout = 2 * time.Minute
	// DefaultPollInterval is the least time between two looks at the
	// batch's tasks.
	DefaultPollInterval = 200 * time.Millisecond
	// DefaultStatusInterval is how often the credentials shown by the
	// progress display are read again.
	DefaultStatusInterval = time.Second
	// submitChunk is how many tasks one SubmitMany transaction adds.
	submitChunk = 500
)

// ErrInterrupted is returned when ctx ended before every URL was done;
// running the batch again resumes it.
var ErrInterrupted = errors.New("interrupted before every URL was done; run the same command again to resume")

// Options configure Run.
type Options struct {
	// DSN names the task database: a SQLite file path or a postgres://
	// URL. Tasks live there, so a batch survives crashes and a second run
	// finds the first one's work.
	DSN string
	// DBOutageTimeout is how long the database may be away before the
	// run gives up; meanwhile every call on it waits for it to come back
	// (0: 2m, negative: no wait). See tasks.Options.DBOutageTimeout.
	DBOutageTimeout time.Duration
	// Client sends the requests: the rate-keeping client, whose waits
	// beyond its MaxWait become durable reschedules. Nil means
	// http.DefaultClient.
	Client *http.Client
	// Output receives one record per URL. Required.
	Output Output
	// Concurrency is how many requests this process sends at once. Zero
	// means DefaultConcurrency. The process claims more tasks than that
	// (taskbatch.ClaimAhead per request in flight): a claimed task whose
	// quota cannot go waits in the scheduler (package taskbatch), not in a
	// sender.
	Concurrency int
	// MaxWait is the client's MaxWait: a request whose quota returns later
	// than that ends its attempt, and its task sleeps until quota returns.
	// Zero means the MaxWait of the client's transport, when it says (a
	// ratekeeper transport does), else transport.DefaultMaxWait. It must
	// be below Timeout.
	MaxWait time.Duration
	// Timeout bounds one attempt of a task; it must exceed the client's
	// MaxWait so that a long wait for quota becomes a reschedule rather
	// than a timeout. Zero means DefaultTimeout.
	Timeout time.Duration
	// MaxRetries is tasks.SubmitOptions.MaxRetries: failed attempts
	// retried before a URL fails (0: tasks.DefaultMaxRetries, NoRetries:
	// none).
	MaxRetries int
	// BodyDir and InlineBodyLimit are tasks.Options': where bodies too big
	// to go inline are written, and how big that is.
	BodyDir         string
	InlineBodyLimit int64
	// Status reads the client's credentials for the progress display (a
	// transport's Status); nil shows none. Providers limits it to the
	// providers the batch uses.
	Status    func(ctx context.Context, now time.Time, only ...string) ([]transport.CredentialStatus, error)
	Providers []string
	// Progress receives snapshots; nil shows nothing.
	Progress Reporter
	// Logger receives the task workers' warnings and errors, except River's
	// line for each failed attempt (the URL's record has the final error,
	// `ratekeeper tasks history` every attempt's). Nil means warnings and
	// errors on stderr.
	Logger *slog.Logger
	// PollInterval and StatusInterval: see the defaults.
	PollInterval, StatusInterval time.Duration
	// WorkerID names this process in task histories. Empty means
	// fetch-OWNER-host-pid-random, OWNER being the output's Owner (a
	// Journal's) — which lets a later run of the same output take back at
	// once the tasks this one leaves running if it is killed — or
	// fetch-host-pid-random for an output without one. A run given a
	// WorkerID takes back nothing.
	WorkerID string
	// Priority is the priority of the tasks this run adds (1 runs first, 4
	// last; 0 means tasks.DefaultPriority).
	Priority int
	// RetryFailed fetches again the URLs whose outcome was a failure: a
	// failure line in the output, a failed task, or a task that completed
	// with a status other than 2xx. Their new line follows the old one in
	// the output; the last line of a URL is its outcome.
	RetryFailed bool
	// Paginate follows each request's later pages (see paginate.go): every
	// page is a record of its own, numbered from 1, and names the page after
	// it, which is fetched once that record is written. Pages of different
	// requests are fetched side by side.
	Paginate bool
	// Registerer receives the task queue's metrics; nil means a private
	// registry.
	Registerer prometheus.Registerer
	// WireMarked is tasks.Options.WireMarked: Client sends through
	// tasks.WireTransport, so that an error that arose on this machine
	// (the quota state's database, say) stops the run, leaving its URL
	// unwritten, instead of being written as the URL's outcome.
	WireMarked bool
}

// Owned is an Output that can name itself uniquely among those open on
// this machine (see Journal.Owner).
type Owned interface {
	Owner() string
}

// RescueAfter is how long after a claim a task whose worker vanished (a
// kill -9, a lost machine) is taken up again by River's rescuer, given the
// attempt timeout: an attempt's context ends at timeout, and the worker
// then needs a moment to record the outcome, so rescuing a task sooner
// could run it twice. River's rescuer also waits for each task's own
// timeout, checks every 30 s, and runs on the elected leader (after a
// crash, another process takes the lead within about 15 s). A run of the
// same output does not wait for it (see Journal.Owner).
func RescueAfter(timeout time.Duration) time.Duration {
	return timeout + min(max(timeout/4, 2*time.Second), 30*time.Second)
}

// Summary tells what a run did.
type Summary struct {
	// Total counts the distinct requests of the batch.
	Total int
	// AlreadyWritten counts those the output held to the end (the last
	// page, with pagination) before the run; Completed those that this run
	// took to the end. Written counts the records this run added: one per
	// request, or one per page with pagination.
	AlreadyWritten, Completed, Written int
	// Submitted counts the tasks this run added; Reused the URLs whose
	// task an earlier run had added (still pending, running or finished),
	// which were not fetched again if finished.
	Submitted, Reused int
	// Failed counts the URLs whose record is a failure, this run's and
	// those already in the output.
	Failed int
	// Reclaimed counts the tasks an earlier run of this output (killed)
	// left running, which this run took back at once.
	Reclaimed int
	// Unchanged counts this run's records that repeat a previous run's
	// answer after a 304 (see Resync), and UnchangedBytes their bodies'
	// size: what was not downloaded again (nor charged, on GitHub).
	Unchanged      int
	UnchangedBytes int64
}

// Done reports whether every request has its records.
func (s Summary) Done() bool { return s.AlreadyWritten+s.Completed == s.Total }

// Run fetches every target through one http task per request and writes
// one record per target to opts.Output, each exactly once. Targets already
// written are skipped; the others are submitted with their Key as
// UniqueKey, so tasks that an earlier (perhaps killed) run added are found
// again instead of repeated, and finished ones are not fetched again. This
// process works the queue (any pending task in the database, other
// batches' too) until every target has its record, or ctx ends: then
// running tasks get a few seconds to finish, what finished is written, and
// the error is ErrInterrupted.
func Run(ctx context.Context, targets []Target, opts Options) (sum Summary, err error) {
	owner := ""
	if o, ok := opts.Output.(Owned); ok && opts.WorkerID == "" {
		owner = o.Owner()
	}
	opts = opts.withDefaults(owner)
	if err := opts.check(); err != nil {
		return sum, err
	}
	r := &runner{opts: opts, targets: targets, byTask: map[int64][]job{}, start: time.Now(), owner: owner,
		answered: make(chan struct{}, 1)}
	r.sum.Total = len(targets)
	defer func() {
		if opts.Progress != nil {
			// The final lines say what the last answers said, however
			// recently the credentials were last read.
			opts.Progress.Finish(r.snapshot(time.Now(), true))
		}
	}()

	var todo []job
	for i := range targets {
		j, ok, err := r.resume(i)
		if err != nil {
			return r.sum, err
		}
		if ok {
			todo = append(todo, j)
		}
	}
	if len(todo) == 0 {
		return r.sum, nil
	}

	client, sched := taskbatch.Start(opts.Client, opts.Concurrency, opts.MaxWait)
	defer sched.Close()
	r.sched = sched
	q, err := tasks.Open(ctx, opts.DSN, tasks.Options{
		HTTPClient:       r.tellAnswers(withUserinfo(client, targets)),
		BodyDir:          opts.BodyDir,
		InlineBodyLimit:  opts.InlineBodyLimit,
		Logger:           slog.New(quietAttempts{opts.Logger.Handler()}),
		RescueStuckAfter: RescueAfter(opts.Timeout),
		Registerer:       opts.Registerer,
		WireMarked:       opts.WireMarked,
		DBOutageTimeout:  opts.DBOutageTimeout,
	})
	if err != nil {
		return r.sum, err
	}
	defer q.Close()
	r.q = q
	if err := r.reclaim(ctx); err != nil {
		return r.sum, err
	}
	if err := r.submit(ctx, todo); err != nil {
		return r.sum, err
	}
	return r.sum, r.work(ctx)
}

// resume says what target i needs next, given what the output holds: its
// first page, the page after the last one written, or, with RetryFailed,
// the page that failed again; ok is false when the output holds it to the
// end, which is then counted.
func (r *runner) resume(i int) (j job, ok bool, err error) {
	t := r.targets[i]
	first := 0
	if r.opts.Paginate {
		first = 1
	}
	last, written := r.opts.Output.Written(t.Ident())
	switch {
	case !written:
		return job{target: i, page: first, req: t.Request, key: t.Key}, true, nil
	case last.Failed && r.opts.RetryFailed:
		return r.pageJob(i, last.Page, last.PageURL, last.Cursor)
	case !last.Failed && r.opts.Paginate && last.Next != nil:
		return r.pageJob(i, max(last.Page, 1)+1, last.Next.URL, last.Next.Cursor)
	}
	r.sum.AlreadyWritten++
	if last.Failed {
		r.sum.Failed++
	}
	return job{}, false, nil
}

// pageJob is the job of page n of target i, asked for at pageURL (REST)
// or with cursor (GraphQL); both empty for the first page.
func (r *runner) pageJob(i, n int, pageURL, cursor string) (job, bool, error) {
	t := r.targets[i]
	if pageURL == "" && cursor == "" {
		return job{target: i, page: n, req: t.Request, key: t.Key}, true, nil
	}
	next := NextPage{URL: pageURL, Cursor: cursor}
	in, err := pageRequest(t.Request, next)
	if err != nil {
		return job{}, false, fmt.Errorf("batch: page %d of %s: %w", n, t.URL, err)
	}
	return job{target: i, page: n, req: in, next: next, key: taskKey(t.Key + fmt.Sprintf("\npage %d\n", n) + requestKey(in))}, true, nil
}

// job is one request of a run: a target's request, or one of its pages.
type job struct {
	target int
	// page is the page number with pagination (from 1), else 0.
	page int
	req  tasks.HTTPInput
	// next is what asked for this page (after the first).
	next NextPage
	key  string
}

// check refuses options that the task queue would refuse once the batch
// runs, before anything is submitted.
func (o Options) check() error {
	switch {
	case o.Output == nil:
		return errors.New("batch: no output")
	case o.Concurrency > tasks.ConcurrencyLimit:
		return fmt.Errorf("batch: %w: concurrency %d: use 1 to %d", tasks.ErrInvalid, o.Concurrency, tasks.ConcurrencyLimit)
	case o.Timeout < 0:
		return fmt.Errorf("batch: %w: timeout %v: want a positive duration", tasks.ErrInvalid, o.Timeout)
	}
	err := tasks.Validate(tasks.Submission{Type: tasks.HTTPType, Input: json.RawMessage(`{"url":"https://example.com/"}`),
		Options: tasks.SubmitOptions{MaxRetries: o.MaxRetries, Timeout: o.Timeout, Priority: o.Priority}})
	if err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	return nil
}

// workerPrefix starts the WorkerID of every run of the output named owner.
func workerPrefix(owner string) string { return "fetch-" + owner + "-" }

func (o Options) withDefaults(owner string) Options {
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.StatusInterval <= 0 {
		o.StatusInterval = DefaultStatusInterval
	}
	if o.WorkerID == "" {
		host, _ := os.Hostname()
		if len(host) > 40 {
			host = host[:40] // River takes IDs of up to 100 bytes
		}
		var b [3]byte
		_, _ = rand.Read(b[:])
		prefix := "fetch-"
		if owner != "" {
			prefix = workerPrefix(owner)
		}
		o.WorkerID = fmt.Sprintf("%s%s-%d-%s", prefix, host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	return o
}

// rateWindow is how far back the rate shown with the progress looks: far
// enough to smooth the looks at the tasks, near enough that the ETA follows
// the pace when it changes (a burst, then pacing by quota).
const rateWindow = 15 * time.Second

// rateMeter measures URLs finished per second over the last rateWindow.
type rateMeter struct {
	samples []sample // oldest first
}

type sample struct {
	at   time.Time
	done int
}

// add records that done URLs were finished at at.
func (m *rateMeter) add(at time.Time, done int) {
	m.samples = append(m.samples, sample{at, done})
	// Keep one sample at or before the window's start, so that the rate
	// spans the whole window.
	cut := 0
	for cut+1 < len(m.samples) && at.Sub(m.samples[cut+1].at) >= rateWindow {
		cut++
	}
	m.samples = m.samples[cut:]
}

// rate is the URLs per second between the oldest and newest samples, or 0
// when they are less than a second apart.
func (m *rateMeter) rate() float64 {
	if len(m.samples) < 2 {
		return 0
	}
	first, last := m.samples[0], m.samples[len(m.samples)-1]
	el := last.at.Sub(first.at)
	if el < time.Second {
		return 0
	}
	return float64(last.done-first.done) / el.Seconds()
}

// quietAttempts drops River's log line for each failed attempt of a task:
// in a batch of thousands they would bury the progress display, and nothing
// is lost — the record of each URL says how it ended.
type quietAttempts struct{ slog.Handler }

func (h quietAttempts) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasSuffix(r.Message, ": Job errored") || strings.HasSuffix(r.Message, ": Job errored; retrying") {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietAttempts) WithAttrs(as []slog.Attr) slog.Handler {
	return quietAttempts{h.Handler.WithAttrs(as)}
}

func (h quietAttempts) WithGroup(name string) slog.Handler {
	return quietAttempts{h.Handler.WithGroup(name)}
}

// runner is the state of one Run.
type runner struct {
	opts    Options
	targets []Target
	q       *tasks.Queue
	sched   *taskbatch.Scheduler
	sum     Summary
	// owner is the output's Owner, or "" when this run takes nothing back.
	owner string

	// byTask maps each open task to the jobs waiting for it (several
	// inputs may name one request); open lists those tasks.
	byTask map[int64][]job
	open   []int64

	// counts of the open tasks at the last look
	running, elsewhere, ready, sleeping int
	nextAt                              time.Time

	start   time.Time // when Run began
	pace    rateMeter // URLs finished per second lately
	creds   []transport.CredentialStatus
	credsAt time.Time

	// answered receives a value (dropped when one is pending) whenever
	// this process's client gets an answer to one of the run's requests
	// (their URLs are in mine; its workers also run other processes'
	// tasks); lastAnswer is when work last took one.
	answered   chan struct{}
	mine       sync.Map
	lastAnswer time.Time
}

// reclaim takes back the tasks that earlier runs of this output left
// running. Holding the output open proves that none of those runs is alive
// (a Journal is locked while open, and a killed process's lock is gone
// with it), and their workers' IDs say which tasks they claimed: so those
// tasks run again now instead of after River's rescuer (the attempt
// timeout plus a grace, up to minutes), and no other process's are touched.
func (r *runner) reclaim(ctx context.Context) error {
	if r.owner == "" {
		return nil
	}
	prefix := workerPrefix(r.owner)
	ids, err := r.q.Reclaim(ctx, "an earlier run of fetch with output "+r.opts.Output.Name()+" had ended (this run holds its lock)",
		func(worker string) bool { return strings.HasPrefix(worker, prefix) && worker != r.opts.WorkerID })
	r.sum.Reclaimed = len(ids)
	return err
}

// submit finds or adds the task of every job in todo.
func (r *runner) submit(ctx context.Context, todo []job) error {
	ended := map[string]*tasks.Task{}
	if !r.opts.RetryFailed {
		var err error
		if ended, err = r.endedFailures(ctx, todo); err != nil {
			return err
		}
	}
	var fresh []job
	for _, j := range todo {
		if task, ok := ended[j.key]; ok {
			r.sum.Reused++
			r.addOpen(task.ID, j)
			continue
		}
		fresh = append(fresh, j)
	}
	return r.submitJobs(ctx, fresh)
}

// submitJobs submits the task of each job in todo, finding those that
// earlier runs added by their key.
func (r *runner) submitJobs(ctx context.Context, todo []job) error {
	var (
		subs []tasks.Submission
		keys []string             // key of each submission
		of   = map[string][]job{} // jobs of each key: several inputs may name one request
	)
	for _, j := range todo {
		if _, ok := of[j.key]; !ok {
			raw, err := json.Marshal(j.req)
			if err != nil {
				return fmt.Errorf("batch: encode request of %s: %w", r.targets[j.target].URL, err)
			}
			subs = append(subs, tasks.Submission{Type: tasks.HTTPType, Input: raw, Options: tasks.SubmitOptions{
				MaxRetries: r.opts.MaxRetries,
				Timeout:    r.opts.Timeout,
				UniqueKey:  j.key,
				Priority:   r.opts.Priority,
			}})
			keys = append(keys, j.key)
		}
		of[j.key] = append(of[j.key], j)
	}
	for start := 0; start < len(subs); start += submitChunk {
		end := min(start+submitChunk, len(subs))
		res, err := r.submitMany(ctx, subs[start:end])
		if err != nil {
			return err
		}
		for k, s := range res {
			for _, j := range of[keys[start+k]] {
				if s.Duplicate {
					r.sum.Reused++
				} else {
					r.sum.Submitted++
				}
				r.addOpen(s.ID, j)
			}
		}
	}
	return nil
}

// submitMany submits subs. With RetryFailed, a submission whose unique
// key found a task that ended in failure — one that completed with a
// status other than 2xx: failed and cancelled tasks never match a key — is
// submitted again under a key naming that task, so the URL is fetched
// again; and so on, should that key find an earlier retry that failed too.
// A killed retry run, resumed, finds its retries by the same keys.
func (r *runner) submitMany(ctx context.Context, subs []tasks.Submission) ([]tasks.Submitted, error) {
	res, err := r.q.SubmitMany(ctx, subs)
	if err != nil || !r.opts.RetryFailed {
		return res, err
	}
	subs = slices.Clone(subs)
	again := make([]int, len(subs)) // the submissions to look at
	for i := range again {
		again[i] = i
	}
	for len(again) > 0 {
		var ids []int64
		var dups []int
		for _, i := range again {
			if res[i].Duplicate {
				ids, dups = append(ids, res[i].ID), append(dups, i)
			}
		}
		found, err := r.q.GetMany(ctx, ids)
		if err != nil {
			return nil, err
		}
		again = again[:0]
		var retry []tasks.Submission
		for k, t := range found {
			if t != nil && t.State.Final() && RecordOf("", t).Failed() {
				i := dups[k]
				subs[i].Options.UniqueKey = retryKey(subs[i].Options.UniqueKey, t.ID)
				retry, again = append(retry, subs[i]), append(again, i)
			}
		}
		if len(retry) == 0 {
			break
		}
		more, err := r.q.SubmitMany(ctx, retry)
		if err != nil {
			return nil, err
		}
		for k, i := range again {
			res[i] = more[k]
		}
	}
	return res, nil
}

func (r *runner) addOpen(id int64, j job) {
	if _, ok := r.byTask[id]; !ok {
		r.open = append(r.open, id)
	}
	r.mine.Store(j.req.URL, struct{}{})
	r.byTask[id] = append(r.byTask[id], j)
}

// endedFailures returns, by UniqueKey, the latest failed or cancelled task
// of each job in todo. UniqueKey does not match such tasks (so that a
// failed request can be submitted again on purpose); a resumed batch
// reuses them instead, so that a URL that failed in a killed run is
// written, not fetched again.
func (r *runner) endedFailures(ctx context.Context, todo []job) (map[string]*tasks.Task, error) {
	want := make(map[string]bool, len(todo))
	for _, j := range todo {
		want[j.key] = true
	}
	found := map[string]*tasks.Task{}
	for _, st := range []tasks.State{tasks.StateFailed, tasks.StateCancelled} {
		f := tasks.Filter{State: st, Type: tasks.HTTPType, Limit: 10_000}
		for {
			page, err := r.q.List(ctx, f)
			if err != nil {
				return nil, err
			}
			for _, t := range page {
				if want[t.UniqueKey] && (found[t.UniqueKey] == nil || found[t.UniqueKey].ID < t.ID) {
					found[t.UniqueKey] = t
				}
			}
			if len(page) < f.Limit {
				break
			}
			f.AfterID = page[len(page)-1].ID
		}
	}
	return found, nil
}

// work writes the records of finished tasks, working the queue while
// some are open.
func (r *runner) work(ctx context.Context) error {
	// Database reads and the last writes go on after an interrupt.
	bg := context.WithoutCancel(ctx)
	if err := r.collect(bg); err != nil {
		return err
	}
	if len(r.open) == 0 {
		return nil
	}
	workCtx, stopWork := context.WithCancel(bg)
	defer stopWork()
	workDone := make(chan error, 1)
	go func() {
		workDone <- r.q.Work(workCtx, tasks.WorkOptions{
			Concurrency:     r.claims(),
			WorkerID:        r.opts.WorkerID,
			ShutdownTimeout: 5 * time.Second,
		})
	}()
	r.pace.add(time.Now(), r.done())

	stop := func() error {
		stopWork()
		return <-workDone
	}
	interval := r.opts.PollInterval
	timer := time.NewTimer(interval)
	defer timer.Stop()
	due := time.Now().Add(interval)
	for {
		select {
		case <-r.answered:
			// An answer near the end: look soon, so that the run ends
			// with its last task rather than up to a poll interval later.
			r.lastAnswer = time.Now()
			if r.endNear() && time.Until(due) > tailLook {
				due = r.lastAnswer.Add(tailLook)
				timer.Reset(tailLook)
			}
			continue
		case <-ctx.Done():
			werr := stop()
			if err := r.collect(bg); err != nil {
				return err
			}
			if len(r.open) == 0 {
				return werr
			}
			return errors.Join(ErrInterrupted, werr)
		case err := <-workDone:
			// The worker stopped by itself: a fault on this machine (or
			// River could not go on). What finished is written; the URL
			// that met the fault is not, and a rerun does it.
			if err == nil {
				err = errors.New("the task worker stopped")
			}
			if tasks.IsLocalFault(err) {
				err = fmt.Errorf("%w\nno result was written for that URL; once the fault is fixed, run the same command again to go on", err)
			}
			return errors.Join(fmt.Errorf("batch: %w", err), r.collect(bg))
		case <-timer.C:
		}
		began := time.Now()
		if err := r.collect(bg); err != nil {
			_ = stop()
			return err
		}
		if len(r.open) == 0 {
			return stop()
		}
		interval = r.nextLook(time.Since(began), time.Now())
		due = time.Now().Add(interval)
		timer.Reset(interval)
	}
}

// tailLook is the interval between looks at the tasks near the batch's
// end while answers come (see nextLook), and answerSpan how long after
// an answer that lasts: River records the tasks finished in a process
// every 250 ms (sooner only for 100 at once), so a task's outcome is in
// the database up to that long after its answer.
const (
	tailLook   = 20 * time.Millisecond
	answerSpan = 400 * time.Millisecond
)

// nextLook is how long the run waits before it looks at its tasks again,
// the last look having taken took. Looking at a big batch costs time;
// look less often then, so that the workers keep most of the machine.
// Near the end (endNear) a look reads a few tasks, and what it took says
// how busy the database is, not how big the batch is: look every poll
// interval, and every tailLook while the run's requests are answered, so
// that the run ends, and its last records are written, soon after its
// last task. Tasks left waiting (for quota, say) get no answers, so they
// are looked at no more often than a small batch's.
func (r *runner) nextLook(took time.Duration, now time.Time) time.Duration {
	switch {
	case !r.endNear():
		return min(max(r.opts.PollInterval, 5*took), 5*time.Second)
	case now.Sub(r.lastAnswer) < answerSpan:
		return tailLook
	}
	return r.opts.PollInterval
}

// endNear reports whether every open task may be running in this
// process: the batch's last tasks.
func (r *runner) endNear() bool { return len(r.open) <= r.claims() }

// claims is how many tasks this process claims at once.
func (r *runner) claims() int { return taskbatch.Claims(r.opts.Concurrency) }

// tellAnswers returns a client that sends what client sends and signals
// r.answered on every answer to one of the run's requests.
func (r *runner) tellAnswers(client *http.Client) *http.Client {
	c := *client
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = answerSignal{base: base, answered: r.answered, mine: &r.mine}
	return &c
}

// answerSignal is a RoundTripper that signals answered, without
// blocking, when base returns for a URL in mine.
type answerSignal struct {
	base     http.RoundTripper
	answered chan<- struct{}
	mine     *sync.Map
}

func (a answerSignal) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.base.RoundTrip(req)
	if _, ok := a.mine.Load(req.URL.String()); ok {
		select {
		case a.answered <- struct{}{}:
		default:
		}
	}
	return resp, err
}

// collect looks at the open tasks, writes the records of those that
// finished and updates the progress display. A task that vanished from
// the database (deleted by a retention setting, say) took its outcome with
// it: its targets are submitted again rather than written as failures.
func (r *runner) collect(ctx context.Context) error {
	now := time.Now()
	ts, err := r.q.GetMany(ctx, r.open)
	if err != nil {
		return err
	}
	var (
		recs     []Record
		nexts    []job // the page after each record, if any
		vanished []job
		still    = r.open[:0]
	)
	r.running, r.elsewhere, r.ready, r.sleeping, r.nextAt = 0, 0, 0, 0, time.Time{}
	for k, t := range ts {
		id := r.open[k]
		switch {
		case t == nil:
			vanished = append(vanished, r.byTask[id]...)
			delete(r.byTask, id)
		case t.State.Final():
			for _, j := range r.byTask[id] {
				rec, next := r.record(j, t)
				recs, nexts = append(recs, rec), append(nexts, next)
			}
		default:
			still = append(still, id)
			switch {
			case t.State == tasks.StateRunning:
				r.running++
				if t.Worker != r.opts.WorkerID {
					r.elsewhere++
				}
			case t.AvailableAt.After(now):
				r.sleeping++
				if r.nextAt.IsZero() || t.AvailableAt.Before(r.nextAt) {
					r.nextAt = t.AvailableAt
				}
			default:
				r.ready++
			}
		}
	}
	// A page's record names the page after it, and is written before that
	// page's task is added: whatever crashes in between, the output says
	// where the listing goes on, and the task's key finds it again.
	n, err := r.opts.Output.Append(recs)
	if err != nil {
		return err
	}
	r.sum.Written += n
	var more []job
	for k, rec := range recs {
		if nexts[k].key != "" {
			more = append(more, nexts[k])
			continue
		}
		r.sum.Completed++
		if rec.Failed() {
			r.sum.Failed++
		}
		if rec.NotModified {
			r.sum.Unchanged++
			r.sum.UnchangedBytes += rec.Size
		}
	}
	// Forget finished tasks only once their records are written.
	for _, rec := range recs {
		delete(r.byTask, rec.TaskID)
	}
	r.open = still
	if err := r.submitJobs(ctx, append(vanished, more...)); err != nil {
		return err
	}
	if len(r.pace.samples) > 0 {
		r.pace.add(now, r.done())
	}
	if r.opts.Progress != nil {
		r.opts.Progress.Update(r.snapshot(now, false))
	}
	return nil
}

func (r *runner) done() int { return r.sum.AlreadyWritten + r.sum.Completed }

// record is job j's record, its task t having ended, and, when the run
// paginates and the answer names a page after it, that page's job (else
// a job without a key).
func (r *runner) record(j job, t *tasks.Task) (Record, job) {
	tg := r.targets[j.target]
	rec := RecordOf(tg.URL, t)
	rec.ID, rec.Method, rec.Page = tg.ID, j.req.Method, j.page
	if j.req.URL != tg.Request.URL {
		rec.PageURL = j.req.URL
	}
	rec.Cursor = j.next.Cursor
	if !r.opts.Paginate || rec.Failed() || t.State != tasks.StateCompleted {
		return rec, job{}
	}
	var res tasks.HTTPResult
	if err := json.Unmarshal(t.Result, &res); err != nil {
		return rec, job{} // RecordOf said so already
	}
	next, err := nextPage(j.req, &res)
	if err == nil && next != nil {
		var nj job
		if nj, _, err = r.pageJob(j.target, j.page+1, next.URL, next.Cursor); err == nil {
			rec.Next = next
			return rec, nj
		}
	}
	if err != nil {
		rec.Error = fmt.Sprintf("page %d: %v", j.page, err)
	}
	return rec, job{}
}

// snapshot describes the batch at now, reading the credentials again when
// they are older than StatusInterval, or fresh.
func (r *runner) snapshot(now time.Time, fresh bool) Snapshot {
	s := Snapshot{At: now, Total: r.sum.Total, Done: r.done(), Failed: r.sum.Failed,
		Running: r.running, Elsewhere: r.elsewhere, Ready: r.ready, Sleeping: r.sleeping, NextAt: r.nextAt}
	if r.sched != nil {
		adjust(r.sched, &s)
	}
	if s.Rate = r.pace.rate(); s.Rate > 0 {
		s.ETA = time.Duration(float64(s.Total-s.Done) / s.Rate * float64(time.Second))
	}
	if r.opts.Status != nil && len(r.opts.Providers) > 0 && (fresh || now.Sub(r.credsAt) >= r.opts.StatusInterval) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if cs, err := r.opts.Status(ctx, now, r.opts.Providers...); err == nil {
			r.creds, r.credsAt = cs, now
		}
		cancel()
	}
	s.Credentials = r.creds
	return s
}
