// Package transport is ratekeeper's http.RoundTripper: it ties the
// providers, credentials, quota math, shared state and cache together.
// Each request finds its provider, reserves quota with the credential that
// can go soonest, is sent, and settles its reservation with what the answer
// said; refusals are retried after the wait they impose, server errors with
// backoff, and a wait beyond MaxWait becomes a *WaitError saying when quota
// returns. docs/architecture.md walks one request through it.
//
// # Where it departs from the RoundTripper contract, on purpose
//
// net/http asks a RoundTripper to send one request and return its one
// response, leaving authentication, redirects, cookies and retries to the
// Client. A Transport does more, because pacing needs it:
//
//   - it adds a credential (the provider's auth header, chosen from the
//     pool) to requests of its provider's URLs that carry none — on a copy:
//     the caller's request is never modified;
//   - it may send a request more than once: after a rate-limit refusal
//     (any method: a refused request was not processed), after a rejected
//     credential with another one, and after network errors and 5xx for
//     idempotent requests (or ones with an Idempotency-Key);
//   - it answers a repeated GET from its cache without sending anything
//     while the stored answer is fresh (RFC 9111; marked
//     X-Ratekeeper-Cache: fresh, with Age), and otherwise with a
//     conditional request whose free 304 it turns into the stored 200
//     (revalidated); an identical GET in flight waits for the first's
//     answer;
//   - it may wait before sending, up to MaxWait, or return a *WaitError
//     without sending at all.
//
// It keeps the rest: the response's Request is the caller's, bodies it
// replaces are closed, the request's context ends waits and sends, and
// CloseIdleConnections reaches the base transport.
//
// Layer 2 of docs/architecture.md: it owns the request's path and the
// memory State, and must not parse headers (package headers does) or do
// pacing math (package quota does).
package transport
