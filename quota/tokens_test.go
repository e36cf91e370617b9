package quota

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// A token bucket refills continuously: the wait for n units is until n
// have dripped back, not until the reset (when it is full again).
func TestContinuousRefill(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	b := NewBucket()
	// 20,000 a minute: 333.3 a second; 2,000 left (17,999 lacking at
	// least: the count is rounded down), full in 54 s.
	r := headers.Reading{Status: 200, Limit: 20000, Remaining: 2000, Used: UnknownCount, Reset: t0.Add(53997 * time.Millisecond)}
	b.observe(&r, t0, time.Time{}, true, Default{}, 0)
	b.learnRefill(&r, t0)
	if b.Refill < 333 || b.Refill > 334 {
		t.Fatalf("refill %v a second, want 333.3", b.Refill)
	}
	p := Policy{Kind: Greedy}
	if w, _ := b.waitUnits(p, 2000, t0); w != 0 {
		t.Fatalf("2,000 of 2,000 left wait %v", w)
	}
	// 3,000 need 1,000 more: 3 s, not the 54 s until full.
	if w, _ := b.waitUnits(p, 3000, t0); w < 3*time.Second || w > 3*time.Second+2*time.Millisecond {
		t.Fatalf("3,000 wait %v, want 3s", w)
	}
	c := b
	c.roll(t0.Add(1500 * time.Millisecond))
	if c.Remaining != 2500 {
		t.Fatalf("remaining after 1.5 s: %d, want 2,500", c.Remaining)
	}
	// Rolling in small steps loses no fraction.
	d := b
	for i := 1; i <= 30; i++ {
		d.roll(t0.Add(time.Duration(i) * 50 * time.Millisecond))
	}
	if d.Remaining != 2500 {
		t.Fatalf("remaining after 30 rolls of 50 ms: %d, want 2,500", d.Remaining)
	}
	e := b
	e.roll(t0.Add(time.Hour))
	if e.Remaining != 20000 {
		t.Fatalf("remaining long after: %d, want the limit", e.Remaining)
	}
	// A windowed bucket (no rate) still waits for its reset.
	f := NewBucket()
	f.observe(&r, t0, time.Time{}, true, Default{}, 0)
	if w, _ := f.waitUnits(p, 3000, t0); w < 54*time.Second {
		t.Fatalf("windowed bucket wait %v, want the reset's 54 s", w)
	}
}

// Resets in whole seconds understate the rate: the most any reading gave
// is kept. A request short of units while others are in flight waits on
// their answers (which may give back what they over-reserved), at most
// until the units have dripped back.
func TestContinuousRefillRateAndInFlight(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	b := NewBucket()
	// 3,201 lacking at most (the count is rounded down), refilled in 2 s.
	exact := headers.Reading{Status: 200, Limit: 8000, Remaining: 4799, Used: UnknownCount, Reset: t0.Add(2 * time.Second)}
	b.observe(&exact, t0, time.Time{}, true, Default{}, 0)
	b.learnRefill(&exact, t0)
	// 1,600 a second. A reading whose reset was rounded up to the next
	// second says 800 a second: not believed.
	t1 := t0.Add(1500 * time.Millisecond)
	rounded := headers.Reading{Status: 200, Limit: 8000, Remaining: 6400, Used: UnknownCount, Reset: t1.Add(2 * time.Second)}
	b.observe(&rounded, t1, time.Time{}, true, Default{}, 0)
	b.learnRefill(&rounded, t1)
	if b.Refill != 1600 {
		t.Fatalf("refill %v a second, want the 1,600 the exact reading gave", b.Refill)
	}
	b.take(Policy{Kind: Greedy}, Lease{ID: 1, Until: t1.Add(time.Minute), Units: 6000}, t1)
	w, onAnswer := b.waitUnits(Policy{Kind: Greedy}, 2048, t1)
	// 400 left of 6,400 after the 6,000 in flight: 1,648 more take 1.03 s.
	if !onAnswer || w < time.Second || w > 1050*time.Millisecond {
		t.Fatalf("wait %v (on an answer: %v), want 1.03 s or the next answer", w, onAnswer)
	}
}

// The remaining an answer states is the bucket's level rounded down: a
// small bucket (30 requests a 5 s minute, 6 a second) read at 2 left and
// full in 4.517 s (its level was 2.9) refills at most 6 a second, not the
// 28 ÷ 4.517 = 6.2 its rounded count would say, or its waiters would go
// early.
func TestContinuousRefillFromARoundedDownCount(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	b := NewBucket()
	r := headers.Reading{Status: 200, Limit: 30, Remaining: 2, Used: UnknownCount, Reset: t0.Add(4517 * time.Millisecond)}
	b.observe(&r, t0, time.Time{}, true, Default{}, 0)
	b.learnRefill(&r, t0)
	if b.Refill > 6 || b.Refill < 5.9 {
		t.Fatalf("refill %v a second, want at most the true 6", b.Refill)
	}
}
