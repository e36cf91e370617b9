package quota

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// Two GraphQL queries in flight, of 6 and 36 points: the server counts
// them in the order sent (78 → 72 → 36), and their answers come back
// reversed, within a millisecond — the later-sent one, with the lower
// remaining, first. A decision between the answers counts the 6 points
// still in flight against the 36 the server states (a 36-point query
// waits, on answers); the earlier answer, arriving second, gives nothing
// back (36 stay 36, not 72); and once both are in, the 36 left are spent
// exactly.
func TestReversedAnswersGiveNoPointsBack(t *testing.T) {
	reset := t0.Add(time.Hour)
	b := NewBucket()
	var o Owner
	b.Observe(reading(5000, 78, reset), t0, true, Default{})
	opts := []Option{{Owner: &o, Bucket: &b}}
	ask := func(units int64) *Ask { return &Ask{Policy: Policy{Kind: Greedy}, Units: units} }
	a, c := lz(t0), lz(t0)
	if d := Decide(opts, ask(6), a, t0); d.Wait != 0 {
		t.Fatalf("6 points of 78: wait %v", d.Wait)
	}
	if d := Decide(opts, ask(36), c, t0); d.Wait != 0 {
		t.Fatalf("36 more points of 72: wait %v", d.Wait)
	}
	now := t0.Add(80 * time.Millisecond)
	Settle(&o, &b, c.ID, &Answer{Reading: reading(5000, 36, reset), Counted: true}, now)
	if d := Decide(opts, ask(36), lz(now), now); d.Wait == 0 || !d.OnAnswer {
		t.Fatalf("36 left by the server's word, 6 in flight: a 36-point query waits %v (on answers %v); want a wait on answers", d.Wait, d.OnAnswer)
	}
	now = now.Add(700 * time.Microsecond)
	Settle(&o, &b, a.ID, &Answer{Reading: reading(5000, 72, reset), Counted: true}, now)
	if budget, _ := b.Budget(0, now); b.Remaining != 36 || budget != 36 {
		t.Fatalf("after the earlier answer: remaining %d, budget %d; want 36 and 36", b.Remaining, budget)
	}
	if d := Decide(opts, ask(36), lz(now), now); d.Wait != 0 {
		t.Fatalf("36 left, nothing in flight: a 36-point query waits %v", d.Wait)
	}
	if d := Decide(opts, ask(1), lz(now), now); d.Wait < reset.Sub(now) {
		t.Fatalf("36 of 36 in flight: a 1-point query waits %v, want until the reset", d.Wait)
	}
}

// The same reversal as the first answers of a new window (the bucket
// assumed full after its reset): the lower remaining, which came first,
// stands.
func TestReversedAnswersAfterARefill(t *testing.T) {
	reset := t0.Add(10 * time.Second)
	b := NewBucket()
	var o Owner
	b.Observe(reading(1000, 0, reset), t0, true, Default{})
	opts := []Option{{Owner: &o, Bucket: &b}}
	now := reset.Add(b.grace())
	a, c := lz(now), lz(now)
	for _, q := range []struct {
		l     Lease
		units int64
	}{{a, 6}, {c, 36}} {
		if d := Decide(opts, &Ask{Policy: Policy{Kind: Greedy}, Units: q.units}, q.l, now); d.Wait != 0 {
			t.Fatalf("%d points after the refill: wait %v", q.units, d.Wait)
		}
	}
	next := reset.Add(10 * time.Second)
	later := now.Add(50 * time.Millisecond)
	Settle(&o, &b, c.ID, &Answer{Reading: reading(1000, 958, next), Counted: true}, later)
	Settle(&o, &b, a.ID, &Answer{Reading: reading(1000, 994, next), Counted: true}, later.Add(500*time.Microsecond))
	if b.Remaining != 958 || b.InFlight(later) != 0 {
		t.Fatalf("remaining %d with %d in flight, want 958 and 0", b.Remaining, b.InFlight(later))
	}
}

// A credential whose owner is not known yet holds its query's points in
// every known bucket it may share; when its answer comes, those buckets
// count the points it held, not one request: the points it may have spent
// there are not given back before that bucket's own answers tell.
func TestUnknownOwnerCountsItsPointsWhereItMayShare(t *testing.T) {
	reset := t0.Add(time.Hour)
	known, own := NewBucket(), NewBucket()
	known.Observe(reading(5000, 100, reset), t0, true, Default{})
	var oo Owner
	l := lz(t0)
	opts := []Option{{Owner: &oo, Bucket: &own, Also: []*Bucket{&known}}}
	if d := Decide(opts, &Ask{Policy: Policy{Kind: Greedy}, Units: 36}, l, t0); d.Wait != 0 {
		t.Fatalf("wait %v", d.Wait)
	}
	if known.InFlight(t0) != 36 {
		t.Fatalf("the known bucket holds %d in flight, want 36", known.InFlight(t0))
	}
	now := t0.Add(100 * time.Millisecond)
	Settle(&oo, &own, l.ID, &Answer{Reading: reading(5000, 64, reset), Counted: true}, now, &known)
	if budget, _ := known.Budget(0, now); budget != 64 {
		t.Fatalf("the known bucket after the answer: budget %d, want 64 (100 less the 36 points it may have spent)", budget)
	}
}

// An answer that states no remaining (a 502 from a GraphQL query that ran
// too long, which still costs) counts the points its query held, unless
// the answer says what it really cost.
func TestUnstatedAnswerCountsThePointsHeld(t *testing.T) {
	reset := t0.Add(time.Hour)
	silent := &headers.Reading{Status: 502, Limit: UnknownCount, Remaining: UnknownCount, Used: UnknownCount}
	for _, c := range []struct {
		units, want int64
	}{{0, 64}, {10, 90}} {
		b := NewBucket()
		b.Observe(reading(5000, 100, reset), t0, true, Default{})
		l := lz(t0)
		if w := b.Reserve(Policy{Kind: Greedy}, l, t0); w != 0 {
			t.Fatal(w)
		}
		b.Leases[0].Units = 36
		Settle(nil, &b, l.ID, &Answer{Reading: silent, Counted: true, Units: c.units}, t0.Add(time.Second))
		if b.Remaining != c.want {
			t.Errorf("answer stating %d units: remaining %d, want %d", c.units, b.Remaining, c.want)
		}
	}
}
