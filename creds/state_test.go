package creds

import (
	"slices"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestStateMachine(t *testing.T) {
	c := NewToken("github", 1, "tok-alice-1", "test")
	type step struct {
		name    string
		do      func() bool
		changed bool
		check   time.Time
		want    Status
	}
	steps := []step{
		{"starts unknown", func() bool { return false }, false, at(0), Status{State: Unknown}},
		{"validated", func() bool { return c.MarkValidated(at(1 * time.Second)) }, true, at(2 * time.Second), Status{State: Available, Since: at(time.Second)}},
		{"validated again is no change", func() bool { return c.MarkValidated(at(3 * time.Second)) }, false, at(3 * time.Second), Status{State: Available, Since: at(time.Second)}},
		{"exhausted", func() bool { return c.MarkExhausted(at(time.Hour), at(10*time.Second)) }, true, at(time.Minute), Status{State: Exhausted, Until: at(time.Hour), Since: at(10 * time.Second)}},
		{"earlier until is stale", func() bool { return c.MarkExhausted(at(30*time.Minute), at(20*time.Second)) }, false, at(time.Minute), Status{State: Exhausted, Until: at(time.Hour), Since: at(10 * time.Second)}},
		{"later until lengthens", func() bool { return c.MarkExhausted(at(2*time.Hour), at(30*time.Second)) }, true, at(time.Minute), Status{State: Exhausted, Until: at(2 * time.Hour), Since: at(10 * time.Second)}},
		{"validation does not clear exhaustion", func() bool { return c.MarkValidated(at(time.Minute)) }, false, at(time.Minute), Status{State: Exhausted, Until: at(2 * time.Hour), Since: at(10 * time.Second)}},
		{"reads available once until passes", func() bool { return false }, false, at(2 * time.Hour), Status{State: Available, Since: at(2 * time.Hour)}},
		{"exhausted again after reset", func() bool { return c.MarkExhausted(at(4*time.Hour), at(3*time.Hour)) }, true, at(3 * time.Hour), Status{State: Exhausted, Until: at(4 * time.Hour), Since: at(3 * time.Hour)}},
		{"until in the past is ignored", func() bool { return c.MarkExhausted(at(3*time.Hour), at(3*time.Hour)) }, false, at(3 * time.Hour), Status{State: Exhausted, Until: at(4 * time.Hour), Since: at(3 * time.Hour)}},
		{"available clears exhaustion", func() bool { return c.MarkAvailable(at(3*time.Hour + time.Minute)) }, true, at(3*time.Hour + time.Minute), Status{State: Available, Since: at(3*time.Hour + time.Minute)}},
		{"invalid", func() bool { return c.MarkInvalid("GET /user answered 401 Unauthorized", at(5*time.Hour)) }, true, at(5 * time.Hour), Status{State: Invalid, Reason: "GET /user answered 401 Unauthorized", Since: at(5 * time.Hour)}},
		{"invalid is terminal: invalid", func() bool { return c.MarkInvalid("again", at(6*time.Hour)) }, false, at(6 * time.Hour), Status{State: Invalid, Reason: "GET /user answered 401 Unauthorized", Since: at(5 * time.Hour)}},
		{"invalid is terminal: available", func() bool { return c.MarkAvailable(at(6 * time.Hour)) }, false, at(6 * time.Hour), Status{State: Invalid, Reason: "GET /user answered 401 Unauthorized", Since: at(5 * time.Hour)}},
		{"invalid is terminal: exhausted", func() bool { return c.MarkExhausted(at(9*time.Hour), at(6*time.Hour)) }, false, at(6 * time.Hour), Status{State: Invalid, Reason: "GET /user answered 401 Unauthorized", Since: at(5 * time.Hour)}},
		{"invalid is terminal: validated", func() bool { return c.MarkValidated(at(6 * time.Hour)) }, false, at(7 * time.Hour), Status{State: Invalid, Reason: "GET /user answered 401 Unauthorized", Since: at(5 * time.Hour)}},
	}
	for _, s := range steps {
		if changed := s.do(); changed != s.changed {
			t.Errorf("%s: changed = %v, want %v", s.name, changed, s.changed)
		}
		if got := c.Status(s.check); got != s.want {
			t.Errorf("%s: Status(%v) = %+v, want %+v", s.name, s.check.Sub(t0), got, s.want)
		}
	}
}

func TestUnknownToExhaustedAndEligibility(t *testing.T) {
	c := NewToken("github", 1, "tok-alice-1", "test")
	if !c.Eligible(at(0)) {
		t.Error("unknown not eligible")
	}
	c.MarkExhausted(at(time.Minute), at(0))
	if c.Eligible(at(59*time.Second)) || !c.Eligible(at(time.Minute)) {
		t.Error("eligibility around until wrong")
	}
	if c.MarkAvailable(at(2 * time.Minute)) {
		t.Error("settling an expired exhaustion reported a change")
	}
	if got := c.Status(at(3 * time.Minute)); got != (Status{State: Available, Since: at(time.Minute)}) {
		t.Errorf("after settling: %+v", got)
	}
	c.MarkInvalid("revoked", at(4*time.Minute))
	if c.Eligible(at(time.Hour)) {
		t.Error("invalid eligible")
	}
}

func TestStateConcurrent(t *testing.T) {
	c := NewToken("github", 1, "tok-alice-1", "test")
	var wg sync.WaitGroup
	var mu sync.Mutex
	invalidations := 0
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				now := at(time.Duration(i*1000+j) * time.Millisecond)
				c.MarkAvailable(now)
				c.MarkExhausted(now.Add(time.Second), now)
				_ = c.Status(now)
				_ = c.BucketOwner()
				if j == 100 && c.MarkInvalid("test", now) {
					mu.Lock()
					invalidations++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if invalidations != 1 || c.State(at(time.Hour)) != Invalid {
		t.Errorf("invalidations = %d, state %s", invalidations, c.State(at(time.Hour)))
	}
}

func TestPool(t *testing.T) {
	a := NewToken("github", 1, "tok-a-111111", "t")
	b := NewToken("github", 2, "tok-b-222222", "t")
	c := NewToken("github", 3, "tok-c-333333", "t")
	d := NewToken("github", 4, "tok-d-444444", "t")
	p := NewPool("github", d, b, c, a) // ordered by index whatever the order given
	if p.Len() != 4 || p.Provider() != "github" || p.ByIndex(3) != c || p.ByIndex(9) != nil {
		t.Fatal("pool basics")
	}
	if got := p.Credentials(); !slices.Equal(got, []*Credential{a, b, c, d}) {
		t.Errorf("Credentials = %v", got)
	}
	c.MarkExhausted(at(time.Hour), at(0))
	d.MarkInvalid("401", at(0))
	if got := p.Eligible(at(time.Minute)); !slices.Equal(got, []*Credential{a, b}) {
		t.Errorf("Eligible = %v", got)
	}
	if got := p.Eligible(at(time.Hour)); !slices.Equal(got, []*Credential{a, b, c}) {
		t.Errorf("Eligible after reset = %v", got)
	}
	// Ties take turns in index order, wrapping, skipping non-candidates.
	var picks []int
	for _, cands := range [][]*Credential{{a, b, c}, {a, b, c}, {a, b, c}, {a, b, c}, {a, c}, {b, a}, {b}, nil} {
		if got := p.Next(cands); got != nil {
			picks = append(picks, got.Index())
		} else {
			picks = append(picks, 0)
		}
	}
	if want := []int{1, 2, 3, 1, 3, 1, 2, 0}; !slices.Equal(picks, want) {
		t.Errorf("Next picks = %v, want %v", picks, want)
	}
}

func TestPoolEarliestEligible(t *testing.T) {
	a := NewToken("github", 1, "tok-a-111111", "t")
	b := NewToken("github", 2, "tok-b-222222", "t")
	p := NewPool("github", a, b)
	if got, ok := p.EarliestEligible(at(0)); !ok || !got.Equal(at(0)) {
		t.Errorf("all usable: %v %v", got, ok)
	}
	a.MarkExhausted(at(time.Hour), at(0))
	b.MarkExhausted(at(20*time.Minute), at(0))
	if got, ok := p.EarliestEligible(at(time.Minute)); !ok || !got.Equal(at(20*time.Minute)) {
		t.Errorf("both exhausted: %v %v, want the sooner reset", got.Sub(t0), ok)
	}
	b.MarkInvalid("revoked", at(2*time.Minute))
	if got, ok := p.EarliestEligible(at(3 * time.Minute)); !ok || !got.Equal(at(time.Hour)) {
		t.Errorf("one invalid: %v %v", got.Sub(t0), ok)
	}
	a.MarkInvalid("revoked", at(4*time.Minute))
	if _, ok := p.EarliestEligible(at(5 * time.Minute)); ok {
		t.Error("all invalid still eligible some day")
	}
	if _, ok := NewPool("x").EarliestEligible(at(0)); ok {
		t.Error("empty pool eligible")
	}
}

func TestBucketsAndOwners(t *testing.T) {
	a := NewToken("github", 1, "tok-alice-1", "t")
	a2 := NewToken("github", 2, "tok-alice-2", "t")
	b := NewToken("github", 3, "tok-bob-1xx", "t")
	u := NewToken("github", 4, "tok-unknown", "t")
	anon := NewAnonymous("github", 5)
	if a.BucketOwner() == a2.BucketOwner() || !isTokenIdentity(a.BucketOwner()) {
		t.Errorf("unknown owners share or look wrong: %s %s", a.BucketOwner(), a2.BucketOwner())
	}
	if NewToken("github", 9, "tok-alice-1", "other process").BucketOwner() != a.BucketOwner() {
		t.Error("per-token identity differs between instances of one token")
	}
	a.SetOwner(ownerOf("alice", "100"))
	a2.SetOwner(ownerOf("alice", "100"))
	b.SetOwner(ownerOf("bob", "200"))
	if a.BucketOwner() != "user:100" || a2.BucketOwner() != "user:100" || b.BucketOwner() != "user:200" {
		t.Errorf("owners: %s %s %s", a.BucketOwner(), a2.BucketOwner(), b.BucketOwner())
	}
	if a.Owner() != ownerOf("alice", "100") {
		t.Errorf("Owner = %+v", a.Owner())
	}
	p := NewPool("github", a, a2, b, u, anon)
	var groups [][]int
	for _, g := range p.Buckets() {
		var idx []int
		for _, c := range g {
			idx = append(idx, c.Index())
		}
		groups = append(groups, idx)
	}
	if want := [][]int{{1, 2}, {3}, {4}, {5}}; !slices.EqualFunc(groups, want, slices.Equal) {
		t.Errorf("Buckets = %v, want %v", groups, want)
	}
	// Inference: u shares b's bucket; a known owner is not overridden.
	u.ShareBucketWith(b)
	a.ShareBucketWith(b)
	if u.BucketOwner() != "user:200" || a.BucketOwner() != "user:100" {
		t.Errorf("after inference: u %s, a %s", u.BucketOwner(), a.BucketOwner())
	}
}

func isTokenIdentity(s string) bool {
	if len(s) != len("token:")+16 || s[:6] != "token:" {
		return false
	}
	for _, r := range s[6:] {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

func TestSameBucket(t *testing.T) {
	reset := time.Unix(1_800_000_000, 0)
	base := Usage{Resource: "core", Limit: 5000, Used: 120, Reset: reset, At: at(0)}
	with := func(f func(*Usage)) Usage { u := base; f(&u); return u }
	tests := []struct {
		name string
		b    Usage
		want bool
	}{
		{"identical", with(func(u *Usage) { u.At = at(time.Second) }), true},
		{"reset within the same second", with(func(u *Usage) { u.Reset = reset.Add(400 * time.Millisecond) }), true},
		{"other resource", with(func(u *Usage) { u.Resource = "search" }), false},
		{"other limit", with(func(u *Usage) { u.Limit = 15000 }), false},
		{"other used", with(func(u *Usage) { u.Used = 121 }), false},
		{"other reset", with(func(u *Usage) { u.Reset = reset.Add(time.Second) }), false},
		{"too far apart", with(func(u *Usage) { u.At = at(3 * time.Second) }), false},
		{"too far apart, other order", with(func(u *Usage) { u.At = at(-3 * time.Second) }), false},
	}
	for _, tt := range tests {
		if got := SameBucket(base, tt.b); got != tt.want {
			t.Errorf("%s: SameBucket = %v, want %v", tt.name, got, tt.want)
		}
		if got := SameBucket(tt.b, base); got != tt.want {
			t.Errorf("%s (swapped): SameBucket = %v, want %v", tt.name, got, tt.want)
		}
	}
	fresh := with(func(u *Usage) { u.Used = 0 })
	if SameBucket(fresh, fresh) {
		t.Error("fresh buckets (used 0) inferred shared")
	}
	noLimit := Usage{Resource: "core", Used: 3, Reset: reset}
	if SameBucket(noLimit, noLimit) {
		t.Error("readings without a limit inferred shared")
	}
}
