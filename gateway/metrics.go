package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper/internal/collectors"
)

// metrics are the gateway's own Prometheus collectors; the transport's
// (requests sent upstream, quota, waits) are registered beside them.
type metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	waits     *prometheus.HistogramVec
	refused   *prometheus.CounterVec
	coalesced *prometheus.CounterVec
	rejected  *prometheus.CounterVec
	// connections counts the connections refused or closed before their
	// first request, by reason (see conns.go).
	connections *prometheus.CounterVec
	inFlight    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, passThrough, unauthenticated func() float64) (*metrics, error) {
	m := &metrics{
		requests: collectors.Counter("ratekeeper_gateway_requests_total",
			"Requests answered on proxy routes, by provider and status code sent to the client.", "provider", "code"),
		duration: collectors.Histogram("ratekeeper_gateway_request_duration_seconds",
			"Time from a proxied request's arrival to its response header, by provider.",
			[]float64{0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60}, "provider"),
		waits: collectors.Histogram("ratekeeper_gateway_wait_seconds",
			"Time proxied requests waited for quota (queueing included) before being sent, by provider. The gateway waits itself, so the transport's ratekeeper_wait_seconds does not count these.",
			[]float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300}, "provider"),
		refused: collectors.Counter("ratekeeper_gateway_quota_refusals_total",
			"Requests answered 429 because quota returns after the request's max wait ends, by provider.", "provider"),
		coalesced: collectors.Counter("ratekeeper_gateway_coalesced_total",
			"Requests answered with an identical concurrent request's upstream response, by provider.", "provider"),
		rejected: collectors.Counter("ratekeeper_gateway_rejected_total",
			"Requests the gateway refused itself (bad path, unknown provider, missing key, body too large, …), by reason.", "reason"),
		connections: collectors.Counter("ratekeeper_gateway_refused_connections_total",
			"Connections refused or closed before a request came, by reason: too_many_unauthenticated (503; with client keys, --max-unauthenticated), too_many_from_address (closed for a newer one from its address, --max-pending-per-address), header_timeout (no request header in time).", "reason"),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratekeeper_gateway_in_flight_requests",
			Help: "Proxied requests being answered now, waiting for quota included.",
		}),
	}
	err := collectors.Register(reg, m.requests, m.duration, m.waits, m.refused, m.coalesced, m.rejected, m.connections, m.inFlight,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ratekeeper_gateway_pass_through_tokens",
			Help: "Client tokens the gateway is tracking quota for (pass-through mode).",
		}, passThrough),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ratekeeper_gateway_unauthenticated_connections",
			Help: "Connections that have not yet sent a request (with client keys: presented a valid key); bounded per client address (--max-pending-per-address) and, with keys, in all (--max-unauthenticated).",
		}, unauthenticated))
	if err != nil {
		return nil, err
	}
	return m, nil
}
