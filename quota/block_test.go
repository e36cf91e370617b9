package quota

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// A lease that stands for several requests (a block taken ahead) counts
// each of them in flight, in its owner and its bucket; each settle naming
// it ends one, counted as one unit; Returned ends several unsent; the
// lease goes with the last.
func TestBlockLeaseEndsOneRequestAtATime(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	o, b := Owner{}, Bucket{Limit: 5000, Remaining: 4000, Reset: now.Add(time.Hour)}
	a := Ask{Policy: Policy{Kind: Greedy}, Units: 8}
	d := Decide([]Option{{Owner: &o, Bucket: &b}}, &a, Lease{ID: 7, Until: now.Add(time.Minute), Requests: 8}, now)
	if d.Index != 0 || d.Wait != 0 {
		t.Fatalf("block: %+v", d)
	}
	if o.InFlight(now) != 8 || b.InFlight(now) != 8 {
		t.Fatalf("in flight: owner %d, bucket %d, want 8 and 8", o.InFlight(now), b.InFlight(now))
	}
	if o.Peak != 0 {
		t.Errorf("owner's peak %d, want 0: none of the block's requests is sent yet", o.Peak)
	}
	ok := &headers.Reading{Status: 200, Limit: 5000, Remaining: 3999, Reset: now.Add(time.Hour)}
	Settle(&o, &b, 7, &Answer{Reading: ok, Counted: true}, now)
	if o.InFlight(now) != 7 || b.InFlight(now) != 7 || b.Remaining != 3999 {
		t.Fatalf("after one answer: owner %d, bucket %d in flight, remaining %d; want 7, 7, 3999", o.InFlight(now), b.InFlight(now), b.Remaining)
	}
	// An answer that states no remaining counts one unit, not the block's.
	b.Remaining = 100
	Settle(&o, &b, 7, &Answer{Reading: &headers.Reading{Status: 200, Limit: UnknownCount, Remaining: UnknownCount}, Counted: true}, now)
	if b.Remaining != 99 || b.InFlight(now) != 6 {
		t.Fatalf("an unstated answer: remaining %d, in flight %d; want 99 and 6", b.Remaining, b.InFlight(now))
	}
	Settle(&o, &b, 7, &Answer{Returned: 5}, now)
	if o.InFlight(now) != 1 || b.InFlight(now) != 1 || len(b.Leases) != 1 {
		t.Fatalf("after 5 returned: owner %d, bucket %d in flight (%d leases); want 1 and 1", o.InFlight(now), b.InFlight(now), len(b.Leases))
	}
	Settle(&o, &b, 7, &Answer{}, now)
	if len(o.Leases) != 0 || len(b.Leases) != 0 {
		t.Fatalf("after the last: %v and %v left", o.Leases, b.Leases)
	}
}

// A cap on the owner's requests in flight counts a block's requests.
func TestBlockCountsInTheOwnersCap(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	o, b := Owner{}, Bucket{Limit: 5000, Remaining: 4000, Reset: now.Add(time.Hour)}
	s := Secondary{MaxConcurrent: 4}
	o.Leases = Leases{{ID: 7, Until: now.Add(time.Minute), Requests: 4, Units: 4}}
	a := Ask{Policy: Policy{Kind: Greedy}, Secondary: s}
	if d := Decide([]Option{{Owner: &o, Bucket: &b}}, &a, Lease{ID: 8, Until: now.Add(time.Minute)}, now); d.Wait == 0 {
		t.Fatalf("a request went beside a block holding the whole cap: %+v", d)
	}
}

