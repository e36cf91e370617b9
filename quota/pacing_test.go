package quota

import (
	"testing"
	"time"
)

// sendAll reserves n requests at now, each as soon as the bucket allows,
// and returns when each went (relative to now). Leases are settled at once
// so only the spacing binds.
func sendAll(b *Bucket, p Policy, n int, now time.Time) []time.Duration {
	var at []time.Duration
	t := now
	for len(at) < n {
		l := lz(t)
		if w := b.Reserve(p, l, t); w > 0 {
			t = t.Add(w)
			continue
		}
		b.Release(l.ID)
		at = append(at, t.Sub(now))
	}
	return at
}

// A spread bucket of 1,000 over an hour with velocity 1 spaces requests
// 3.6 s apart; a burst of 5 lets 6 go at once (the first plus 5 intervals
// of tolerance) before the spacing applies.
func TestBurst(t *testing.T) {
	p := Policy{Kind: Spread, Velocity: 1}
	b := NewBucket()
	b.Observe(reading(1000, 1000, t0.Add(time.Hour)), t0, true, Default{})
	at := sendAll(&b, p, 3, t0)
	if at[0] != 0 || at[1] < 3*time.Second || at[2]-at[1] < 3*time.Second {
		t.Fatalf("without a burst: %v, want about 3.6s apart", at)
	}
	p.Burst = 5
	b = NewBucket()
	b.Observe(reading(1000, 1000, t0.Add(time.Hour)), t0, true, Default{})
	at = sendAll(&b, p, 8, t0)
	for i := range 6 {
		if at[i] != 0 {
			t.Fatalf("burst of 5: request %d went at %v, want at once: %v", i+1, at[i], at)
		}
	}
	if at[6] < 3*time.Second || at[7]-at[6] < 3*time.Second {
		t.Fatalf("after the burst: %v, want the spacing again", at)
	}
}

// MinDelay floors every policy's spacing, greedy's included; MaxDelay
// caps what spread computes.
func TestMinAndMaxInterval(t *testing.T) {
	b := NewBucket()
	b.Observe(reading(1000, 1000, t0.Add(time.Hour)), t0, true, Default{})
	at := sendAll(&b, Policy{Kind: Greedy, MinDelay: 250 * time.Millisecond}, 4, t0)
	if at[3] != 750*time.Millisecond {
		t.Fatalf("greedy with a 250ms floor: %v, want 250ms apart", at)
	}
	// Two left for an hour: spread would wait 20 minutes; capped at 1s.
	b = NewBucket()
	b.Observe(reading(1000, 3, t0.Add(time.Hour)), t0, true, Default{})
	at = sendAll(&b, Policy{Kind: Spread, Velocity: 1, MaxDelay: time.Second}, 3, t0)
	if at[1] != time.Second || at[2] != 2*time.Second {
		t.Fatalf("spread capped at 1s: %v", at)
	}
	for _, bad := range []Policy{{Kind: Spread, MinDelay: 2 * time.Second, MaxDelay: time.Second},
		{Kind: Spread, Burst: -1}, {Kind: Spread, MinDelay: -time.Second}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
