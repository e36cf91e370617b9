// Package ratekeeper lets a program do lots of work against rate-limited
// APIs — GitHub, GitLab, Hugging Face, Codeberg/Gitea/Forgejo, any custom
// domain — as fast as the quota allows, without being throttled.
//
// NewClient returns an *http.Client whose transport reads every dialect of
// rate-limit headers, picks among several credentials the one that can go
// soonest, paces requests to spend the quota evenly, answers repeated GETs
// with free conditional requests, and retries what is safe to retry. Use it
// wherever an *http.Client goes, go-github included:
//
//	client := ratekeeper.NewClient(ratekeeper.Options{})
//	gh := github.NewClient(client)
//
// Tokens come from the environment (GITHUB_TOKEN, GH_TOKEN, GITLAB_TOKEN,
// HF_TOKEN, CODEBERG_TOKEN, …; several comma-separated) unless Options.Tokens
// gives them. Rotation is for distinct, legitimate quota sources — GitHub App
// installations, separate bot accounts, several providers: GitHub's terms
// forbid sharing tokens to exceed its limits, and all personal tokens of one
// user share one bucket anyway, which ratekeeper detects.
//
// When the wait for quota would exceed Options.MaxWait, a request fails with
// a *WaitError carrying when the quota returns (RetryAt), so a job can be
// rescheduled instead of blocking; package tasks does that automatically.
package ratekeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper/cache"
	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/kv"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sharedstate"
	"github.com/ratekeeper/ratekeeper/transport"
)

// WaitError is returned when quota returns later than the max wait.
type WaitError = transport.WaitError

// ReserveError is returned for a request to a resource whose whole bucket
// the configured reserve would take (see Options.Reserve).
type ReserveError = transport.ReserveError

// Event is what Options.OnEvent receives.
type Event = transport.Event

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
	// MaxWait is the longest a request waits for quota (default 5m).
	MaxWait time.Duration
	// MaxPause caps every pause a server's answer imposes: a Retry-After
	// on any status, a secondary-limit penalty (default 1h). A proxy's
	// "Retry-After: 86400" then stops a bucket for an hour, not a day.
	MaxPause time.Duration
	// SecondaryWait is the first pause after a secondary-limit refusal
	// that does not say when to come back (no Retry-After); it doubles,
	// with jitter, at each new strike (default 60s, GitHub's documented
	// minimum).
	SecondaryWait time.Duration
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
	// CacheBytes bounds the conditional-request cache (default 64 MiB).
	CacheBytes int64
	// State overrides where quota state is kept.
	State transport.State
	// Logger receives debug logs, with masked credentials only.
	Logger *slog.Logger
	// OnEvent is told about waits, refusals, invalid credentials, retries.
	OnEvent func(Event)
	// Registerer receives the Prometheus collectors (nil: none).
	Registerer prometheus.Registerer
	// Tune sets anything else transport.Options offers; it runs last.
	Tune func(*transport.Options)
}

// NewTransport builds the rate-keeping http.RoundTripper, reporting bad
// configuration (an unknown policy, a malformed base URL, an empty or
// whitespace-padded token) as an error.
func NewTransport(opts Options) (*transport.Transport, error) {
	reg := provider.Defaults()
	if opts.ConfigFile != "" {
		cfg, err := provider.LoadConfig(opts.ConfigFile)
		if err != nil {
			return nil, err
		}
		if err := reg.ApplyConfig(cfg); err != nil {
			return nil, err
		}
	}
	for _, f := range opts.Providers {
		if err := reg.ApplyFlag(f); err != nil {
			return nil, err
		}
	}
	to := transport.Options{
		Providers: reg,
		Base:      opts.Base,
		State:     opts.State,
		MaxWait:   opts.MaxWait,
		MaxPause:  opts.MaxPause,
		Logger:    opts.Logger,
		OnEvent:   opts.OnEvent,
		Pools:     map[string]*creds.Pool{},
	}
	to.Policy = quota.DefaultPolicy()
	if opts.Policy != "" {
		k, err := quota.ParseKind(opts.Policy)
		if err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		to.Policy.Kind = k
	}
	if opts.Reserve < 0 {
		return nil, fmt.Errorf("reserve %d: want 0 or more requests", opts.Reserve)
	}
	to.Policy.Reserve, to.Policy.ReservePercent = int64(opts.Reserve), opts.ReservePercent
	if err := to.Policy.Validate(); err != nil {
		return nil, err
	}
	if opts.MaxPause < 0 || opts.SecondaryWait < 0 {
		return nil, fmt.Errorf("max pause %v, secondary wait %v: want positive durations (0 for the defaults)", opts.MaxPause, opts.SecondaryWait)
	}
	to.SecondaryWait = opts.SecondaryWait
	for name, tokens := range opts.Tokens {
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
		to.Pools[p.Name] = creds.NewPool(p.Name, cs...)
	}
	if opts.Registerer != nil {
		m, err := transport.NewMetrics(opts.Registerer)
		if err != nil {
			return nil, err
		}
		to.Metrics = m
	}
	cacheOpts := cache.Options{MaxBytes: opts.CacheBytes, Logger: opts.Logger}
	if opts.DB != "" && opts.DB != "memory" {
		st, err := kv.Open(context.Background(), stateDSN(opts.DB), kv.Options{BlobLimit: opts.CacheBytes, Logger: opts.Logger})
		if err != nil {
			return nil, &DatabaseError{DSN: redactDSN(opts.DB), Err: err}
		}
		shared := sharedstate.New(st, opts.Logger)
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
	}
	to.Cache = cache.New(cacheOpts)
	if opts.Tune != nil {
		opts.Tune(&to)
	}
	t, err := transport.New(to)
	if err != nil && to.OnClose != nil {
		to.OnClose()
	}
	return t, err
}

// DatabaseError reports a database that cannot be used: unreachable, or at
// a newer schema version than this ratekeeper knows. DSN has its password
// masked.
type DatabaseError struct {
	DSN string
	Err error
}

func (e *DatabaseError) Error() string { return fmt.Sprintf("database %s: %v", e.DSN, e.Err) }

func (e *DatabaseError) Unwrap() error { return e.Err }

// stateDSN turns off synchronous commit for the quota state's PostgreSQL
// sessions (unless the DSN says otherwise): quota state is advisory and
// rebuilt from the next response, so losing its last milliseconds in a
// server crash costs nothing, while waiting for the disk on every update
// slows every request of the fleet. Tasks open their own sessions with
// the DSN as given, and stay durable.
func stateDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return dsn
	}
	q := u.Query()
	if q.Get("synchronous_commit") != "" {
		return dsn
	}
	q.Set("synchronous_commit", "off")
	u.RawQuery = q.Encode()
	return u.String()
}

// redactDSN masks a password in a database URL.
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		return u.Redacted()
	}
	return dsn
}

// NewClient returns an *http.Client whose requests are paced and retried by
// a rate-keeping transport (see NewTransport). If the options are invalid,
// every request made with the client fails with the configuration error;
// call NewTransport to see it at once.
func NewClient(opts Options) *http.Client {
	t, err := NewTransport(opts)
	if err != nil {
		return &http.Client{Transport: failing{err}, Timeout: opts.Timeout}
	}
	return &http.Client{Transport: t, Timeout: opts.Timeout}
}

// failing is the transport of a client built from invalid options.
type failing struct{ err error }

func (f failing) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	return nil, fmt.Errorf("ratekeeper: invalid client options: %w", f.err)
}
