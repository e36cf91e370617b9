package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/store"
)

func BenchmarkUpdate(b *testing.B, s store.Store) {
	ctx := b.Context()
	if err := s.Update(ctx, "bench/counter", increment); err != nil { // create it outside the timing
		b.Fatal(err)
	}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := s.Update(ctx, "bench/counter", increment); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	at := func(q float64) float64 {
		return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Microsecond)
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}
