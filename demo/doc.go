// Package demo is what `ratekeeper demo` runs: a simulated GitHub API on
// loopback with a handful of tokens (one revoked, two belonging to the same
// user), a realistic batch of GETs sent through the real rate-keeping
// client by a pool of workers, live progress, and a summary that checks the
// client against the simulator's own counters.
//
// The pieces are separate so each can be read, tested or replaced alone:
//
//   - [NewScenario] decides the simulated API and its tokens;
//   - [Batch] lists the GETs (repositories, READMEs, issue pages, and a
//     second pass over some of them so conditional requests show up);
//   - a [Runner] sends a batch through an *http.Client ([Pool] is a plain
//     worker pool; a durable batch runner can take its place);
//   - the progress renderers draw bars on a terminal and plain lines
//     elsewhere, both from [Snapshot]s of the transport's status;
//   - [Summarize] turns the run's counters and the simulator's statistics
//     into a [Summary], which says how close the run came to the ideal.
//
// [Run] wires them together.
//
// Layer 5 of docs/architecture.md: it owns the demo's workload and report,
// and builds its client through package wiring like every command.
package demo
