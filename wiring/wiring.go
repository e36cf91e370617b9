// Package wiring turns plain options (providers, config file, tokens,
// policy, database) into a built rate-keeping transport. It is the one
// place that wiring lives: the root package's NewTransport, the gateway,
// the demo and the CLI all build their transports here.
//
// Layer 4 of docs/architecture.md: it owns that assembly and nothing else;
// it must not pace, parse headers or serve.
package wiring

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratekeeper/ratekeeper/cache"
	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/transport"
)

// Options configure a client. The zero value uses the built-in providers,
// tokens from the environment, the greedy policy and memory state.
type Options struct {
	// ConfigFile is an optional TOML file describing providers (see
	// package provider).
	ConfigFile string
	// Providers add or move providers, as the --provider flag does:
	// "NAME=BASEURL", e.g. "ghe=https://ghe.example.com/api/v3" or
	// "github=http://127.0.0.1:8080/github" for a simulator.
	Providers []string
	// Tokens gives each named provider's tokens instead of its
	// environment variables.
	Tokens map[string][]string
	// Policy is "greedy" (default: finish as fast as the quota allows),
	// "spread" or "adaptive" (keep quota for other work).
	Policy string
	// Reserve is the number of requests kept back in every bucket, or
	// ReservePercent the percentage of each bucket's own limit (at least
	// 0, below 100); set one or the other. A count must stay below every
	// bucket's limit: a request to a resource whose limit it reaches fails
	// with a *ReserveError naming the resource (GitHub's search
	// allows 30 a minute, so Reserve 100 leaves nothing of it), where a
	// percentage always leaves something.
	Reserve        int
	ReservePercent float64
	// Velocity, MinInterval, MaxInterval and Burst tune the policy for
	// every provider whose configuration does not set its own: how much
	// faster than budget ÷ time to reset spread sends (default 1.5); the
	// least time between two requests of a bucket, under any policy; the
	// most spread or adaptive put between two (default 1m); how many may
	// go back to back before the spacing applies.
	Velocity                 float64
	MinInterval, MaxInterval time.Duration
	Burst                    int
	// MaxWait is the longest a request waits for quota (default 5m).
	MaxWait time.Duration
	// ScopeMaxWait, when shorter, bounds a wait for a scope's pause — a
	// limit the server does not announce, while the request's own bucket
	// could serve — so that a durable worker turns it into a durable sleep
	// and serves the rest of the API meanwhile (see
	// transport.Options.ScopeMaxWait). Zero: MaxWait.
	ScopeMaxWait time.Duration
	// MaxPause caps every pause a server's answer imposes: a Retry-After
	// on any status, a secondary-limit penalty (default 1h). A proxy's
	// "Retry-After: 86400" then stops a bucket for an hour, not a day.
	MaxPause time.Duration
	// SecondaryWait is the first pause after a secondary-limit refusal
	// that does not say when to come back (no Retry-After); it doubles,
	// with jitter, at each new strike (default 60s, GitHub's documented
	// minimum).
	SecondaryWait time.Duration
	// NoAutoHosts: a host no provider owns gets no token from a variable
	// named after it and no default pacing (transport.NoAutoProviders);
	// the config file's auto_hosts = false does the same.
	NoAutoHosts bool
	// Timeout bounds each request including its waits (0: none).
	Timeout time.Duration
	// Base sends the requests (default: a clone of http.DefaultTransport).
	Base http.RoundTripper
	// DB shares quota state, what is known of each credential and the
	// conditional-request cache with every process using the same
	// database: a SQLite file path for processes on one machine, or a
	// postgres:// URL for a fleet. "" or "memory" keeps them in this
	// process. Close the transport to release the database.
	DB string
	// DBOutageTimeout is how long DB may be away (restarting, its
	// connections lost, SQLite's write lock held by another process)
	// before a call on it gives up: meanwhile every call waits for it to
	// come back, trying again with backoff and jitter (default
	// store.DefaultOutageTimeout, 2m; negative: no wait).
	DBOutageTimeout time.Duration
	// CacheBytes bounds the conditional-request cache (default 64 MiB).
	CacheBytes int64
	// AlwaysRevalidate: never serve a stored answer without asking the
	// server, even while it is fresh for its max-age (see
	// cache.Options.AlwaysRevalidate).
	AlwaysRevalidate bool
	// State overrides where quota state is kept.
	State transport.State
	// Logger receives debug logs, with masked credentials only.
	Logger *slog.Logger
	// OnEvent is told about waits, refusals, invalid credentials, retries.
	OnEvent func(transport.Event)
	// Registerer receives the Prometheus collectors (nil: none).
	Registerer prometheus.Registerer
	// UpstreamRateLimitHeaders delivers answers with the server's own
	// rate-limit fields. By default they say what the pool of tokens can
	// still do — limit and remaining summed over its distinct buckets less
	// the reserve, the soonest reset — so that a client keeping its own
	// view of the limit (go-github, octokit's throttling) does not stop
	// while another token could serve; the server's values are then under
	// X-Ratekeeper-Upstream-NAME (see transport.HeaderUpstreamPrefix).
	UpstreamRateLimitHeaders bool
	// TracerProvider makes a span for each request (see
	// transport.SpanRequest: provider, bucket, wait, attempts, status,
	// the credential masked) as a child of the span in the request's
	// context; nil means otel.GetTracerProvider(), which records nothing
	// unless the program set one. The gateway's server spans come from
	// it too.
	TracerProvider trace.TracerProvider
	// Propagator puts the trace context on what goes upstream and, in the
	// gateway, reads a client's traceparent; nil means
	// otel.GetTextMapPropagator(), which does neither unless the program
	// set one.
	Propagator propagation.TextMapPropagator
	// Tune sets anything else transport.Options offers; it runs last.
	Tune func(*transport.Options)
}

