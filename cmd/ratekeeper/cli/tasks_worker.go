package cli

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/poll"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/taskbatch"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// workerOptions are the flags of 'tasks worker'.
type workerOptions struct {
	client       clientFlags
	metrics      metricsFlags
	concurrency  int
	workerID     string
	bodyDir      string
	shutdown     time.Duration
	rescueAfter  time.Duration
	failOn       string
	rateLimited  string
	inlineLimit  int64
	failOnStatus func(int) bool
	rule         tasks.PriorityRule
}

func newTasksWorkerCmd(db *tasksDB) *cobra.Command {
	var o workerOptions
	cmd := &cobra.Command{
		Use:   "worker [--concurrency N] [--provider NAME=BASEURL…] [--max-wait 30s] [--metrics-listen ADDR]",
		Short: "Work tasks until interrupted, through the rate-keeping client",
		Long: `Claims and runs tasks until interrupted (Ctrl-C, SIGTERM, SIGHUP), then
stops gracefully: no new claims, running tasks get --shutdown-timeout to
finish, after which they go back to pending (counted neither as retries nor
as reschedules).

It runs the built-in types http and poll (and, in a Go program, any type
registered with tasks.Handle); tasks of other types wait for a worker that
handles them. --concurrency applies to each type: for http it is the
requests sent at once, and the worker claims 8 tasks per request. A claimed
task's request waits in one scheduler, as fetch's do: a sender takes the
request whose quota can go, of the best priority (1 first), then the
oldest, so a task waiting for one bucket, scope or points budget holds a
claim, not a sender, and the others go meanwhile.

Requests go through the rate-keeping client, as fetch's do: tokens from the
environment (GITHUB_TOKEN, GITLAB_TOKEN, …), the client flags (--provider,
--config, --policy, --reserve, --max-wait), and quota state shared through
--db with every ratekeeper process using that database, however many workers
run. One client serves all of this worker's tasks. A request that would wait
for quota longer than --max-wait (30s) reschedules its task until quota
returns (a durable sleep that frees the worker), and so does a rate-limit
refusal that still reaches the task; such a task is raised one priority step
(--rate-limited-priority keep leaves it), so it runs before newer work once
its quota returns. A 5xx or a network error is retried with backoff; any
other answer completes the task with that answer as its result, unless
--fail-on-status says that status fails it. An error that arose on this
machine (the database failing, a full disk) is no task's outcome: its task
goes back to pending uncounted and the worker stops gracefully, exit status
1 with the error. A damaged SQLite --db (PRAGMA quick_check) is refused at
start.

A worker that starts takes back at once the tasks left running by workers
that are gone, and so does every running worker at its heartbeat (every
10s): a worker of this machine whose process has ended (a kill -9, a crash),
or a worker of another machine that has not renewed its heartbeat for a
minute. They go back to pending, the lost attempt counted neither as a retry
nor as a reschedule, and run again. 'tasks list' marks the tasks of a worker
that is gone, and 'tasks cancel' cancels them at once. --rescue-after is the
last resort for tasks whose worker recorded nothing: River's rescuer puts a
task still running that long after its claim back as a failed attempt (a
task with a longer --timeout waits for its timeout), so it must exceed the
longest attempt of tasks submitted without a timeout.

poll tasks print each change as a JSON line on stdout, with the default
polling profile (see 'ratekeeper poll').`,
		Example: `  GITHUB_TOKEN=ghp_a,ghp_b ratekeeper tasks worker --concurrency 20
  ratekeeper tasks worker --db postgres://rk@db/ratekeeper --provider ghe=https://ghe.example.com/api/v3 \
      --max-wait 20s --fail-on-status 4xx --metrics-listen 127.0.0.1:9464`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.client.db, o.client.dbOutage = db.dsn, db.outage
			if err := o.check(); err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			return runTasksWorker(cmd, db, &o)
		},
	}
	o.client.addAllButDB(cmd)
	o.client.durable(cmd)
	o.metrics.add(cmd)
	f := cmd.Flags()
	f.IntVar(&o.concurrency, "concurrency", 10, "requests of http tasks sent at once (8 tasks claimed per request), and tasks of each other type run at once")
	f.StringVar(&o.workerID, "worker-id", "", "name of this worker in task histories (default host-pid-random; unique among running workers)")
	f.StringVar(&o.bodyDir, "body-dir", "", "where http results keep bodies too large to inline (default ratekeeper-bodies beside a SQLite database, else in the current directory)")
	f.Int64Var(&o.inlineLimit, "inline-limit", 64<<10, "largest UTF-8 body an http result carries inline, in bytes")
	f.DurationVar(&o.shutdown, "shutdown-timeout", 10*time.Second, "time running tasks get to finish after an interrupt")
	f.DurationVar(&o.rescueAfter, "rescue-after", tasks.DefaultRescueAfter, "time after its claim when a task still running, whose worker recorded nothing, is put back as a failed attempt (tasks of workers known to be gone come back at once)")
	f.StringVar(&o.failOn, "fail-on-status", "", "answers that fail an http task instead of completing it: codes and classes such as 404,410 or 4xx")
	f.StringVar(&o.rateLimited, "rate-limited-priority", string(tasks.RaisePriority), "what a reschedule for a rate limit does to a task's priority: raise (one step, so it runs before newer work) or keep")
	return adviseOnDamage(cmd, workerDamagedAdvice)
}

