// Package gateway is ratekeeper as an HTTP service: a reverse proxy that
// lets programs in any language share one set of tokens, one quota view
// and one conditional cache, with a dashboard, Prometheus metrics and a
// JSON status. `ratekeeper serve` runs it.
//
// # Routes
//
// A request for /NAME/PATH?QUERY goes to provider NAME's base URL plus
// PATH?QUERY, through the rate-keeping transport (package transport): the
// transport picks the credential that can go soonest, paces, revalidates
// cached GETs (a 304 costs nothing on GitHub), retries after rate-limit
// refusals and adds the token. With Options.Hosts, a request whose Host
// header names a provider goes to it with its whole path instead. Only
// the configured providers' base URLs are ever reached.
//
// Link and Location headers that point under the provider's base URL are
// rewritten to point at the gateway, so pagination and redirects stay on
// it. Responses stream; the transport's X-Ratekeeper-Credential (masked),
// X-Ratekeeper-Attempts and X-Ratekeeper-Cache headers tell what happened,
// and X-Ratekeeper-Coalesced: shared marks a coalesced answer.
//
// # Waiting and refusing
//
// The max wait (DefaultMaxWait, 30 s, unless the client options or the
// provider's configuration say otherwise) bounds the whole time a request
// waits for quota, from the moment it is read: queueing behind other
// requests and waiting for a coalesced request's answer included. The
// gateway owns that wait (the transport, whose own max wait bounds each
// single wait, hands every wait back to it) and answers 429 as soon as
// quota returns after the request's deadline, with Retry-After (whole
// seconds, rounded up, so a client coming back then finds the quota there),
// x-ratelimit-remaining: 0, x-ratelimit-reset (Unix seconds) and
// x-ratelimit-resource, as GitHub does, so a client's own rate-limit
// handling works unchanged; the JSON body says when, in "retry_at".
//
// Once sent, a request is the upstream's: it gets Options.UpstreamTimeout
// to answer with a header (504 beyond, saying the request may have been
// processed), and its answer is always read and recorded in the quota
// state, also when its client has left meanwhile. So no answer comes later
// than the max wait plus the upstream's time, and no request is charged
// upstream without the gateway knowing. A request whose client left while
// it waited is not sent. The gateway does not resend after a server error
// or a broken connection: the client gets the upstream's answer (or 502)
// and decides, since it alone knows whether waiting longer is worth it.
// Every answer the gateway writes itself is JSON with "message" and
// "error" fields.
//
// # Coalescing
//
// Identical concurrent GETs share one upstream request. Identical means:
// same provider, same identity (the gateway's credentials, or one
// pass-through token), same upstream URL and query, and the same value for
// every request header the upstream would see (Accept, Accept-Encoding,
// If-None-Match, API version headers, …) except User-Agent and tracing
// headers. Requests coalesce while the first one waits for quota and for
// the upstream's response header, which is where the time goes. If others
// joined by then, an answer of up to Options.CoalesceLimit bytes is read
// into memory and each client gets a copy; a larger answer, or a
// server-sent event stream, streams to the first client and the others
// send their own request. An answer nobody else asked for streams as it
// comes, without being held. The shared request continues while any client
// still waits for it.
//
// # Pass-through
//
// With Options.PassThrough, a client may send its own token in the
// provider's auth header (Authorization: Bearer T for GitHub,
// PRIVATE-TOKEN: T for GitLab); the gateway forwards that header as it
// came, instead of adding one of its tokens, and keeps one rate-keeping
// transport per client token, built like its own and sharing its quota
// state, cache, database and metrics. The client's token is thus a
// credential like any other: its owner is learnt before first use (tokens
// of one account share one bucket, also with the gateway's own tokens of
// that account), it is paced and refused with 429 like the others, and it
// appears in /status and on the dashboard, masked ("#3 …ab12", numbered
// after the configured credentials). Clients are separate parties to the
// cache: an answer marked Cache-Control: private to a client's token is
// revalidated only with tokens of the same owner, and clients never
// revalidate the private answers to the gateway's own tokens (whose
// stored header fields describe those tokens); public answers are shared
// by all. Tokens are held in memory only and
// keyed by SHA-256; the least recently used beyond Options.MaxPassThrough
// are forgotten. A token the provider rejects gets 401, is forgotten, and
// is then refused by the gateway itself (401, "token_refused") for
// Options.PassThroughRefusal (10 min) instead of being sent upstream again:
// a client retrying a revoked token, or someone trying made-up ones, does
// not make the gateway's address a source of failed logins. Requests
// without a token use the gateway's credentials.
//
// # Security
//
//   - Not an open proxy: only origin-form request targets (/path) are
//     served; absolute URLs (GET http://host/ HTTP/1.1) and CONNECT are
//     refused with 400 and 405, and the upstream URL is always a
//     configured base URL plus the path.
//   - Paths that could mean something else upstream are refused with 400:
//     "." and ".." segments, empty segments, backslashes, %2e, %5c, %25
//     (double encoding), encoded control characters, malformed escapes,
//     and %2F except for GitLab, whose API uses it in project and file
//     paths (and even then no decoded piece may be a dot segment).
//   - Tokens in the query (private_token, access_token, job_token; token
//     for Gitea) are refused with 400, so none bypasses the accounting or
//     lands in a log. Without pass-through, every credential header a
//     client sends is removed before the gateway adds its own.
//   - Client keys (Options.Keys, see ParseKeys for the file format) are
//     required on every route but /healthz, /readyz and /assets/ when configured,
//     and Serve refuses to listen anywhere but loopback without them. A
//     client sends its key in X-Ratekeeper-Key; without pass-through also
//     as its "token" (Authorization: Bearer KEY, or the provider's auth
//     header); the dashboard accepts HTTP Basic with the key as password.
//     Keys are kept as SHA-256 digests and compared in constant time.
//   - Tokens and keys never appear in responses, logs, /status, metrics or
//     the dashboard: credentials are shown masked, errors name no token.
//   - Request bodies are limited (Options.MaxBody; 413 beyond) and read
//     whole before going upstream, so a body can be sent again after a
//     rate-limit refusal. The client key is checked before the body is
//     read; a request without a valid key gets 401 and its connection is
//     closed, its body unread.
//   - Slow clients cannot hold the gateway: a request header must arrive
//     within 10 s and a body within Options.ReadTimeout (408 beyond, and
//     the connection closed). Connections that have sent no request yet
//     (with keys: no valid key) are bounded per client address
//     (Options.MaxPendingPerAddress: a new one closes the oldest that has
//     waited a second), so that slow clients lose their own connections
//     rather than lock others out; with keys, Serve also keeps at most
//     Options.MaxUnauthenticated of them in all (503 for more). Refusals
//     are counted by reason in /metrics and logged, a line per reason at
//     most every 10 s.
//   - The dashboard sends a Content-Security-Policy that allows only its
//     own embedded assets, and X-Frame-Options: DENY.
//
// # Endpoints
//
//	/          dashboard: per provider, credential and resource, the remaining
//	           quota against the limit, time to reset, state and health; a chart
//	           of requests, waits and 429s per minute over the last hour
//	/status    transport.StatusReport as JSON, as `ratekeeper status --json`
//	           prints it (?provider=NAME narrows it)
//	/metrics   Prometheus: the transport's ratekeeper_* metrics and the
//	           gateway's ratekeeper_gateway_* metrics
//	/healthz   200 {"status":"ok"} while serving; needs no key
//	/readyz    200 "ready" when the database answers and each provider has a
//	           token its server has not rejected, else 503 "not ready: " and
//	           why (Gateway.Ready); needs no key
//
// Layer 5 of docs/architecture.md: it owns serving the client over HTTP and
// each request's whole wait for quota, and must not be an open proxy.
package gateway
