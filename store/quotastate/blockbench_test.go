package quotastate_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/transport"
)

// BenchmarkBlockUnits is BenchmarkFleetDecisions's worker in one
// process on one goroutine, on SQLite: a decision and its release (or its
// answer, answered), taking turns among 30 credentials of 10 owners whose
// quota never binds, so that nearly every decision is a unit of a block
// taken ahead. Its CPU and allocations a decision are what the fleet's
// processes share the cores by.
func BenchmarkBlockUnits(b *testing.B) {
	for _, v := range []struct {
		name      string
		answered  bool
		remaining int64
	}{{"released", false, 1e9}, {"answered", true, 1e9}, {"database", false, 5e8}} {
		answered := v.answered
		b.Run(v.name, func(b *testing.B) {
			dsn := filepath.Join(b.TempDir(), "blocks.db")
			seedBuckets(b, dsn, v.remaining)
			s, err := store.Open(context.Background(), dsn, store.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			st := quotastate.New(s, nil)
			defer st.Close(context.Background())
			d := &decider{st: st}
			slots := decideSlots()
			turns := make([][]transport.Slot, 30)
			for k := range turns {
				turns[k] = append(slices.Clone(slots[k:]), slots[:k]...)
			}
			reset := time.Now().Add(time.Hour)
			var spent int64
			b.ReportAllocs()
			cpu := processCPU()
			for k := 0; b.Loop(); k++ {
				turn := turns[k%30]
				var r *headers.Reading
				if answered {
					spent++
					r = &headers.Reading{Status: 200, Limit: 1e9, Remaining: 1e9 - spent, Reset: reset}
				}
				if err := d.decideOnce(turn, r); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
