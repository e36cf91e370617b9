// Package sim simulates rate-limited APIs — GitHub, GitLab, Hugging Face,
// Gitea/Forgejo, OpenAI and Anthropic — faithfully enough to test, demonstrate and benchmark a
// rate-limit client offline, without spending anyone's real quota.
//
// It writes every provider's headers itself, from the providers'
// documentation, and shares no code with ratekeeper's client side: a
// simulator that used the client's parser would hide the parser's mistakes.
//
// # Use
//
//	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{
//		Dialect: sim.DialectGitHub,
//		Tokens:  []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}, {Token: "tok-alice-2", Owner: "alice"}},
//		Limit:   100, Window: time.Minute,
//	}}})
//	ts := httptest.NewServer(srv) // or `ratekeeper sim`
//	defer ts.Close()
//	... requests to ts.URL + "/repos/o/r" ...
//	st := srv.Stats() // per-bucket counters; st.Total.Violations should be 0
//
// A Server is an http.Handler with no goroutines of its own (no Close is
// needed). Its clock is time.Now plus the configured skew, so inside a
// testing/synctest bubble it runs on fake time; Server.Transport returns a
// RoundTripper that serves requests in-process, without sockets, for such
// tests. Server.Reach does either for a client — a loopback port with its
// own RoundTripper, or in-process — and hands back the root URL and how to
// stop it (the demo and the benchmark use it). Server.Stats, Server.Touch,
// Server.Reset and Server.APIs are the Go side of the control endpoints
// below.
//
// One server hosts several APIs, each mounted at a path prefix with its own
// dialect, tokens and limits; a client then points each provider at
// ts.URL + prefix (e.g. github=http://127.0.0.1:PORT/github). A config with a
// single API mounts it at "/" unless it says otherwise.
//
// # Buckets
//
// A bucket is (API, owner, resource). Tokens with the same Owner share the
// owner's buckets (all personal tokens of one GitHub user share one 5,000/h
// bucket); each token without an Owner is its own owner "user<N>". Requests
// without a token use one bucket per client IP with the anonymous limits.
// An unknown token is answered 401 with the dialect's body and counted (not
// charged) on the client IP's anonymous bucket.
//
// A window is either rolling — it opens at the first request after the
// previous one ended and resets one window later, as GitHub — or fixed —
// aligned on multiples of its length since the Unix epoch, as Hugging Face's
// 5-minute windows and GitLab's Rack::Attack periods. Windows are whole
// seconds, computed on the server's skewed clock, and so are the reset times
// the headers carry.
//
// A request that arrives when its bucket is empty is refused (a violation)
// with ExhaustedStatus and the dialect's body; a free request is still
// served: GitHub's GET /rate_limit, and a 304 where 304s are free. GitLab
// counts refused requests as used, as Rack::Attack does (Observed goes
// above Limit); the others do not.
//
// Secondary limits (SecondaryConfig) are kept per owner across all of its
// resources: MaxConcurrent requests in flight, PointsPerMinute over any
// sliding 60 seconds (GET/HEAD/OPTIONS and GraphQL queries 1 point, other
// methods and GraphQL mutations 5; GraphQL in a budget of its own when
// GraphQLPointsPerMinute is set), and WriteSpacing between two writes.
// Tripping one starts a Penalty during which every request of the owner is
// refused (each a violation) with Status and, if RetryAfter, a retry-after
// of the seconds left. GitHub's defaults apply when Secondary is nil: 100
// concurrent, 900 points a minute for REST and 2,000 for GraphQL, 60 s
// penalty with retry-after, 403.
//
// Endpoint limits (EndpointLimitConfig, [[apis.endpoint_limits]]) are
// limits that announce nothing while they admit, as GitLab's Users,
// Projects and Groups API limits (GitLabUsersAPILimits has the Users
// API's), GitHub's unpublished ones, or a custom host's. Each is a path
// pattern ("[METHOD ]PATH"; "*" one segment, "**" one or more; the first
// matching limit counts), a limit per window (fixed by default) counted
// per owner (per client IP without a token) after the main limit admitted
// the request, and a refusal kind: "headers" (429, Retry-After and that
// limit's own rate-limit headers: GitLab's RateLimit-Name, -Limit,
// -Observed, -Remaining 0, -Reset, -ResetTime), "retry-after" (429 and
// Retry-After only), "bare" (429 with no header at all, as gitlab.com
// sometimes answers) or "plain" (429 text/plain "Retry later", as GitLab
// Dedicated). A success answer carries the main resource's headers only.
// UsersThrottle is a ready-made config of such a limit beside ordinary
// work (testdata/users-throttle*.toml are its files).
//
// Early retries: every scope that refuses — a bucket, an owner's
// secondary-limit penalty, an owner's endpoint limit — remembers the time
// its last refusal named, and a request that arrives at it after the
// refusal and before that time is an early retry (Counters.EarlyRetries,
// per bucket, per endpoint limit, per API and in total). The time named
// is the end of the refused window (which Retry-After rounds up to whole
// seconds), the end of a secondary penalty sent with Retry-After, and for
// a refusal that names none GitHubSecondaryWait (GitHub's "at least a
// minute") after a GitHub secondary refusal, MinRetryWait (1 s) after any
// other. The server judges by arrival, from when the refusal's answer left
// (the configured latency delays answers; requests arrive at once): a
// request arriving after that was sent by a client that could know of the
// refusal, while one arriving as the answer was still on its way was in
// flight, and is not counted.
//
// Conditional requests: every GET answer carries an ETag, computed as each
// API computes it: GitHub's is W/" + hex SHA-256 of the request's Accept,
// Authorization and Cookie values, each followed by ":" and only when
// present, then the body + " (so it differs per token, as api.github.com's
// do); GitLab's (Rack::ETag) the first 32 hex digits of the body's
// SHA-256; Hugging Face's API (Express) the length in hex and the body's
// base64 SHA-1; its resolver and Gitea's a strong tag of the content's
// hash. Answers say how long they may be cached as each API does: GitHub
// Cache-Control: private, max-age=60, s-maxage=60 to a token (public, to
// an anonymous request), GitLab and Gitea max-age=0, private,
// must-revalidate. If-None-Match with a matching tag is answered 304 without a body
// (free on GitHub, as documented; charged elsewhere unless
// FreeNotModified). Content changes
// when it is touched (POST /_sim/touch or Server.Touch), when a write
// creates something (POST .../issues also changes the issue list and the
// repository's events), and for events feeds every EventsEvery.
//
// GitHub Apps (AppConfig, github dialect): a request carrying a JWT
// (RS256, checked against the App's public key: iss the App's id, at most
// ten minutes between iat and exp) reaches the App's endpoints and spends
// the App's own budget: GET /app (the App), GET /app/installations (its
// installations with their accounts, paged), GET /repos/O/R/installation
// (and /orgs/O/installation, /users/U/installation; 404 where it is not
// installed), POST /app/installations/ID/access_tokens (a long ghs_ token
// that expires after TokenLifetime, an hour by default). An installation
// is an owner with its own budget (InstallationLimit: 5,000 an hour plus
// 50 per repository and per user beyond 20, up to 12,500; or Limit), and
// its tokens see only its account's repositories; those are private: any
// other token asking for them gets a 404, charged, as does a token limited
// to some accounts (TokenConfig.Accounts, a fine-grained token) asking
// elsewhere; but a GitHub repository whose name begins with "public-" is
// public, read by every token. Counters.Hidden counts those 404s, Counters.ExpiredTokens the
// 401s for an expired installation token, Stats.Apps each installation's
// mints.
//
// Faults (FaultConfig) are drawn per request from Config.Seed: the n-th
// request to an API gets the same fault for the same seed. They come after
// authentication and before any quota is spent: 500/502/504 without
// Retry-After, 503 with Retry-After, a dropped connection (hijacked and
// closed; with a ResponseWriter that cannot be hijacked, ServeHTTP panics
// with http.ErrAbortHandler, which net/http turns into a closed connection
// and Transport into an error), or a slow answer (SlowDelay, then normal).
// BareRefusalAt answers one request, the N-th, as a proxy or an abuse
// filter in front of the API would: a 429 (or 403) HTML page with no
// rate-limit header, charging nothing; requests to the refused bucket in
// the next GitHubSecondaryWait (github) or MinRetryWait (others) are early
// retries. Latency delays every answer.
//
// # Dialects and their headers
//
// github (docs.github.com, "Rate limits for the REST API"):
//
//	x-ratelimit-limit: 5000
//	x-ratelimit-remaining: 4999
//	x-ratelimit-used: 1
//	x-ratelimit-reset: 1700000000        (Unix seconds)
//	x-ratelimit-resource: core           (core, search, code_search, graphql)
//
// Defaults: core 5,000/h (anonymous 60/h per IP), search 30/min (anonymous
// 10), code_search 10/min and graphql 5,000/h (both need a token), rolling
// windows; exhausted 403 with {"message":"API rate limit exceeded for user ID
// N. If you reach out to GitHub Support…","documentation_url":
// "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
// "status":"403"} (for an IP: "API rate limit exceeded for 127.0.0.1. (But
// here's the good news: …)"); GraphQL exhaustion is a 200 with a
// RATE_LIMITED error, as documented. A GraphQL query costs points, as
// GitHub documents: each connection (a field with first or last) needs one
// request per node of the connections above it (one at the top level);
// the sum ÷ 100, rounded, at least 1. x-ratelimit-used and -remaining of
// the graphql resource count those points, and a query the points left
// cannot pay is refused. Secondary refusals say "You have
// exceeded a secondary rate limit. Please wait a few minutes before you try
// again." with the #about-secondary-rate-limits documentation_url.
// Authentication: "Authorization: token T", "Bearer T", or Basic with T as
// the password (or the user name); bad tokens get
// {"message":"Bad credentials",…}. Endpoints:
//
//	GET  /rate_limit                      free; every resource, plus "rate"
//	GET  /user                            the token's owner (needs a token)
//	GET  /users/{u}
//	GET  /users/{u}/events, /events, /repos/{o}/{r}/events   X-Poll-Interval
//	GET  /repos/{o}/{r}
//	GET  /repos/{o}/{r}/readme            JSON with base64 content; raw text
//	                                      with Accept: application/vnd.github.raw
//	GET  /repos/{o}/{r}/issues            Link pagination (per_page ≤ 100, page)
//	POST /repos/{o}/{r}/issues            201; a write (5 points)
//	GET  /search/repositories|issues|users|commits|topics|labels   search
//	GET  /search/code                     code_search
//	POST /graphql                         graphql: viewer, user(login),
//	                                      repository(owner, name) with issues,
//	                                      labels, comments and repositories as
//	                                      connections (first/last ≤ 100,
//	                                      after/before cursors, pageInfo,
//	                                      totalCount), rateLimit { limit cost
//	                                      remaining used resetAt nodeCount };
//	                                      a mutation of any name answers its
//	                                      clientMutationId
//
// gitlab (GitLab docs "User and IP rate limits", and the headers of
// Gitlab::RackAttack):
//
//	RateLimit-Name: throttle_authenticated_api   (throttle_unauthenticated_api without a token)
//	RateLimit-Limit: 2000      (the limit scaled to 60 s, rounded up, as GitLab does)
//	RateLimit-Observed: 1      (requests in the period, this one included)
//	RateLimit-Remaining: 1999
//	RateLimit-Reset: 1700000040                       (Unix seconds)
//	RateLimit-ResetTime: Tue, 14 Nov 2023 22:14:00 GMT   (429 only)
//	Retry-After: 20                                      (429 only)
//
// Defaults: 2,000/min per user, 500/min per IP, fixed windows; exhausted 429
// with the plain-text body "Retry later". Authentication: PRIVATE-TOKEN,
// "Authorization: Bearer T", or ?private_token=. Endpoints (IDs are numbers
// or URL-encoded paths like group%2Fproject; file paths are URL-encoded):
//
//	GET /api/v4/user
//	GET /api/v4/users/{id}, /api/v4/users/{id}/followers|following|status|keys|gpg_keys
//	GET /api/v4/projects/{id}
//	GET /api/v4/projects/{id}/repository/files/{path}?ref=main   JSON, base64
//	GET /api/v4/projects/{id}/repository/files/{path}/raw
//	GET /api/v4/projects/{id}/merge_requests   X-Page, X-Per-Page, X-Total,
//	                                           X-Total-Pages, X-Next-Page,
//	                                           X-Prev-Page, Link
//
// huggingface (Hub docs "Hub Rate limits"; IETF draft RateLimit fields):
//
//	RateLimit: "api";r=999;t=212                      (remaining; seconds to reset)
//	RateLimit-Policy: "fixed window";"api";q=1000;w=300
//
// Resources api (/api/...), resolvers (any path with /resolve/) and pages
// (anything else). Defaults per 5-minute fixed window: api 1,000 (anonymous
// 500), resolvers 5,000 (3,000), pages 200 (100); exhausted 429 with
// {"error":"We had to rate limit you, you hit the quota of …"}.
// Authentication: "Authorization: Bearer T". Endpoints:
//
//	GET /api/whoami-v2
//	GET /api/models/{o}/{m}, /api/datasets/{o}/{d}
//	GET /{o}/{m}/resolve/{rev}/{path}, /datasets/{o}/{d}/resolve/{rev}/{path}
//	                                  (README.md, config.json, any file; X-Repo-Commit)
//
// gitea (also forgejo, codeberg): Gitea and Forgejo have no API rate limit
// and send no rate-limit headers; public instances limit in a reverse proxy
// (Codeberg: Caddy), which answers 429 with Retry-After and an empty body.
// So by default nothing is limited and no header is sent; with a Limit the
// dialect refuses like that proxy, and only with RateLimitHeaders does it
// send X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (Unix
// seconds) — the conservative trio most clients understand. Authentication:
// "Authorization: token T" or "Bearer T", or ?access_token=. Endpoints:
//
//	GET  /api/v1/user, /api/v1/users/{u}
//	GET  /api/v1/repos/{o}/{r}
//	GET  /api/v1/repos/{o}/{r}/raw/{path}, /api/v1/repos/{o}/{r}/contents/{path}
//	GET  /api/v1/repos/{o}/{r}/issues      page, limit (≤ 50); X-Total-Count, Link
//	POST /api/v1/repos/{o}/{r}/issues
//
// Any other path gets the dialect's 404 body (and costs quota, as on the
// real servers). Every name "exists": content is synthetic, deterministic
// for a name and version.
//
// openai (platform.openai.com "Rate limits"): buckets of requests and
// tokens per organization (the token's owner, named in every answer's
// openai-organization), refilling continuously (WindowContinuous):
//
//	x-ratelimit-limit-requests: 500        x-ratelimit-limit-tokens: 200000
//	x-ratelimit-remaining-requests: 499    x-ratelimit-remaining-tokens: 199600
//	x-ratelimit-reset-requests: 120ms      x-ratelimit-reset-tokens: 120ms
//
// A reset is how long until the bucket is full again. A chat request is
// charged its prompt (counted by the model's own tokenizer, see below)
// plus max_tokens (max_completion_tokens; 4,096 when absent) on admission; an
// embeddings request its input. A refusal is a 429 with retry-after-ms,
// retry-after (whole seconds, rounded up) and {"error":{"message":"Rate
// limit reached … on tokens per min (TPM): Limit L, Used U, Requested R.
// Please try again in 2.4s. …","type":"tokens","code":
// "rate_limit_exceeded"}} (type "requests" for the requests bucket). Auth:
// "Authorization: Bearer KEY". Endpoints: POST /v1/chat/completions, POST
// /v1/embeddings, GET /v1/models; answers carry usage (prompt_tokens,
// completion_tokens). An overload fault answers 503 "The engine is
// currently overloaded".
//
// anthropic (docs.claude.com "Rate limits"): requests, input tokens and
// output tokens, each a continuous bucket, with RFC 3339 resets (when the
// bucket is full again):
//
//	anthropic-ratelimit-requests-limit / -remaining / -reset
//	anthropic-ratelimit-input-tokens-limit / -remaining / -reset
//	anthropic-ratelimit-output-tokens-limit / -remaining / -reset
//	anthropic-ratelimit-tokens-limit / -remaining / -reset   (the one of input and output with least left)
//
// Input tokens are charged on admission; output tokens are charged
// max_tokens then, and the answer's unused part is given back when it ends
// (after the latency), before the headers are written. A refusal is a 429
// rate_limit_error with retry-after in seconds; an overload fault a 529
// overloaded_error. Auth: x-api-key, and anthropic-version is required
// (400 without). Endpoints: POST /v1/messages (max_tokens required), GET
// /v1/models; answers carry usage (input_tokens, output_tokens).
//
// For both, APIConfig.Window scales every bucket (10s makes the minutes
// ten seconds), Resources names tokens, input_tokens and output_tokens, and
// OutputRatio sets how long answers are. Prompts are counted as no client
// can count them: each model gets a characters-per-token ratio between 3
// and 5 drawn from the seed, each text a factor of 0.9–1.1 drawn from its
// own hash, other scripts cost nearly a token a character, and each
// message 4 tokens of framing (3 more a request); the usage in answers
// states the count. A request early for a refused bucket (before the time
// the refusal named) counts as an early retry.
//
// # Control endpoints
//
//	GET  /_stats[?timeline=1]      Stats as JSON (per bucket: requests, accepted,
//	                               charged, not_modified, unauthorized, violations,
//	                               early_retries, max_in_flight…; per endpoint
//	                               limit and owner: requests, accepted, refused,
//	                               early_retries; per API and total;
//	                               timeline: accepted per second)
//	POST /_sim/touch?path=P        change the content at P (with the API prefix)
//	POST /_sim/reset               Server.Reset
//
// # Configuration
//
// Config is a Go struct and also a TOML or JSON file (LoadConfig); keys are
// the snake_case names below, durations are strings like "1h" or "90s".
// Zero values mean the provider's default. Validate names the field of every
// problem (unknown dialect, negative limits or windows, unknown keys…).
//
//	seed = 1                                  fault injection seed
//	[[apis]]
//	name, dialect, prefix                     dialect: github|gitlab|huggingface|gitea
//	require_auth                              401 for requests without a token
//	limit, window, window_mode                main resource; window_mode rolling|fixed
//	anonymous_limit                           per client IP
//	exhausted_status                          403 or 429
//	free_not_modified, rate_limit_headers     booleans overriding the dialect
//	poll_interval, events_every               events feeds
//	skew, latency                             server clock offset; added delay
//	[[apis.tokens]] token, owner, user_id, limit
//	[apis.resources.NAME] limit, window, window_mode, anonymous_limit
//	[apis.secondary] max_concurrent, points_per_minute,
//	                 graphql_points_per_minute, write_spacing, penalty,
//	                 retry_after, status
//	[apis.faults] error_rate, unavailable_rate, unavailable_retry_after,
//	              drop_rate, slow_rate, slow_delay,
//	              bare_refusal_at, bare_refusal_status
//	[[apis.endpoint_limits]] pattern, name, limit, anonymous_limit, window,
//	                         window_mode, refusal (headers|retry-after|bare|plain)
//
// Layer 0 of docs/architecture.md: it owns the simulated APIs, and must not
// import any ratekeeper package (a simulator sharing the client's parser
// would hide its mistakes).
package sim
