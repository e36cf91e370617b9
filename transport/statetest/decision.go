package statetest

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/transport"
)

// testDecisionSaysWhatEndsAWait: Reserve's decision tells a wait that an
// answer may end (the first probe of an unknown bucket is in flight) from
// a wait until a known time (the reset of a spent bucket), and changes
// nothing of the params it was given.
func testDecisionSaysWhatEndsAWait(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	decide := func(now time.Time) transport.Decision {
		t.Helper()
		p := &transport.ReserveParams{Slots: []transport.Slot{a}, Ask: greedy, Lease: l.at(now), Now: now}
		before := *p
		d, err := s.Reserve(t.Context(), p)
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		if p.Lease != before.Lease || !p.Now.Equal(before.Now) || p.Waited != before.Waited || len(p.Slots) != 1 || p.Slots[0].Bucket != a.Bucket {
			t.Errorf("Reserve changed its params: %+v, was %+v", *p, before)
		}
		return d
	}
	if d := decide(t0); d.Index != 0 || d.Wait != 0 {
		t.Fatalf("first request to an unknown bucket: %+v, want slot 0 at once", d)
	}
	if d := decide(t0); d.Wait == 0 || !d.OnAnswer || d.Scoped {
		t.Errorf("a request behind the first probe: %+v, want a wait an answer may end", d)
	}
	settle(t, s, a, 1, ok(10, 0, t0.Add(time.Hour)), t0)
	if d := decide(t0); d.Wait < 59*time.Minute || d.OnAnswer || d.Scoped {
		t.Errorf("a request to a spent bucket: %+v, want a wait for the reset that no answer ends", d)
	}
}
