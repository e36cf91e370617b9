// Package tasks runs durable tasks on River (github.com/riverqueue/river):
// work that survives crashes and restarts, where a rate limit becomes a
// durable sleep instead of a blocked worker or a failure.
//
// # Queues and workers
//
// Open a Queue on a SQLite file (the default; one machine) or a PostgreSQL
// URL (a fleet of workers sharing the same tokens). Open brings the schema
// up to date: River's own river_* tables and ratekeeper's ratekeeper_task_*
// ones, which share the database with other ratekeeper tables.
//
//	q, err := tasks.Open(ctx, "ratekeeper.db", tasks.Options{HTTPClient: client})
//	id, err := q.Submit(ctx, "http", []byte(`{"url":"https://api.github.com/rate_limit"}`), tasks.SubmitOptions{})
//	err = q.Work(ctx, tasks.WorkOptions{Concurrency: 10}) // until ctx ends
//
// where client is ratekeeper's rate-limit-aware client (below).
//
// River stores, claims and schedules the jobs; this package adds what River
// lacks: reschedules counted apart from retries with their own limit, a
// history of every state change, the built-in http type, metrics, and the
// `ratekeeper tasks` commands.
//
// # Handlers, retries and reschedules
//
// A handler (HandlerFunc, registered with Handle or Options.Handlers) does
// one attempt of a task and returns a JSON result or an error:
//
//   - Reschedule(delay) sends the task back to pending with AvailableAt =
//     now + delay and RescheduleCount + 1; its retry count is unchanged and
//     the worker takes other work at once. It is a durable sleep: it
//     survives restarts. Delay 0 puts the task behind every task already
//     waiting. Past SubmitOptions.MaxReschedules (default unlimited) the
//     task fails with "max reschedules (N) exceeded".
//   - Permanent(err) fails the task at once.
//   - Any other error fails the attempt. It is retried with exponential
//     backoff (Options.Backoff) up to SubmitOptions.MaxRetries times
//     (default 3) and counts as a retry, never as a reschedule.
//
// # The rate-limit-aware client
//
// The built-in http type sends its request with Options.HTTPClient. Give it
// ratekeeper's client, built from the same database, so that every worker
// paces with the tokens from the environment and the quota state that
// every ratekeeper process on that database shares (`ratekeeper tasks
// worker` does exactly this with its client flags):
//
//	tr, err := ratekeeper.NewTransport(ratekeeper.Options{
//		DB:      "ratekeeper.db",  // shared quota state: the task database, or any other
//		MaxWait: 30 * time.Second, // longer waits become durable sleeps
//	})
//	defer tr.Close()
//	q, err := tasks.Open(ctx, "ratekeeper.db", tasks.Options{HTTPClient: &http.Client{Transport: tr}})
//
// One transport for all of a process's workers: it is safe for concurrent
// use, and one transport is one view of the quota. Keep its MaxWait well
// below the tasks' Timeout (5 minutes by default), or a long wait for quota
// ends as a timed-out attempt instead of a reschedule. Your own handlers
// use the same client and get the same bridge.
//
// The bridge: when the client would wait for quota longer than its
// MaxWait, it returns an error with a method
//
//	RetryAt() time.Time
//
// saying when quota returns. A handler only has to return that error (as
// the built-in http type does, wrapped by net/http): when any error in the
// chain of a handler's error has a RetryAt method (found with errors.As on
// that interface, so this package imports no client package), the task is
// rescheduled to that time, exactly as if the handler had returned
// Reschedule(RetryAt - now), and its priority is raised (see Priorities).
//
// When the error also has the methods
//
//	QuotaKey() string
//	ReadyAt(ctx context.Context) (time.Time, error)
//
// (the client's *transport.WaitError has them), the worker that put the
// task to sleep asks ReadyAt, at most once a second per QuotaKey, when its
// quota returns, and makes the task available as soon as that is now,
// before the sleep's end. A worker remembers its sleeping tasks in memory
// only: one that stops leaves them to sleep to their end.
//
// The http type asks package headers — the parser the client itself uses —
// whether an answer that still reaches it is a rate-limit refusal (the
// client retries refusals, but not forever, and a plain client not at
// all), and until when: such a task is rescheduled until then, never
// completed with the refusal as its result nor failed. A 5xx answer or a
// network error is a failed attempt, retried with backoff. Any other answer
// completes the task with the answer as its result, a 404 included, unless
// Options.FailOnStatus says that status fails it. The request carries
// Cache-Control: no-store (unless the input sets Cache-Control), so that
// the body is kept once, in the result, and not in the client's cache too.
//
// # Faults of this machine
//
// An attempt's outcome must come from its work. A handler that meets a
// fault of the machine it runs on — a database that went bad, a full disk —
// returns LocalFault(err): the task goes back to pending at once, counted
// neither as a retry nor as a reschedule, and Work stops and returns the
// fault, since every other task would meet it too. The http type does this
// for a body file it cannot write, and, with Options.WireMarked, for every
// error of its client that did not come from the network: give the
// rate-keeping transport WireTransport as its base, and the http type
// retries (then records) the network's failures only.
//
// # Workers that are gone
//
// A worker killed mid-attempt leaves its tasks running. River's rescuer
// cannot tell a dead worker from a slow one and waits
// (Options.RescueStuckAfter). ratekeeper's workers can tell: each records
// its process and a heartbeat in the database, so a worker of this machine
// whose process ended, or one of another machine silent for longer than
// HeartbeatTimeout, is gone. Every worker that starts, and every running
// worker at each heartbeat, takes back the running tasks of the workers
// that are gone: pending again at once, the lost attempt counted neither
// as a retry nor as a reschedule. List and Get mark such tasks
// (Task.WorkerGone) until then, and Cancel cancels them at once. A caller
// with a proof of its own — `ratekeeper fetch` holds a lock its killed
// predecessor held — calls Reclaim with the names of the workers it knows
// are gone.
//
// # Types and workers
//
// Each task type has its own River queue, and a worker (Work) claims only
// tasks of the types it handles: the built-in http type, those registered
// with Handle, and Options.Handlers. A task of a type that no running
// worker handles is not failed: it waits, pending, for one that does, and
// List and Get say so in Task.Waiting. So a program may submit tasks that
// another program works. Concurrency applies per type, and
// TypeConcurrency sets it for a type apart.
//
// # Priorities
//
// A task has a priority from 1 (runs first) to 4 (runs last), River's
// scale; SubmitOptions.Priority defaults to DefaultPriority (2). Among the
// tasks available, a worker claims the best priority first, then the task
// available earliest. A task rescheduled for a rate limit would otherwise
// line up behind work submitted while it slept, which became available
// earlier; so its priority is raised by one (to 1 from the default), once,
// and it runs before that newer work when its quota returns.
// WorkOptions.RateLimitedPriority = KeepPriority turns that off.
//
// # States
//
// River's job states map onto five: pending (available, scheduled,
// retryable), running, completed, failed (discarded, or ended early by
// ratekeeper: max reschedules, Permanent) and cancelled.
//
// # History and consistency
//
// Every state change is an Event: created, claimed by worker W, rescheduled
// +60s (count 2), retried after error E, completed, failed, cancelled (plus
// cancel requested, interrupted by a shutdown, abandoned by a vanished
// worker). "created" is written in the transaction that inserts the task,
// and "cancelled" in the one that cancels it. The events of an attempt
// (its claim and its outcome) travel with the task's bookkeeping — counts
// and result — in River's recorded output, which River writes in the same
// UPDATE that changes the job's state, so history, counts and state never
// disagree, whatever crashes. The worker then copies those events into the
// ratekeeper_task_events table in batches; History reads both, so it is
// always complete, and a sweep copies what a crash left on the rows.
//
// River applies an attempt's outcome through its batch completer, up to
// about 250ms after the handler returns; until then the task still reads
// as running. Completion, retries, reschedules and failures all take this
// path; submits and cancels commit at once. While the database is away
// the completer's writes wait for it, up to Options.DBOutageTimeout, as
// the queue's own calls do (River alone drops them after about 30 s).
//
// # Metrics
//
// ratekeeper_tasks_total{type,outcome} counts attempt outcomes (completed,
// retried, rescheduled, failed, cancelled, interrupted);
// ratekeeper_tasks_rescheduled_total{type} and
// ratekeeper_reschedule_delay_seconds{type} describe reschedules;
// ratekeeper_tasks_submitted_total{type} and
// ratekeeper_task_attempt_duration_seconds{type} complete the picture. They
// are registered on Options.Registerer (a private registry by default).
//
// Layer 4 of docs/architecture.md: it owns durable tasks and their
// rescheduling, and must not re-implement a queue or parse rate-limit
// headers itself.
package tasks
