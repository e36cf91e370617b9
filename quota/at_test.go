package quota

import (
	"testing"
	"time"
)

// A report after the reset shows the window rolled over (refilled,
// assumed, the next reset), leaving the bucket itself as it was.
func TestAtRollsTheWindowOver(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	b := Bucket{Limit: 50, Remaining: 49, Reset: now.Add(10 * time.Second), Window: time.Minute}
	if at := b.At(now); at.Remaining != 49 || at.Assumed || !at.Reset.Equal(b.Reset) {
		t.Errorf("before the reset: %d left, assumed %v, reset %s", at.Remaining, at.Assumed, at.Reset)
	}
	later := now.Add(2 * time.Minute)
	at := b.At(later)
	if at.Remaining != 50 || !at.Assumed || !at.Reset.After(later) || at.Reset.Sub(later) > time.Minute {
		t.Errorf("after the reset: %d left, assumed %v, reset in %s; want 50, assumed, within a minute", at.Remaining, at.Assumed, at.Reset.Sub(later))
	}
	if b.Remaining != 49 || b.Assumed {
		t.Error("At changed the bucket")
	}
	noWindow := Bucket{Limit: 50, Remaining: 49, Reset: now.Add(10 * time.Second)}
	if at := noWindow.At(later); at.Remaining != 50 || !at.Reset.IsZero() {
		t.Errorf("without a window: %d left, reset %s; want 50 and no reset", at.Remaining, at.Reset)
	}
}
