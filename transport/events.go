package transport

import (
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
	}
	if err := collectors.Register(reg, m.requests, m.remaining, m.limit, m.reset, m.waits, m.rateLimited); err != nil {
		return nil, err
	}
	return m, nil
}
