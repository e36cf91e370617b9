package quota

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// A request of n units (a GraphQL query's points) needs n of the budget,
// holds them until its answer, and counts once against its owner's
// concurrency.
func TestReservationOfUnits(t *testing.T) {
	reset := t0.Add(time.Minute)
	b := NewBucket()
	b.Observe(reading(1000, 25, reset), t0, true, Default{})
	var o Owner
	ask := &Ask{Policy: Policy{Kind: Greedy}, Units: 10}
	opts := []Option{{Owner: &o, Bucket: &b}}
	for i := range 2 {
		if _, w, _ := Reserve(opts, ask, lz(t0), t0); w != 0 {
			t.Fatalf("query %d of 10 points with 25 left waits %v", i+1, w)
		}
	}
	if budget, _ := b.Budget(0, t0); b.InFlight(t0) != 20 || o.InFlight(t0) != 2 || budget != 5 {
		t.Fatalf("in flight %d units, %d requests, budget %d; want 20, 2 and 5", b.InFlight(t0), o.InFlight(t0), budget)
	}
	if _, w, _ := Reserve(opts, ask, lz(t0), t0); w < time.Minute {
		t.Fatalf("a third query with 5 points left waits %v, want until the reset", w)
	}
	if _, w, _ := Reserve(opts, &Ask{Policy: Policy{Kind: Greedy}}, lz(t0), t0); w != 0 {
		t.Fatalf("a 1-point request with 5 left waits %v", w)
	}
	// The answer states the points left: the bucket takes them.
	Settle(&o, &b, b.Leases[0].ID, &Answer{Reading: reading(1000, 14, reset), Counted: true, Units: 11}, t0)
	if b.Remaining != 14 || b.InFlight(t0) != 11 {
		t.Fatalf("remaining %d, in flight %d; want 14 and 11", b.Remaining, b.InFlight(t0))
	}
}

// A query costing more than the whole bucket goes when the bucket is full
// (the server then refuses it and says so) rather than never.
func TestUnitsBeyondTheLimitGoWhenFull(t *testing.T) {
	b := NewBucket()
	b.Observe(reading(5, 5, t0.Add(time.Minute)), t0, true, Default{})
	if w, _ := b.waitUnits(Policy{Kind: Greedy}, 50, t0); w != 0 {
		t.Fatalf("a 50-point query on a full bucket of 5 waits %v", w)
	}
	if w, _ := b.waitUnits(Policy{Kind: Greedy, Reserve: 2}, 50, t0); w != 0 {
		t.Fatalf("with a reserve of 2: waits %v, want 0 (3 of 5 is all it can ever have)", w)
	}
}

// When the server states nothing, the bucket counts a request's units
// itself, as it counts a request.
func TestSettleCountsUnitsTheServerDidNotState(t *testing.T) {
	b := NewBucket()
	def := Default{Limit: 60, Window: time.Minute}
	silent := &headers.Reading{Status: 200, Limit: UnknownCount, Remaining: UnknownCount, Used: UnknownCount}
	Settle(nil, &b, 0, &Answer{Reading: silent, Counted: true, Default: def}, t0)
	Settle(nil, &b, 0, &Answer{Reading: silent, Counted: true, Default: def, Units: 7}, t0)
	if b.Remaining != 52 {
		t.Fatalf("remaining %d, want 60 − 1 − 7", b.Remaining)
	}
}

// A request of several units that two buckets let go now takes the one it
// leaves least (best fit), so the other keeps its room whole for a larger
// one; a request of one unit, a tie, or an order the caller prefers (not
// Pack) keeps the caller's order; a bucket whose window has rolled counts
// full.
func TestUnitsGoWhereTheyFitTightest(t *testing.T) {
	reset := t0.Add(time.Minute)
	greedy := Policy{Kind: Greedy}
	setup := func(remaining ...int64) []Option {
		var opts []Option
		for _, r := range remaining {
			b := NewBucket()
			b.Observe(reading(100, r, reset), t0, true, Default{})
			opts = append(opts, Option{Owner: &Owner{}, Bucket: &b})
		}
		return opts
	}
	for _, c := range []struct {
		name      string
		remaining []int64
		units     int64
		now       time.Time
		want      int
	}{
		{"30 of 70 and 40", []int64{70, 40}, 30, t0, 1},
		{"30 of 40 and 70", []int64{40, 70}, 30, t0, 0},
		{"40 of 70 and 30: only the first fits", []int64{70, 30}, 40, t0, 0},
		{"one unit takes turns", []int64{70, 40}, 1, t0, 0},
		{"a tie takes turns", []int64{40, 40}, 30, t0, 0},
		{"the tightest of three", []int64{90, 50, 35}, 30, t0, 2},
		{"the caller's preference", []int64{70, 40}, 30, t0, -1},
		{"a rolled window is full", []int64{40, 70}, 30, reset.Add(time.Minute), 1},
	} {
		opts := setup(c.remaining...)
		if c.name == "a rolled window is full" {
			// Only the first rolls (to 100): the second keeps its 70.
			opts[1].Bucket.Reset = reset.Add(2 * time.Minute)
		}
		ask := &Ask{Policy: greedy, Units: c.units, Pack: c.want >= 0}
		want := max(c.want, 0) // -1: not packed, the first goes
		d := Decide(opts, ask, lz(c.now), c.now)
		if d.Wait != 0 || d.Index != want {
			t.Errorf("%s: option %d after %v, want %d now", c.name, d.Index, d.Wait, want)
		}
	}
}
