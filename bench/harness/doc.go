// Package harness runs the same rate-limited workloads against the
// simulator (package sim) through ratekeeper and through what people use
// instead — plain net/http, hashicorp/go-retryablehttp and
// gofri/go-github-ratelimit — and measures each run against what a perfect
// client could do: makespan ÷ ideal, violations counted by the simulator,
// wasted requests and quota used.
//
// A Workload is a simulated API (limits, tokens, latency) and a list of
// GETs; a Client turns tokens into lanes of workers that share one job
// queue; Run runs one client on one workload, on a fresh simulator, and
// returns a Result. Every client's requests pass through one recording
// RoundTripper at the bottom of its stack, so the timeline of a run is
// what went over the wire, whatever the library above did.
//
// Layer 7 of docs/architecture.md: it owns the comparative workloads and the
// clients compared; nothing of ratekeeper imports it.
package harness
