// Package cache makes repeated reads free, as an HTTP cache does (RFC
// 9111): a stored answer that is still fresh is served without asking the
// server, and a stale one is revalidated with a conditional request.
//
// Freshness is on by default, as in every HTTP cache (gregjones/httpcache
// and the browsers alike), because that is what the server asked for: an
// answer that says Cache-Control: max-age=60 (GitHub's all do) may be
// used for a minute without asking again, and a client that asks anyway
// spends a request — or, at an empty bucket where a conditional request is
// refused like any other, waits for the next window — for an answer it
// already holds. Options.AlwaysRevalidate turns freshness off: every use
// is then a revalidation, so a result is never older than one round trip.
//
// Many APIs (GitHub among them) do not count a 304 Not Modified against the
// rate limit. The cache keeps each 200 response to a GET together with its
// validators (ETag, Last-Modified) and when it was asked for and received.
// [Evaluate], a pure function of the stored header fields, the request's
// and the time, says whether it is fresh for a request (RFC 9111 §4.2:
// s-maxage in a shared cache, max-age, Expires; no heuristics) and its
// age (§4.2.3); the request's Cache-Control narrows or widens that
// (§5.2.1: no-cache and max-age=0 always ask, max-age, min-fresh,
// max-stale). [Cache.Lookup] finds a fresh answer the request may see and
// [Cache.Serve] returns it with Age set, marked X-Ratekeeper-Cache: fresh.
// Otherwise the next identical GET carries If-None-Match /
// If-Modified-Since, and when the server answers 304 the caller receives
// the stored 200 instead, fresh again from the 304's time.
//
// A stale answer the request's max-stale accepts is a [ServeStale] hit:
// a rate-keeping transport serves it (marked "stale") only when asking
// would wait for quota, and otherwise revalidates.
//
// Who may be served an answer without asking the server: in a private
// cache (the default: one operator's credentials), a request that can go
// as the owner whose request stored it, or anyone's when the answer is
// neither private nor varies on a credential header; through a [Cache.Shared]
// view (a gateway), an answer marked private, or one that is not public,
// only to the same owner and principal ([WithPrincipal]: the client key).
//
// # Use from a RoundTripper
//
// First, before choosing a credential or waiting for quota, with the
// owners the request may be sent as:
//
//	if hit, ok := c.Lookup(req, owners, now); ok && hit.Use == cache.ServeFresh {
//		return c.Serve(req, hit), nil // no request, no quota
//	}
//
// Then on a clone of the caller's request, once the credential is chosen
// (owner is the one the bucket belongs to), for each attempt:
//
//	entry := c.Prepare(req, owner) // nil: nothing to revalidate
//	resp, err := next.RoundTrip(req)
//	if err != nil { ... }
//	if entry != nil && resp.StatusCode == http.StatusNotModified {
//		return c.RevalidatedAt(entry, resp, sent, received), nil // a 304 is free
//	}
//	return c.StoreAt(req, owner, resp, sent, received)
//
// # Free repeats across owners
//
// A stored answer with an ETag is revalidated with whichever credential
// the request carries, not only its owner's: the validator goes to the
// server, and the server decides. It answers 304 only when the
// representation it would send to this credential has the ETag sent, and
// 403 or 404 to a credential that may not see the resource, which the
// caller gets as is. So another owner's stored body is only ever served
// after a 304 to the request of the credential that asked (or, fresh,
// when the answer is public and varies on no credential), and Vary:
// Authorization is honoured by that 304 rather than by keying on tokens. A Last-Modified date says "unchanged", not "the same for you",
// so If-Modified-Since goes only with the owner's own requests, and an
// answer with no ETag is kept for its owner alone.
//
// A server that mixes the request into its tags never matches a stored tag
// sent with another token: GitHub's tag is a SHA-256 of the request's
// Accept, Authorization and Cookie values and the body. Where that rule is
// known, use the view [Cache.WithTagRule]: an answer whose tag the rule
// gives for the request that fetched it is revalidated with the tag the
// rule gives each new request for the stored body, so a repeat with any
// token — a rotated one included — is a free 304 when the representation
// is unchanged. An answer whose tag does not follow the rule (the server
// changed it) keeps its stored tag, as without the view.
//
// Each URL (with its Accept values) has one record: the shared answer and
// answers kept for one owner each, at most one per owner and 8 in all.
// When an owner's full answer has another ETag than the shared one, the
// new answer becomes the shared one and the older stays its owner's own:
// owners whose representations differ each keep revalidating their own,
// and after a change the newest answer is what other owners try.
//
// Cache-Control: private is honoured as a private cache does: the answers
// of one operator's credentials are that operator's. Where requests come
// from separate parties (a gateway's clients with their own tokens), use
// the view [Cache.PrivatePerOwner]: private answers then stay with their
// owner, and private answers stored by others are not used.
//
// # What is stored
//
// A response is stored when the request is a GET (HEAD and every other
// method pass through), without Range, without Cache-Control: no-store, and
// the response is a 200 with an ETag or a Last-Modified, without
// Cache-Control: no-store, without Vary: *, and with a body of at most
// Options.MaxEntryBytes. A response's Cache-Control: no-cache makes every
// use a revalidation. Bodies larger than the limit, or
// of unknown length that turn out larger, stream to the caller intact and
// unstored.
//
// Stored are the status, the body, the response header fields except
// hop-by-hop fields and Set-Cookie, the validators, when the answer was
// asked for and received, digests of the owner and principal whose
// request stored it, and for Vary a digest of the request's values.
// Request header fields are never stored, and credential headers
// (Authorization, PRIVATE-TOKEN, JOB-TOKEN, and Options.CredentialHeaders)
// are neither stored nor hashed, even when a response varies on them. A
// request the caller made conditional itself is left to the caller.
//
// # The key
//
// A record's key is SHA-256 over the method (GET), the canonical URL
// (scheme and host in lower case, default port dropped, escaped path, the
// query exactly as given) and the request's Accept values; the credential
// is not part of it. Accept-Encoding and any other field count only when
// the stored response names it in Vary: an answer then matches only a
// request with the same values for those fields. A backend sees the key as
// [BlobKeyPrefix] plus 64 hex digits, never a URL, owner or token.
//
// # From 304 to 200
//
// [Cache.Revalidated] returns the stored status and body with the stored
// header fields updated as RFC 9111 §4.3.4 says: each field of the 304
// replaces the stored one (so Date, rate-limit headers and the like are
// fresh), except Content-Length, Content-Encoding, Content-Range and
// hop-by-hop fields. The marker header X-Ratekeeper-Cache tells the caller
// what happened: "fresh" on a stored answer served without a request
// (with Age), "stale" on one a max-stale accepted, "revalidated" on a
// stored 200 returned for a 304, "miss" on a full response that was
// stored. Responses the cache did not handle carry no marker.
//
// # Storage
//
// By default records live in a memory LRU bounded by Options.MaxBytes
// (bodies plus header fields, approximately), safe for concurrent use with
// O(1) operations. With Options.Backend they live in a shared blob table
// instead (encoding/gob behind a magic prefix), one blob per record, and
// the records a process used recently stay in a memory front bounded by a
// quarter of Options.MaxBytes, so a repeated GET does not read the table:
// an answer another process replaced meanwhile is still safe to revalidate
// (a stale validator only gets the full answer). The hits the front serves
// reach a backend that is a UseRecorder (the store's blob tables are) at
// most once a minute per record, so the shared table does not evict what
// a process uses all the time without reading it there. A blob that does not
// decode to a record for its key is a miss and is deleted. Backend errors
// never fail a request: they are logged to Options.Logger, counted in
// Stats.Errors, and the request goes on uncached.
//
// Layer 0 of docs/architecture.md: it owns conditional requests and their
// stored answers, and must not decide pacing.
package cache
