// Package collectors builds and registers ratekeeper's Prometheus
// collectors. The transport, the poller, the task queue and the gateway
// each own their series; this package owns how a series is declared (one
// call with its name, help and labels) and the two ways it is registered:
// strictly (Register, a second collector of a name is an error) or shared
// (Share, a second one takes over the first's series, so two pollers or two
// queues on one registry count together).
package collectors

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Counter declares a counter vector.
func Counter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// Gauge declares a gauge vector.
func Gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// Histogram declares a histogram vector with the given bucket bounds.
func Histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

// Register registers each collector on reg, stopping at the first that
// fails (a name already taken included). A nil reg registers nothing.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Share registers c on reg and returns it, or returns the collector of the
// same type already registered there under the same description, so that
// both owners count on one series. Any other failure is kept in *errp (the
// first one only) and c is returned, so a caller declares and registers all
// its collectors and looks at one error at the end. A nil reg registers
// nothing.
func Share[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	if reg == nil {
		return c
	}
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
