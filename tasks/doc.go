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
//	q, err := tasks.Open(ctx, "ratekeeper.db", tasks.Options{})
//	id, err := q.Submit(ctx, "http", []byte(`{"url":"https://api.github.com/rate_limit"}`), tasks.SubmitOptions{})
//	err = q.Work(ctx, tasks.WorkOptions{Concurrency: 10}) // until ctx ends
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
// # The bridge to the rate-limit-aware client
//
// When ratekeeper's HTTP client would have to wait longer for quota than
// its MaxWait allows, it returns an error with a method
//
//	RetryAt() time.Time
//
// saying when quota returns. A handler only has to return that error (as
// the built-in http type does, wrapped by net/http): when any error in the
// chain of a handler's error has a RetryAt method (found with errors.As on
// that interface, so this package imports no client package), the task is
// rescheduled to that time, exactly as if the handler had returned
// Reschedule(RetryAt - now). A 429, or a 403 with Retry-After, that reaches
// the http type is rescheduled the same way.
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
// path; submits and cancels commit at once.
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
package tasks
