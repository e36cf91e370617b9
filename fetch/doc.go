// Package fetch runs a resumable batch of HTTP requests — the logic of
// `ratekeeper fetch` — on durable tasks, writing one record per URL exactly
// once, whatever crashes in between.
//
// A batch is a list of Targets, made by Plan from input lines (ReadEntries,
// ArgEntries): plain URLs (GETs), requests in JSON (a line starting with {:
// url, method, headers, body, id), or repository pages resolved to their
// README request. Run submits one tasks.HTTPType task per target with the
// request as UniqueKey, works the queue through the caller's HTTP client
// (the rate-keeping one), and appends a Record to the Output as each task
// ends. A request that is not idempotent and has no Idempotency-Key goes
// as a send_once task: never sent again once it may have reached the
// server, its record then says UnknownOutcome.
//
// With Options.Paginate each page of a listing is a task and a record of
// its own (Link rel="next", GitLab's X-Next-Page, GraphQL pageInfo with
// $endCursor; see paginate.go). A page's record names the next page and is
// written before that page's task is added, so the output says where each
// listing stands, and a resumed run goes on at the page after the last
// one written.
//
//	targets, err := fetch.Plan(entries, "urls.txt", false, tr.Registry())
//	out, err := fetch.OpenJournal("results.jsonl")
//	sum, err := fetch.Run(ctx, targets, fetch.Options{DSN: "ratekeeper.db", Client: &http.Client{Transport: tr}, Output: out})
//
// # Exactly once
//
// A Journal (the -o file) is its own record of progress: a request (a
// page of it) is written exactly when a complete line for it is in the
// file; a request is named by its id, or its URL (Record.Ident). Opening it
// rebuilds that set and cuts off a torn last line; Run skips written ones, finds the
// tasks of earlier runs by their key (finished ones are written without
// being fetched again, failed ones included), and appends lines with one
// write and an fsync. So a kill -9 at any moment, followed by the same run,
// ends with every URL in the file once. Only tasks that were running in the
// killed process are fetched again, and at once: while a Journal is open no
// other process holds it, so the run that opened it takes back the running
// tasks of workers named after it (Journal.Owner, Options.WorkerID) —
// earlier runs of the same file, gone — without waiting for River's
// rescuer (RescueAfter), and never a task of another live process.
//
// # Re-syncs
//
// ReadPrevious reads a previous run's output and Resync gives each target
// whose previous answer had a validator and a body that answer
// (tasks.HTTPPrevious): the task sends its request conditional on it, a 304
// repeats the answer's record marked NotModified, and Summary.Unchanged
// counts them. A re-synced target's key names the task of the answer it
// revalidates, so it finds neither that run's tasks nor older ones, and a
// killed re-sync run finds its own again.
//
// # Outcomes come from servers
//
// A URL's record is its server's answer or a network failure that outlasted
// the retries, never a fault of this machine. With Options.WireMarked (the
// client sends through tasks.WireTransport), an error that arose here — the
// quota state's database, a full disk — stops the run (tasks.IsLocalFault)
// and its URL stays unwritten for the next run.
//
// # Waiting for quota
//
// The client's MaxWait should be well below Options.Timeout: a request that
// would wait longer for quota fails with an error carrying RetryAt, which
// package tasks turns into a durable reschedule until then, freeing the
// worker; a wait that outlasted the attempt timeout would count as a
// failure instead.
//
// Layer 5 of docs/architecture.md: it owns the batch (plan, journal,
// resume), and must not build its own client: requests go through the
// caller's.
package fetch
