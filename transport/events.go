package transport

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper/internal/collectors"
)

// EventKind says what happened.
type EventKind string

const (
	// EventWaited: a request waited for quota or a penalty before going.
	EventWaited EventKind = "waited"
	// EventRateLimited: the server refused a request for rate limiting.
	EventRateLimited EventKind = "rate_limited"
	// EventCredentialInvalid: the server rejected a credential (401).
	EventCredentialInvalid EventKind = "credential_invalid"
	// EventRetried: a request is sent again after an error.
	EventRetried EventKind = "retried"
	// EventUnmatched: a URL matched no provider, so its host became a
	// generic provider of its own (see Options.NoAutoProviders). Once per
	// host; Provider is the name it got, URL its origin.
	EventUnmatched EventKind = "unmatched"
	// EventHoldersFreed: the reservations of processes that are gone
	// (killed with requests in flight) were freed; Attempt is how many.
	EventHoldersFreed EventKind = "holders_freed"
	// EventServedFromCache: a stored answer was served without a request
	// (see Options.Cache): Cache is "fresh", or "stale" when the
	// request's max-stale accepted it because asking would have waited
	// for quota; Wait is the answer's age.
	EventServedFromCache EventKind = "served_from_cache"
)

// Event describes something worth knowing about one request. It never
// carries a token: Credential is the masked form.
type Event struct {
	Kind       EventKind
	Provider   string
	Resource   string
	Credential string
	// Wait is how long the request waited (EventWaited) or will wait
	// before its retry (EventRetried, EventRateLimited).
	Wait time.Duration
	// Status is the response status, when there was one.
	Status int
	// Limit is "primary" or "secondary" for EventRateLimited.
	Limit string
	// Attempt counts sends of this request, from 1.
	Attempt int
	// Err is the error that caused a retry.
	Err error
	// URL is the request's URL; for EventUnmatched, the host's origin
	// (scheme, host and port).
	URL string
	// For EventUnmatched: Auto says the host is paced as a generic
	// provider (60 a minute when it states no limit) and may carry a
	// token; TokenEnv names the variable its token came from ("" for
	// none: it goes without), Variables those that were looked at.
	Auto      bool
	TokenEnv  string
	Variables []string
	// Cache is "fresh" or "stale" for EventServedFromCache.
	Cache string
}

// Metrics are the transport's Prometheus collectors. Register them with
// Register; a nil *Metrics records nothing.
type Metrics struct {
	requests    *prometheus.CounterVec
	remaining   *prometheus.GaugeVec
	limit       *prometheus.GaugeVec
	reset       *prometheus.GaugeVec
	waits       *prometheus.HistogramVec
	rateLimited *prometheus.CounterVec
	served      *prometheus.CounterVec
	scopes      *scopeMetrics
}

// NewMetrics builds the collectors and registers them on reg (nil: none).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	// The quota gauges are kept per bucket as each credential sees it.
	bucket := []string{"provider", "credential", "resource"}
	m := &Metrics{
		requests: collectors.Counter("ratekeeper_requests_total",
			"Requests sent upstream, by provider, resource, status code and cache outcome (miss, revalidated, none).",
			"provider", "resource", "code", "cache"),
		remaining: collectors.Gauge("ratekeeper_quota_remaining",
			"Requests left in the bucket, as the server last said, by provider, credential (masked) and resource.",
			bucket...),
		limit: collectors.Gauge("ratekeeper_quota_limit",
			"Bucket size, by provider, credential (masked) and resource.",
			bucket...),
		reset: collectors.Gauge("ratekeeper_quota_reset_timestamp_seconds",
			"When the bucket refills (Unix seconds), by provider, credential (masked) and resource.",
			bucket...),
		waits: collectors.Histogram("ratekeeper_wait_seconds",
			"Time requests waited for quota before being sent, by provider.",
			[]float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}, "provider"),
		rateLimited: collectors.Counter("ratekeeper_rate_limited_total",
			"Responses that refused a request for rate limiting, by provider and kind (primary, secondary).",
			"provider", "kind"),
		served: collectors.Counter("ratekeeper_cache_served_total",
			"Answers served from the cache without a request, by provider, resource and freshness (fresh, or stale accepted by the request's max-stale).",
			"provider", "resource", "cache"),
		scopes: newScopeMetrics(),
	}
	if err := collectors.Register(reg, m.requests, m.remaining, m.limit, m.reset, m.waits, m.rateLimited, m.served, m.scopes); err != nil {
		return nil, err
	}
	return m, nil
}

// scopeMetrics exports, at each scrape, the scopes whose limits nobody
// announced (see quota's scope.go): read from the transport's State when
// the scrape comes, so a limit learnt by another process sharing the
// database shows too.
type scopeMetrics struct {
	limit, paused *prometheus.Desc
	state         atomic.Pointer[State]
}

func newScopeMetrics() *scopeMetrics {
	labels := []string{"provider", "owner", "scope", "origin"}
	return &scopeMetrics{
		limit: prometheus.NewDesc("ratekeeper_scope_limit",
			"Requests per window allowed in a scope the server does not announce (origin: learnt from its refusals, measuring while a learnt one is only a lower bound, or configured), by provider, bucket owner and scope (a path pattern).",
			labels, nil),
		paused: prometheus.NewDesc("ratekeeper_scope_paused_until_timestamp_seconds",
			"When a refusal's pause of the scope ends (Unix seconds); 0 when it is not paused.",
			labels, nil),
	}
}

func (m *scopeMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.limit
	ch <- m.paused
}

func (m *scopeMetrics) Collect(ch chan<- prometheus.Metric) {
	st := m.state.Load()
	if st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	buckets, err := (*st).Buckets(ctx)
	if err != nil {
		return
	}
	now := time.Now()
	for id, b := range buckets {
		origin := ""
		switch {
		case !IsScope(id.Resource):
			continue
		case b.Learnt && b.Provisional:
			origin = "measuring"
		case b.Learnt:
			origin = "learnt"
		case b.Configured:
			origin = "configured"
		default:
			continue
		}
		name, _, _ := strings.Cut(id.Provider, " ") // the state key is "name base-URL"
		labels := []string{name, id.Owner, id.Resource, origin}
		if b.Limit > 0 {
			ch <- prometheus.MustNewConstMetric(m.limit, prometheus.GaugeValue, float64(b.Limit), labels...)
		}
		paused := 0.0
		if b.BlockedUntil.After(now) {
			paused = float64(b.BlockedUntil.Unix())
		}
		ch <- prometheus.MustNewConstMetric(m.paused, prometheus.GaugeValue, paused, labels...)
	}
}
