// Package transport is ratekeeper's http.RoundTripper: it ties the
// providers, credentials, quota math, shared state and cache together.
// Each request finds its provider, reserves quota with the credential that
// can go soonest, is sent, and settles its reservation with what the answer
// said; refusals are retried after the wait they impose, server errors with
// backoff, and a wait beyond MaxWait becomes a *WaitError saying when quota
// returns. docs/architecture.md walks one request through it.
//
// Layer 2 of docs/architecture.md: it owns the request's path and the
// memory State, and must not parse headers (package headers does) or do
// pacing math (package quota does).
package transport
