package poll

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
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
	m := &Metrics{
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_poll_polls_total",
			Help: "Polls by URL and outcome (first, changed, unchanged, failed, rate_limited).",
		}, []string{"url", "outcome"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_poll_changes_total",
			Help: "Changes seen, by URL.",
		}, []string{"url"}),
		notModified: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_poll_not_modified_total",
			Help: "Polls answered 304 Not Modified (free on GitHub), by URL.",
		}, []string{"url"}),
		interval: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ratekeeper_poll_interval_seconds",
			Help: "The current wait until the next poll, by URL.",
		}, []string{"url"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_poll_rate_limited_total",
			Help: "Polls refused for rate limiting, or that would have waited too long for quota, by URL.",
		}, []string{"url"}),
		budget: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_poll_budget_total",
			Help: "Intervals the budget guard set, by URL and action (stretched, paused).",
		}, []string{"url", "action"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.polls = register(reg, m.polls, &err)
	m.changes = register(reg, m.changes, &err)
	m.notModified = register(reg, m.notModified, &err)
	m.interval = register(reg, m.interval, &err)
	m.rateLimited = register(reg, m.rateLimited, &err)
	m.budget = register(reg, m.budget, &err)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c on reg, or returns the collector already registered
// under the same name.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		if *errp == nil {
			*errp = err
		}
	}
	return c
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