// A block's units are Decide's on the block's copy: a greedy read goes, a
// write spaced, a request paced by a min interval or a point counted goes
// to the shared rows instead; a reading saying few remain ends the block;
// a unit given back unanswered may go again.
func TestBlockTakeAsksTheEngine(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	o, b := Owner{}, Bucket{Limit: 5000, Remaining: 4000, Reset: now.Add(time.Hour)}
	read := Ask{Policy: Policy{Kind: Greedy}, Secondary: Secondary{WriteSpacing: time.Second, PointsPerMinute: 900}}
	k := TakeBlock(&o, &b, nil, &read, Lease{ID: 100, Until: now.Add(time.Minute)}, 8, now)
	if k == nil || k.Left() != 8 || b.InFlight(now) != 8 || o.InFlight(now) != 8 {
		t.Fatalf("block: %+v; bucket %d and owner %d in flight, want 8", k, b.InFlight(now), o.InFlight(now))
	}
	lease := func(id uint64) *Lease { return &Lease{ID: id, Until: now.Add(time.Minute)} }
	if !k.Take(&read, lease(1), now) || k.Left() != 7 {
		t.Fatalf("a greedy read did not take a unit (%d left)", k.Left())
	}
	write, paced, points := read, read, read
	write.Cost.Write = true
	paced.Policy.MinDelay = 100 * time.Millisecond
	points.Cost.Points = 1
	for name, a := range map[string]Ask{"a write spaced": write, "a min interval": paced, "points counted": points} {
		if k.Take(&a, lease(2), now) {
			t.Errorf("%s took a unit: its take moves a schedule other processes read", name)
		}
	}
	if k.Take(&read, &Lease{ID: 3, Until: now.Add(2 * time.Minute)}, now) {
		t.Error("a request whose lease outlasts the block's took a unit")
	}
	k.GiveBack(1)
	if k.Left() != 8 || !k.Take(&read, lease(4), now) {
		t.Fatalf("a unit given back was not taken again (%d left)", k.Left())
	}
	ok := &headers.Reading{Status: 200, Limit: 5000, Remaining: 5, Reset: now.Add(time.Hour)}
	if k.Settle(Part{Owner: true, Bucket: true}, 4, &Answer{Reading: ok, Counted: true}, now) {
		t.Fatal("a 200 saying 5 remain left the block plentiful")
	}
	if k.Take(&read, lease(5), now) {
		t.Fatal("a unit went after a 200 saying 5 remain")
	}
}

// Another process's rows close a block when they hold a refusal or a
// reading that brought the bucket below the line.
func TestBlockHeard(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	o, b := Owner{}, Bucket{Limit: 5000, Remaining: 4000, Reset: now.Add(time.Hour)}
	read := Ask{Policy: Policy{Kind: Greedy}}
	k := TakeBlock(&o, &b, nil, &read, Lease{ID: 100, Until: now.Add(time.Minute)}, 32, now)
	if !k.Heard(&o, &b, nil, now) {
		t.Fatal("the rows the block was taken on do not allow it")
	}
	refused, low, penalised := b.Clone(), b.Clone(), o.Clone()
	refused.BlockedUntil = now.Add(time.Minute)
	low.Remaining = 2000
	penalised.PenaltyUntil = now.Add(time.Minute)
	for name, c := range map[string]struct {
		o *Owner
		b *Bucket
	}{"refused": {&o, &refused}, "below the line": {&o, &low}, "penalised": {&penalised, &b}} {
		if k.Heard(c.o, c.b, nil, now) {
			t.Errorf("%s: the block may go on", name)
		}
	}
}

// The next block is sized by the pace its predecessor was used at.
func TestBlockNextSize(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	b := Bucket{Limit: 100000, Remaining: 90000, Reset: now.Add(time.Hour)}
	read := Ask{Policy: Policy{Kind: Greedy}}
	k := TakeBlock(&Owner{}, &b, nil, &read, Lease{ID: 100, Until: now.Add(time.Minute)}, FirstBlock, now)
	for i := range FirstBlock {
		k.Take(&read, &Lease{ID: uint64(i + 1), Until: now.Add(time.Minute)}, now)
	}
	if got := k.NextSize(BlockMaxAge / 8); got != 4*FirstBlock {
		t.Errorf("used up in an eighth of its age: next %d, want %d (four times at most)", got, 4*FirstBlock)
	}
	if got := k.NextSize(BlockMaxAge); got != FirstBlock {
		t.Errorf("used up as it expired: next %d, want %d", got, FirstBlock)
	}
}
