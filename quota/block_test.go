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
