// Package cache makes repeated reads free with conditional requests.
//
// Many APIs (GitHub among them) do not count a 304 Not Modified against the
// rate limit. The cache keeps each 200 response to a GET together with its
// validators (ETag, Last-Modified); the next identical GET carries
// If-None-Match / If-Modified-Since, and when the server answers 304 the
// caller receives the stored 200 instead. Nothing is ever served from the
// cache without asking the server: there is no freshness lifetime, no
// max-age hit. Every use is a revalidation, so a result is never stale.
//
// # Use from a RoundTripper
//
// On a clone of the caller's request, once the credential is chosen (owner
// is the one the bucket belongs to), for each attempt:
//
//	entry := c.Prepare(req, owner) // nil: nothing to revalidate
//	resp, err := next.RoundTrip(req)
//	if err != nil { ... }
//	if entry != nil && resp.StatusCode == http.StatusNotModified {
//		return c.Revalidated(entry, resp), nil // refund the quota: a 304 is free
//	}
//	return c.Store(req, owner, resp)
//
// # What is stored
//
// A response is stored when the request is a GET (HEAD and every other
// method pass through), without Range, without Cache-Control: no-store, and
// the response is a 200 with an ETag or a Last-Modified, without
// Cache-Control: no-store, without Vary: *, and with a body of at most
// Options.MaxEntryBytes. Cache-Control: private and no-cache are honoured by
// construction: entries are partitioned per credential owner, and every use
// is revalidated. Bodies larger than the limit, or of unknown length that
// turn out larger, stream to the caller intact and unstored.
//
// Stored are the status, the body, the response header fields except
// hop-by-hop fields and Set-Cookie, the validators, and for Vary a digest of
// the request's values. Request header fields are never stored, and
// credential headers (Authorization, PRIVATE-TOKEN, JOB-TOKEN, and
// Options.CredentialHeaders) are neither stored nor hashed, even when a
// response varies on them: the owner string stands for the credential.
// A request the caller made conditional itself is left to the caller.
//
// # The key
//
// An entry's key is SHA-256 over the method (GET), the canonical URL
// (scheme and host in lower case, default port dropped, escaped path, the
// query exactly as given), the credential owner ("" for anonymous), and the
// request's Accept values. Accept-Encoding and any other field count only
// when the stored response names it in Vary: the entry then matches only a
// request with the same values for those fields. One entry is kept per key;
// a response for other Vary values replaces it. A backend sees the key as
// [BlobKeyPrefix] plus 64 hex digits, never a URL, owner or token.
//
// # From 304 to 200
//
// [Cache.Revalidated] returns the stored status and body with the stored
// header fields updated as RFC 9111 §4.3.4 says: each field of the 304
// replaces the stored one (so Date, rate-limit headers and the like are
// fresh), except Content-Length, Content-Encoding, Content-Range and
// hop-by-hop fields. The marker header X-Ratekeeper-Cache tells the caller
// what happened: "revalidated" on a stored 200 returned for a 304, "miss" on
// a full response that was stored. Responses the cache did not handle carry
// no marker.
//
// # Storage
//
// By default entries live in a memory LRU bounded by Options.MaxBytes
// (bodies plus header fields, approximately), safe for concurrent use with
// O(1) operations. With Options.Backend they live in a shared blob table
// instead (encoding/gob behind a magic prefix); a blob that does not decode
// to an entry for its key is a miss and is deleted. Backend errors never
// fail a request: they are logged to Options.Logger, counted in
// Stats.Errors, and the request goes on uncached.
package cache