// check validates the flags that need no I/O.
func (o *workerOptions) check() error {
	var err error
	switch {
	case o.concurrency < 1 || o.concurrency > tasks.ConcurrencyLimit:
		return fmt.Errorf("--concurrency %d: want 1 to %d", o.concurrency, tasks.ConcurrencyLimit)
	case o.shutdown < 0:
		return fmt.Errorf("--shutdown-timeout %s: want 0 or more", o.shutdown)
	case o.rescueAfter < time.Second:
		return fmt.Errorf("--rescue-after %s: want a second or more, such as 15m (above the longest attempt of tasks without a timeout)", o.rescueAfter)
	case o.inlineLimit < 0:
		return fmt.Errorf("--inline-limit %d: want 0 or more bytes", o.inlineLimit)
	case store.KindOf(o.client.db) == store.Memory:
		return fmt.Errorf("--db %s: tasks live in a database; give a SQLite file or a postgres:// URL", cmp.Or(o.client.db, `""`))
	}
	if o.failOnStatus, err = parseStatusSet(o.failOn); err != nil {
		return fmt.Errorf("--fail-on-status: %w", err)
	}
	if o.rule, err = tasks.ParsePriorityRule(o.rateLimited); err != nil {
		return fmt.Errorf("--rate-limited-priority %q: want raise or keep", o.rateLimited)
	}
	return o.metrics.check()
}

