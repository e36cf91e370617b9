package tasks

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper/internal/collectors"
)

// metrics are the Prometheus series of a Queue.
type metrics struct {
	submitted   *prometheus.CounterVec
	outcomes    *prometheus.CounterVec
	rescheduled *prometheus.CounterVec
	delay       *prometheus.HistogramVec
	duration    *prometheus.HistogramVec
	takenBack   prometheus.Counter
	woken       *prometheus.CounterVec
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

// newMetrics declares the series and registers them on reg; two Queues
// sharing a registry share their series.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	var err error
	m := &metrics{
		submitted: collectors.Share(reg, collectors.Counter("ratekeeper_tasks_submitted_total",
			"Tasks added to the queue, by type (duplicates of a unique key not counted).", "type"), &err),
		outcomes: collectors.Share(reg, collectors.Counter("ratekeeper_tasks_total",
			"Task attempts by type and outcome: completed, retried, rescheduled, failed, cancelled, interrupted.", "type", "outcome"), &err),
		rescheduled: collectors.Share(reg, collectors.Counter("ratekeeper_tasks_rescheduled_total",
			"Tasks put back to pending by a reschedule (durable sleep), by type.", "type"), &err),
		delay: collectors.Share(reg, collectors.Histogram("ratekeeper_reschedule_delay_seconds",
			"Delay asked for by reschedules, by type.",
			[]float64{0, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600}, "type"), &err),
		duration: collectors.Share(reg, collectors.Histogram("ratekeeper_task_attempt_duration_seconds",
			"How long handler runs took, by type.",
			prometheus.ExponentialBuckets(0.001, 4, 10), "type"), &err),
		takenBack: collectors.Share[prometheus.Counter](reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratekeeper_tasks_taken_back_total",
			Help: "Running tasks of workers that were gone (process ended, or heartbeat silent), taken back to pending by this process's workers.",
		}), &err),
		woken: collectors.Share(reg, collectors.Counter("ratekeeper_tasks_woken_total",
			"Tasks asleep for quota that this process's workers made available before the sleep's end, their quota back early, by type.", "type"), &err),
	}
	return m, err
}