// Transport builds the rate-keeping transport from opts: Build, then
// transport.New; on failure the database Build opened is closed again.
func Transport(opts Options) (*transport.Transport, error) {
	to, err := Build(opts)
	if err != nil {
		return nil, err
	}
	t, err := transport.New(to)
	if err != nil && to.OnClose != nil {
		to.OnClose()
	}
	return t, err
}

// Build turns opts into the finished transport.Options, reporting bad
// configuration (an unknown policy, a malformed base URL, an empty or
// whitespace-padded token, an unusable database) as an error. Everything
// several transports must share to spend one quota together — providers,
// state, cache — is made here rather than left to transport.New, so that
// transports built from one result (the gateway's pass-through ones) share
// them. If the result is not given to a transport, call its OnClose to
// release the database.
func Build(opts Options) (transport.Options, error) {
	reg, noAuto, err := registry(opts)
	if err != nil {
		return transport.Options{}, err
	}
	to := transport.Options{
		Providers: reg,
		Base:      opts.Base,
		State:     opts.State,
		MaxWait:   opts.MaxWait,

		ScopeMaxWait: opts.ScopeMaxWait,
		MaxPause:     opts.MaxPause,
		Logger:       opts.Logger,
		OnEvent:      opts.OnEvent,

		NoAutoProviders:          noAuto,
		UpstreamRateLimitHeaders: opts.UpstreamRateLimitHeaders,
		TracerProvider:           opts.TracerProvider,
		Propagator:               opts.Propagator,
	}
	if to.Policy, err = policy(opts); err != nil {
		return transport.Options{}, err
	}
	if opts.MaxPause < 0 || opts.SecondaryWait < 0 {
		return transport.Options{}, fmt.Errorf("max pause %v, secondary wait %v: want positive durations (0 for the defaults)", opts.MaxPause, opts.SecondaryWait)
	}
	to.SecondaryWait = opts.SecondaryWait
	if to.Pools, err = pools(opts.Tokens, reg); err != nil {
		return transport.Options{}, err
	}
	if opts.Registerer != nil {
		m, err := transport.NewMetrics(opts.Registerer)
		if err != nil {
			return transport.Options{}, err
		}
		to.Metrics = m
	}
	cacheOpts := cache.Options{MaxBytes: opts.CacheBytes, Logger: opts.Logger, AlwaysRevalidate: opts.AlwaysRevalidate}
	if store.KindOf(opts.DB) != store.Memory {
		if err := openDatabase(opts, &to, &cacheOpts); err != nil {
			return transport.Options{}, err
		}
	}
	to.Cache = cache.New(cacheOpts)
	if to.State == nil {
		to.State = transport.NewMemoryState()
	}
	if opts.Tune != nil {
		opts.Tune(&to)
	}
	return to, nil
}

// registry is the built-in providers with the configuration file and the
// provider flags applied, in that order, so a flag overrides the file.
// noAuto reports whether hosts no provider owns are left alone, by the
// options or by the file's auto_hosts: false.
func registry(opts Options) (reg *provider.Registry, noAuto bool, err error) {
	reg = provider.Defaults()
	noAuto = opts.NoAutoHosts
	if opts.ConfigFile != "" {
		cfg, err := provider.LoadConfig(opts.ConfigFile)
		if err != nil {
			return nil, false, err
		}
		if err := reg.ApplyConfig(cfg); err != nil {
			return nil, false, err
		}
		if cfg.AutoHosts != nil && !*cfg.AutoHosts {
			noAuto = true
		}
	}
	for _, f := range opts.Providers {
		if err := reg.ApplyFlag(f); err != nil {
			return nil, false, err
		}
	}
	return reg, noAuto, nil
}