func runTasksWorker(cmd *cobra.Command, db *tasksDB, o *workerOptions) error {
	ctx, stderr := cmd.Context(), cmd.ErrOrStderr()
	reg := prometheus.NewRegistry()
	tr, err := o.client.taskTransport(stderr, reg)
	if err != nil {
		return err
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	polls, err := poll.NewTaskHandler(ctx, db.dsn, poll.Options{
		Client: client, Sink: poll.JSONLines(cmd.OutOrStdout()), Quota: poll.TransportQuota(tr), Registerer: reg,
		DBOutageTimeout: outageTimeout(db.outage),
		OnEvent:         func(e poll.Event) { printPollEvent(stderr, e, o.client.verbose) },
	})
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	defer polls.Close()
	bodyDir := o.bodyDir
	if bodyDir == "" {
		bodyDir = defaultBodyDir(db.dsn)
	}
	// http tasks send through one scheduler: --concurrency requests at
	// once, taskbatch.ClaimAhead tasks claimed per request, so that a task
	// waiting for its quota holds a claim, not a sender. poll tasks, which
	// hold their claim for as long as they poll, send directly.
	scheduled, sched := taskbatch.Start(client, o.concurrency, o.client.maxWait)
	defer sched.Close()
	q, err := db.open(ctx, tasks.Options{
		HTTPClient: scheduled, WireMarked: true, BodyDir: bodyDir, InlineBodyLimit: o.inlineLimit, FailOnStatus: o.failOnStatus,
		Handlers:   map[string]tasks.HandlerFunc{poll.TaskType: polls.Handle},
		Registerer: reg, RescueStuckAfter: o.rescueAfter,
	})
	if err != nil {
		return err
	}
	defer q.Close()
	stopMetrics, err := o.metrics.serve(ctx, reg, func(ctx context.Context) error { return tr.Ready(ctx) }, stderr)
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	defer stopMetrics()
	claims := taskbatch.Claims(o.concurrency)
	fmt.Fprintf(stderr, "working tasks of type %s on %s: http %d requests at a time (%d tasks claimed), other types %d tasks at a time; Ctrl-C stops\n",
		strings.Join(q.Types(), ", "), q, o.concurrency, claims, o.concurrency)
	// A poll task holds its claim for as long as it polls: its queue is
	// looked at four times a second, not every 20ms, which on SQLite cost
	// an idle queue some 25ms of CPU a second, a fifth of a worker's CPU
	// over a batch of http tasks.
	err = q.Work(ctx, tasks.WorkOptions{Concurrency: o.concurrency, WorkerID: o.workerID, ShutdownTimeout: o.shutdown, RateLimitedPriority: o.rule,
		TypeConcurrency:  map[string]int{tasks.HTTPType: claims},
		TypePollInterval: map[string]time.Duration{poll.TaskType: pollTaskPollInterval}})
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	fmt.Fprintln(stderr, "worker stopped")
	return nil
}

// pollTaskPollInterval is how often an idle worker looks for poll tasks.
const pollTaskPollInterval = 250 * time.Millisecond

// workerDamagedAdvice is what to do about a damaged --db, for a worker.
const workerDamagedAdvice = "its tasks cannot be trusted, so no worker was started. Restore it from a backup, or move it aside and submit the tasks again to a new database"

// parseStatusSet reads --fail-on-status: comma-separated codes (404) and
// classes (4xx) of answers that would otherwise complete a task. 5xx
// answers are retried, then fail the task anyway; they are refused here so
// that nobody expects otherwise. Empty means none (nil).
func parseStatusSet(v string) (func(int) bool, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	codes, classes := map[int]bool{}, map[int]bool{}
	for _, part := range strings.Split(v, ",") {
		part = strings.ToLower(strings.TrimSpace(part))
		if len(part) == 3 && strings.HasSuffix(part, "xx") && part[0] >= '1' && part[0] <= '4' {
			classes[int(part[0]-'0')] = true
			continue
		}
		n, err := strconv.Atoi(part)
		switch {
		case err == nil && n >= 100 && n < 500:
			codes[n] = true
		case err == nil && n >= 500 && n < 600 || part == "5xx":
			return nil, fmt.Errorf("%q: 5xx answers are retried with backoff and fail the task when retries run out; list codes or classes below 500", part)
		default:
			return nil, fmt.Errorf("%q: want status codes such as 404 or classes such as 4xx, separated by commas", part)
		}
	}
	return func(status int) bool { return codes[status] || classes[status/100] }, nil
}

// defaultBodyDir puts large http bodies beside a SQLite database.
func defaultBodyDir(dsn string) string {
	if store.KindOf(dsn) != store.SQLite {
		return "ratekeeper-bodies"
	}
	return filepath.Join(filepath.Dir(store.SQLitePath(dsn)), "ratekeeper-bodies")
}
