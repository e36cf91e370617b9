package quota

import (
	"testing"
	"time"
)

// BenchmarkBlockTake is one unit of a block handed out and given back
// unanswered: the engine's decision on the block's copy.
func BenchmarkBlockTake(b *testing.B) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	bk := Bucket{Limit: 1e9, Remaining: 9e8, Reset: now.Add(time.Hour)}
	o := Owner{}
	for i := range 8 {
		l := Lease{ID: uint64(1000 + i), Until: now.Add(time.Minute)}
		o.Leases, bk.Leases = append(o.Leases, l), append(bk.Leases, l)
	}
	read := Ask{Policy: DefaultPolicy()}
	k := TakeBlock(&o, &bk, nil, &read, Lease{ID: 100, Until: now.Add(2 * time.Minute)}, MaxBlock, now)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		id := uint64(i%4 + 1)
		if !k.Take(&read, &Lease{ID: id, Until: now.Add(time.Minute)}, now) {
			b.Fatal("no unit")
		}
		k.GiveBack(id)
	}
}
