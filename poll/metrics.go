package poll

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper/internal/collectors"
)

// Metrics are the poller's Prometheus collectors, labelled by URL (with
// credentials masked). A nil *Metrics records nothing.
type Metrics struct {
	polls       *prometheus.CounterVec
	changes     *prometheus.CounterVec
	notModified *prometheus.CounterVec
	interval    *prometheus.GaugeVec
	rateLimited *prometheus.CounterVec
	budget      *prometheus.CounterVec
}

// NewMetrics builds the collectors and registers them on reg. Collectors
// already registered there under the same names (by another Poller) are
// shared.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	var err error
	m := &Metrics{
		polls: collectors.Share(reg, collectors.Counter("ratekeeper_poll_polls_total",
			"Polls by URL and outcome (first, changed, unchanged, failed, rate_limited).", "url", "outcome"), &err),
		changes: collectors.Share(reg, collectors.Counter("ratekeeper_poll_changes_total",
			"Changes seen, by URL.", "url"), &err),
		notModified: collectors.Share(reg, collectors.Counter("ratekeeper_poll_not_modified_total",
			"Polls answered 304 Not Modified (free on GitHub), by URL.", "url"), &err),
		interval: collectors.Share(reg, collectors.Gauge("ratekeeper_poll_interval_seconds",
			"The current wait until the next poll, by URL.", "url"), &err),
		rateLimited: collectors.Share(reg, collectors.Counter("ratekeeper_poll_rate_limited_total",
			"Polls refused for rate limiting, or that would have waited too long for quota, by URL.", "url"), &err),
		budget: collectors.Share(reg, collectors.Counter("ratekeeper_poll_budget_total",
			"Intervals the budget guard set, by URL and action (stretched, paused).", "url", "action"), &err),
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// record counts one poll and its decision.
func (m *Metrics) record(url string, o Outcome, notModified bool, d Decision) {
	if m == nil {
		return
	}
	m.polls.WithLabelValues(url, o.String()).Inc()
	switch o {
	case Changed:
		m.changes.WithLabelValues(url).Inc()
	case RateLimited:
		m.rateLimited.WithLabelValues(url).Inc()
	}
	if notModified {
		m.notModified.WithLabelValues(url).Inc()
	}
	switch d.Rule {
	case RuleBudget:
		m.budget.WithLabelValues(url, "stretched").Inc()
	case RulePaused:
		m.budget.WithLabelValues(url, "paused").Inc()
	}
	m.interval.WithLabelValues(url).Set(d.Interval.Seconds())
}
