package fetch

import (
	"testing"
	"time"
)

func TestRateMeterFollowsThePace(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	var m rateMeter
	m.add(t0, 0)
	if r := m.rate(); r != 0 {
		t.Errorf("rate of one sample = %v, want 0 (unknown)", r)
	}
	// A burst of 100 URLs/s for a minute ...
	for s := 1; s <= 60; s++ {
		m.add(t0.Add(time.Duration(s)*time.Second), 100*s)
	}
	if r := m.rate(); r != 100 {
		t.Errorf("rate during the burst = %v, want 100", r)
	}
	// ... then 10/s, paced by quota: after a window the rate says so.
	for s := 61; s <= 90; s++ {
		m.add(t0.Add(time.Duration(s)*time.Second), 6000+10*(s-60))
	}
	if r := m.rate(); r != 10 {
		t.Errorf("rate a window after the pace changed = %v, want 10", r)
	}
	if n := len(m.samples); n > int(rateWindow/time.Second)+1 {
		t.Errorf("%d samples kept, want at most a window's", n)
	}
	// Nothing finishes for a window: the rate is 0, no ETA.
	for s := 91; s <= 121; s++ {
		m.add(t0.Add(time.Duration(s)*time.Second), 6300)
	}
	if r := m.rate(); r != 0 {
		t.Errorf("rate while nothing finishes = %v, want 0", r)
	}
}