// policy is the default quota policy with the options' choices on top;
// a zero option keeps the default.
func policy(opts Options) (quota.Policy, error) {
	p := quota.DefaultPolicy()
	if opts.Policy != "" {
		k, err := quota.ParseKind(opts.Policy)
		if err != nil {
			return quota.Policy{}, fmt.Errorf("policy: %w", err)
		}
		p.Kind = k
	}
	if opts.Reserve < 0 {
		return quota.Policy{}, fmt.Errorf("reserve %d: want 0 or more requests", opts.Reserve)
	}
	p.Reserve, p.ReservePercent = int64(opts.Reserve), opts.ReservePercent
	p.Velocity = cmp.Or(opts.Velocity, p.Velocity)
	p.MinDelay = cmp.Or(opts.MinInterval, p.MinDelay)
	p.MaxDelay = cmp.Or(opts.MaxInterval, p.MaxDelay)
	p.Burst = opts.Burst
	if err := p.Validate(); err != nil {
		return quota.Policy{}, err
	}
	return p, nil
}

// pools makes one credential pool per provider named in byProvider (a
// provider given no token gets an anonymous credential), numbering the
// credentials in the order given.
func pools(byProvider map[string][]string, reg *provider.Registry) (map[string]*creds.Pool, error) {
	out := map[string]*creds.Pool{}
	for name, tokens := range byProvider {
		p, err := reg.Get(name)
		if err != nil {
			return nil, fmt.Errorf("tokens: %w", err)
		}
		var cs []*creds.Credential
		for i, tok := range tokens {
			source := fmt.Sprintf("Options.Tokens[%q] entry #%d", name, i+1)
			list, err := creds.ParseTokenList(source, tok)
			if err != nil {
				return nil, err
			}
			for _, t := range list {
				cs = append(cs, creds.NewToken(p.Name, len(cs)+1, t, source))
			}
		}
		if len(cs) == 0 {
			cs = append(cs, creds.NewAnonymous(p.Name, 1))
		}
		out[p.Name] = creds.NewPool(p.Name, cs...)
	}
	return out, nil
}

// openDatabase opens opts.DB and puts it behind the quota state (unless
// the options bring their own), the credentials' shared state and the
// cache; to.OnClose closes it.
func openDatabase(opts Options, to *transport.Options, cacheOpts *cache.Options) error {
	// Quota state and cached answers are advisory, rebuilt from the next
	// response: losing a server crash's last milliseconds costs nothing,
	// while waiting for the disk at every update slows every request of
	// the fleet. Tasks open their own sessions, durable.
	st, err := store.Open(context.Background(), opts.DB, store.Options{BlobLimit: opts.CacheBytes, Logger: opts.Logger, Advisory: true})
	if err != nil {
		return &DatabaseError{DSN: store.Redact(opts.DB), Err: err}
	}
	// A readiness probe asks the database itself, not through the wait
	// below: it must see an outage at once, not wait it out.
	raw := st
	to.Ping = func(ctx context.Context) error {
		if _, err := raw.Get(ctx, readyKey); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	}
	// Every call on the database, by the quota state, the credentials'
	// records and the cache, waits out an outage of it in one place.
	st = store.WaitOutages(st, store.SharedOutage(opts.DB, store.OutageOptions{Timeout: opts.DBOutageTimeout, Logger: opts.Logger}))
	shared := quotastate.New(st, opts.Logger)
	if to.State == nil {
		to.State = shared
	}
	to.Credentials = shared
	cacheOpts.Backend = st
	to.OnClose = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return errors.Join(shared.Close(ctx), st.Close())
	}
	return nil
}

// readyKey is the record a readiness probe reads: none is ever written
// there, so the read costs one lookup of a missing key.
const readyKey = "ratekeeper/ready"

// DatabaseError reports a database that cannot be used: unreachable, or at
// a newer schema version than this ratekeeper knows. DSN has its password
// masked.
type DatabaseError struct {
	DSN string
	Err error
}

func (e *DatabaseError) Error() string { return fmt.Sprintf("database %s: %v", e.DSN, e.Err) }

func (e *DatabaseError) Unwrap() error { return e.Err }
