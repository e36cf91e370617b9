package statetest

import (
	"testing"

	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/transport"
)

// testUnits: a reservation of n units (a GraphQL query's predicted
// points) holds n of its bucket in every State — stored with its lease
// and read back — until its settle, and a request the rest cannot pay
// waits.
func testUnits(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "graphql")
	known(t, s, a, 1000, 25, t0.Add(60e9), t0)
	ask := greedy
	ask.Units = 10
	first, second := l.at(t0), l.at(t0)
	for _, lz := range []quota.Lease{first, second} {
		if _, w := reserve(t, s, ask, lz, t0, a); w != 0 {
			t.Fatalf("a 10-point query with 25 left waits %v", w)
		}
	}
	if got := bucketOf(t, s, a); got.InFlight(t0) != 20 {
		t.Fatalf("in flight %d units, want 20 (leases %+v)", got.InFlight(t0), got.Leases)
	}
	if _, w := reserve(t, s, ask, l.at(t0), t0, a); w == 0 {
		t.Fatal("a third 10-point query went with 5 points left")
	}
	err := s.Settle(t.Context(), &transport.SettleParams{Slot: a, Lease: first.ID, Now: t0,
		Answer: quota.Answer{Reading: ok(1000, 15, t0.Add(60e9)), Counted: true, Units: 10}})
	if err != nil {
		t.Fatal(err)
	}
	// 15 left, 10 in flight: a 5-point query fits, a 10-point one not.
	if got := bucketOf(t, s, a); got.Remaining != 15 || got.InFlight(t0) != 10 {
		t.Fatalf("remaining %d, in flight %d; want 15 and 10", got.Remaining, got.InFlight(t0))
	}
	if _, w := reserve(t, s, ask, l.at(t0), t0, a); w == 0 {
		t.Fatal("a 10-point query went with 5 points free")
	}
	ask.Units = 5
	if _, w := reserve(t, s, ask, l.at(t0), t0, a); w != 0 {
		t.Fatalf("a 5-point query with 5 free waits %v", w)
	}
}
