package ratekeeper

import "github.com/ratekeeper/ratekeeper/wiring"

// Options configure a client. The zero value uses the built-in providers,
// tokens from the environment, the greedy policy and memory state.
//
// Options is the wiring's own options type, so that the same value goes to
// NewClient, NewTransport and GatewayOptions.Client. Its fields, as that
// type declares them (options_doc_test.go keeps this copy the same):
//
//	type Options struct {
//		// ConfigFile is an optional TOML file describing providers (see
//		// package provider).
//		ConfigFile string
//		// Providers add or move providers, as the --provider flag does:
//		// "NAME=BASEURL", e.g. "ghe=https://ghe.example.com/api/v3" or
//		// "github=http://127.0.0.1:8080/github" for a simulator.
//		Providers []string
//		// Tokens gives each named provider's tokens instead of its
//		// environment variables.
//		Tokens map[string][]string
//		// Policy is "greedy" (default: finish as fast as the quota allows),
//		// "spread" or "adaptive" (keep quota for other work).
//		Policy string
//		// Reserve is the number of requests kept back in every bucket, or
//		// ReservePercent the percentage of each bucket's own limit (at least
//		// 0, below 100); set one or the other. A count must stay below every
//		// bucket's limit: a request to a resource whose limit it reaches fails
//		// with a *ReserveError naming the resource (GitHub's search
//		// allows 30 a minute, so Reserve 100 leaves nothing of it), where a
//		// percentage always leaves something.
//		Reserve        int
//		ReservePercent float64
//		// Velocity, MinInterval, MaxInterval and Burst tune the policy for
//		// every provider whose configuration does not set its own: how much
//		// faster than budget ÷ time to reset spread sends (default 1.5); the
//		// least time between two requests of a bucket, under any policy; the
//		// most spread or adaptive put between two (default 1m); how many may
//		// go back to back before the spacing applies.
//		Velocity                 float64
//		MinInterval, MaxInterval time.Duration
//		Burst                    int
//		// MaxWait is the longest a request waits for quota (default 5m).
//		MaxWait time.Duration
//		// ScopeMaxWait, when shorter, bounds a wait for a scope's pause — a
//		// limit the server does not announce, while the request's own bucket
//		// could serve — so that a durable worker turns it into a durable sleep
//		// and serves the rest of the API meanwhile (see
//		// transport.Options.ScopeMaxWait). Zero: MaxWait.
//		ScopeMaxWait time.Duration
//		// MaxPause caps every pause a server's answer imposes: a Retry-After
//		// on any status, a secondary-limit penalty (default 1h). A proxy's
//		// "Retry-After: 86400" then stops a bucket for an hour, not a day.
//		MaxPause time.Duration
//		// SecondaryWait is the first pause after a secondary-limit refusal
//		// that does not say when to come back (no Retry-After); it doubles,
//		// with jitter, at each new strike (default 60s, GitHub's documented
//		// minimum).
//		SecondaryWait time.Duration
//		// NoAutoHosts: a host no provider owns gets no token from a variable
//		// named after it and no default pacing (transport.NoAutoProviders);
//		// the config file's auto_hosts = false does the same.
//		NoAutoHosts bool
//		// Timeout bounds each request including its waits (0: none).
//		Timeout time.Duration
//		// Base sends the requests (default: a clone of http.DefaultTransport).
//		Base http.RoundTripper
//		// DB shares quota state, what is known of each credential and the
//		// conditional-request cache with every process using the same
//		// database: a SQLite file path for processes on one machine, or a
//		// postgres:// URL for a fleet. "" or "memory" keeps them in this
//		// process. Close the transport to release the database.
//		DB string
//		// DBOutageTimeout is how long DB may be away (restarting, its
//		// connections lost, SQLite's write lock held by another process)
//		// before a call on it gives up: meanwhile every call waits for it to
//		// come back, trying again with backoff and jitter (default
//		// store.DefaultOutageTimeout, 2m; negative: no wait).
//		DBOutageTimeout time.Duration
//		// CacheBytes bounds the conditional-request cache (default 64 MiB).
//		CacheBytes int64
//		// AlwaysRevalidate: never serve a stored answer without asking the
//		// server, even while it is fresh for its max-age (see
//		// cache.Options.AlwaysRevalidate).
//		AlwaysRevalidate bool
//		// State overrides where quota state is kept.
//		State transport.State
//		// Logger receives debug logs, with masked credentials only.
//		Logger *slog.Logger
//		// OnEvent is told about waits, refusals, invalid credentials, retries.
//		OnEvent func(transport.Event)
//		// Registerer receives the Prometheus collectors (nil: none).
//		Registerer prometheus.Registerer
//		// UpstreamRateLimitHeaders delivers answers with the server's own
//		// rate-limit fields. By default they say what the pool of tokens can
//		// still do — limit and remaining summed over its distinct buckets less
//		// the reserve, the soonest reset — so that a client keeping its own
//		// view of the limit (go-github, octokit's throttling) does not stop
//		// while another token could serve; the server's values are then under
//		// X-Ratekeeper-Upstream-NAME (see transport.HeaderUpstreamPrefix).
//		UpstreamRateLimitHeaders bool
//		// TracerProvider makes a span for each request (see
//		// transport.SpanRequest: provider, bucket, wait, attempts, status,
//		// the credential masked) as a child of the span in the request's
//		// context; nil means otel.GetTracerProvider(), which records nothing
//		// unless the program set one. The gateway's server spans come from
//		// it too.
//		TracerProvider trace.TracerProvider
//		// Propagator puts the trace context on what goes upstream and, in the
//		// gateway, reads a client's traceparent; nil means
//		// otel.GetTextMapPropagator(), which does neither unless the program
//		// set one.
//		Propagator propagation.TextMapPropagator
//		// Tune sets anything else transport.Options offers; it runs last.
//		Tune func(*transport.Options)
//	}
type Options = wiring.Options
