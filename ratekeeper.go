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
//
// NewBatch sends many requests through the transport with a bounded
// number in flight, so that a request waiting for one bucket never holds
// back another's (see package batch).
//
// NewGateway serves the same client to programs in any language, as
// `ratekeeper serve` does.
//
// This package is a façade: the wiring lives in package wiring, the
// parts in their own packages (see docs/architecture.md). It must hold no
// logic of its own beyond naming them.
package ratekeeper

import (
	"context"
	"fmt"
	"net/http"

	"github.com/ratekeeper/ratekeeper/batch"
	"github.com/ratekeeper/ratekeeper/gateway"
	"github.com/ratekeeper/ratekeeper/transport"
	"github.com/ratekeeper/ratekeeper/wiring"
)

// WaitError is returned when quota returns later than the max wait.
type WaitError = transport.WaitError

// ReserveError is returned for a request to a resource whose whole bucket
// the configured reserve would take (see Options.Reserve).
type ReserveError = transport.ReserveError

// DatabaseError reports a database that cannot be used: unreachable, or at
// a newer schema version than this ratekeeper knows. DSN has its password
// masked.
type DatabaseError = wiring.DatabaseError

// Event is what Options.OnEvent receives.
type Event = transport.Event

// CostHeader is the request header in which a caller gives a request's
// exact cost: a number, in the units of the bucket that paces it (a
// language model's tokens), or each bucket's by name
// ("input-tokens=1200, output-tokens=300"); it is removed before the
// request is sent.
const CostHeader = transport.CostHeader

// Costs is what a request takes of each bucket, by name: "requests",
// "tokens", "input-tokens", "output-tokens", "points"; "" is the bucket
// that paces it.
type Costs = transport.Costs

// WithCost returns a context under which a request costs n units (tokens)
// of the bucket that paces it, instead of ratekeeper's estimate (a
// prompt's tokens as answers taught them, plus max_tokens).
func WithCost(ctx context.Context, n int64) context.Context { return transport.WithCost(ctx, n) }

// WithCosts returns a context under which a request costs what costs
// names of each bucket it is charged from, instead of the estimates:
// WithCosts(ctx, ratekeeper.Costs{"input-tokens": 1200, "output-tokens": 300}).
func WithCosts(ctx context.Context, costs Costs) context.Context {
	return transport.WithCosts(ctx, costs)
}

// Batch sends many requests so that no bucket holds back another: see
// package batch.
type Batch = batch.Batch

// BatchOptions configure a Batch: how many requests in flight, and the
// callback that gets each result.
type BatchOptions = batch.Options

// BatchResult is what became of one request of a Batch.
type BatchResult = batch.Result

// BatchProgress is where a Batch stands: done, failed, waiting and for
// what, and when it should end.
type BatchProgress = batch.Progress

// Gateway is the HTTP gateway `ratekeeper serve` runs: a reverse proxy
// that gives programs in any language the rate-keeping client, with a
// dashboard, /status and /metrics.
type Gateway = gateway.Gateway

// GatewayOptions configure a Gateway; its Client field takes the same
// Options as NewClient.
type GatewayOptions = gateway.Options

// NewTransport builds the rate-keeping http.RoundTripper, reporting bad
// configuration (an unknown policy, a malformed base URL, an empty or
// whitespace-padded token, an unusable database) as an error. Close it to
// release a database given in Options.DB.
func NewTransport(opts Options) (*transport.Transport, error) { return wiring.Transport(opts) }

// NewGateway builds a gateway (see package gateway); serve it with its
// Serve method or any http.Server, and Close it at the end.
func NewGateway(opts GatewayOptions) (*Gateway, error) { return gateway.New(opts) }

// NewBatch returns a Batch sending its requests with rt, normally a
// transport from NewTransport (Options.DB shares its quota with other
// processes); see batch.New.
func NewBatch(rt http.RoundTripper, opts BatchOptions) *Batch { return batch.New(rt, opts) }

// BatchKey names a request added to a Batch in its result.
func BatchKey(k string) batch.Option { return batch.Key(k) }

// BatchPriority orders a request added to a Batch: smaller first (1 runs
// first, as in tasks and fetch; the default is 2).
func BatchPriority(p int) batch.Option { return batch.Priority(p) }

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
