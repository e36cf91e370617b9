package quota

import (
	"testing"
	"time"
)

// A greedy reservation spaces nothing, so it does not move the schedule:
// a decision taken at an earlier now (another goroutine's, or another
// process's whose clock offset is a millisecond off) goes at once instead
// of waiting the difference.
func TestGreedyLeavesTheScheduleAlone(t *testing.T) {
	b := NewBucket()
	b.Observe(reading(5000, 4000, t0.Add(time.Hour)), t0, true, Default{})
	p := Policy{Kind: Greedy}
	if w := b.Reserve(p, lz(t0.Add(5*time.Millisecond)), t0.Add(5*time.Millisecond)); w != 0 {
		t.Fatalf("first reservation waits %v", w)
	}
	if w := b.Reserve(p, lz(t0), t0); w != 0 {
		t.Fatalf("a reservation 5 ms earlier waits %v, want 0", w)
	}
}
