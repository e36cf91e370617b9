package tasks

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Prometheus series of a Queue.
type metrics struct {
	submitted   *prometheus.CounterVec
	outcomes    *prometheus.CounterVec
	rescheduled *prometheus.CounterVec
	delay       *prometheus.HistogramVec
	duration    *prometheus.HistogramVec
	takenBack   prometheus.Counter
}

// Outcome label values of ratekeeper_tasks_total: every handler run ends in
// exactly one.
const (
	outcomeCompleted   = "completed"
	outcomeRetried     = "retried"
	outcomeRescheduled = "rescheduled"
	outcomeFailed      = "failed"
	outcomeCancelled   = "cancelled"
	outcomeInterrupted = "interrupted"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_tasks_submitted_total",
			Help: "Tasks added to the queue, by type (duplicates of a unique key not counted).",
		}, []string{"type"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_tasks_total",
			Help: "Task attempts by type and outcome: completed, retried, rescheduled, failed, cancelled, interrupted.",
		}, []string{"type", "outcome"}),
		rescheduled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_tasks_rescheduled_total",
			Help: "Tasks put back to pending by a reschedule (durable sleep), by type.",
		}, []string{"type"}),
		delay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratekeeper_reschedule_delay_seconds",
			Help:    "Delay asked for by reschedules, by type.",
			Buckets: []float64{0, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600},
		}, []string{"type"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratekeeper_task_attempt_duration_seconds",
			Help:    "How long handler runs took, by type.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"type"}),
		takenBack: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratekeeper_tasks_taken_back_total",
			Help: "Running tasks of workers that were gone (process ended, or heartbeat silent), taken back to pending by this process's workers.",
		}),
	}
	var err error
	m.submitted = register(reg, m.submitted, &err)
	m.outcomes = register(reg, m.outcomes, &err)
	m.rescheduled = register(reg, m.rescheduled, &err)
	m.delay = register(reg, m.delay, &err)
	m.duration = register(reg, m.duration, &err)
	m.takenBack = register(reg, m.takenBack, &err)
	return m, err
}

// register registers c on reg, or returns the collector already registered
// under the same name (two Queues sharing a registry share their series).
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
