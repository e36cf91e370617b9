package quota

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// Decide's shortcut (goesAtOnce) decides as weighing every wait does: on
// many random owners, buckets and asks — near and far from every limit,
// with penalties, caps, pauses, pacing, windows about to roll, points and
// writes — both give the same decision and leave the same owner and
// bucket. The shortcut must also be taken often, or it saves nothing and
// this test proves nothing.
func TestGoesAtOnceAgreesWithTheWaits(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 4))
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	pick := func(ds ...time.Duration) time.Time {
		if rng.IntN(2) == 0 {
			return time.Time{}
		}
		return now.Add(ds[rng.IntN(len(ds))])
	}
	short := 0
	const n = 20000
	for i := range n {
		o := Owner{PenaltyUntil: pick(-time.Second, 0, time.Second)}
		if rng.IntN(4) == 0 {
			o.Cap, o.Lowered = int64(rng.IntN(4)), rng.IntN(2) == 0
		}
		if rng.IntN(4) == 0 {
			o.NextWrite = pick(-time.Second, time.Second)
		}
		limit := []int64{UnknownCount, 10, 1000, 5000}[rng.IntN(4)]
		b := Bucket{Limit: limit, Remaining: UnknownCount}
		if rng.IntN(5) > 0 {
			b.Remaining = rng.Int64N(max(limit, 10) + 1)
		}
		b.Reset = pick(-time.Second, 0, 10*time.Millisecond, time.Hour)
		b.BlockedUntil = pick(-time.Second, 0, time.Second)
		b.TAT = pick(-time.Second, 0, time.Millisecond, time.Second)
		if rng.IntN(6) == 0 {
			b.Refill = 1
		}
		for j := range rng.IntN(6) {
			l := Lease{ID: uint64(100 + j), Until: now.Add(time.Duration(rng.IntN(3)-1) * time.Minute), Requests: int64(rng.IntN(3))}
			o.Leases, b.Leases = append(o.Leases, l), append(b.Leases, l)
		}
		a := Ask{Policy: Policy{Kind: []Kind{Greedy, Spread, Adaptive}[rng.IntN(3)], Burst: rng.IntN(3)}}
		switch rng.IntN(4) {
		case 0:
			a.Policy.Reserve = rng.Int64N(20)
		case 1:
			a.Policy.MinDelay = time.Duration(rng.IntN(3)) * 50 * time.Millisecond
		}
		if rng.IntN(4) == 0 {
			a.Secondary = Secondary{MaxConcurrent: int64(rng.IntN(4)), WriteSpacing: time.Second, PointsPerMinute: 900, ContentPerMinute: 80}
			a.Cost = Cost{Write: rng.IntN(2) == 0, Points: int64(rng.IntN(2)), Endpoint: "GET /x", CreatesContent: rng.IntN(3) == 0}
		}
		a.Free, a.Conditional = rng.IntN(8) == 0, rng.IntN(8) == 0
		a.Units = int64(rng.IntN(3))

		l := Lease{ID: 1, Until: now.Add(time.Minute)}
		o1, b1 := o.Clone(), b.Clone()
		o2, b2 := o.Clone(), b.Clone()
		fast := goesAtOnce(&Option{Owner: &o1, Bucket: &b1}, &a, now)
		got := Decide([]Option{{Owner: &o1, Bucket: &b1}}, &a, l, now)
		want := weigh([]Option{{Owner: &o2, Bucket: &b2}}, &a, l, now)
		if fast {
			short++
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(o1, o2) || !reflect.DeepEqual(b1, b2) {
			t.Fatalf("case %d (shortcut %v): Decide %+v, weighing %+v\nowner %+v\nvs    %+v\nbucket %+v\nvs     %+v\nask %+v",
				i, fast, got, want, o1, o2, b1, b2, a)
		}
	}
	if short < n/20 {
		t.Fatalf("the shortcut decided %d of %d cases: too few to prove it agrees", short, n)
	}
	t.Logf("the shortcut decided %d of %d cases", short, n)
}
