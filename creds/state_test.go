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
		{"invalid", func() bool { return c.MarkInvalid("GET /user answered 401 Unauthorized", at(5*time.Hour), time.Time{}) }, true, at(5 * time.Hour), Status{State: Invalid, Reason: "GET /user answered 401 Unauthorized", Since: at(5 * time.Hour)}},
		{"invalid is terminal: invalid", func() bool { return c.MarkInvalid("again", at(6*time.Hour), time.Time{}) }, false, at(6 * time.Hour), Status{State: Invalid, Reason: "GET /user answered 401 Unauthorized", Since: at(5 * time.Hour)}},
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

func TestEligibility(t *testing.T) {
	c := NewToken("github", 1, "tok-alice-1", "test")
	if !c.Eligible(at(0)) {
		t.Error("unknown not eligible")
	}
	c.MarkValidated(at(time.Minute))
	if !c.Eligible(at(time.Minute)) {
		t.Error("available not eligible")
	}
	c.MarkInvalid("revoked", at(4*time.Minute), time.Time{})
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
				c.MarkValidated(now)
				_ = c.Status(now)
				_ = c.BucketOwner()
				if j == 100 && c.MarkInvalid("test", now, time.Time{}) {
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
	p.last = 0                         // the first turn starts at the first credential
	if p.Len() != 4 || p.Provider() != "github" || p.ByIndex(3) != c || p.ByIndex(9) != nil {
		t.Fatal("pool basics")
	}
	if got := p.Credentials(); !slices.Equal(got, []*Credential{a, b, c, d}) {
		t.Errorf("Credentials = %v", got)
	}
	d.MarkInvalid("401", at(0), time.Time{})
	if got := p.Eligible(at(time.Minute)); !slices.Equal(got, []*Credential{a, b, c}) {
		t.Errorf("Eligible = %v", got)
	}
	// Turns start one further each time, in index order, wrapping, and
	// skip invalid credentials.
	var firsts []int
	for range 5 {
		turn := p.AppendTurn(nil, at(time.Minute))
		if len(turn) != 3 {
			t.Fatalf("turn = %v, want the three usable credentials", turn)
		}
		firsts = append(firsts, turn[0].Index())
	}
	if want := []int{1, 2, 3, 1, 2}; !slices.Equal(firsts, want) {
		t.Errorf("turns start with %v, want %v", firsts, want)
	}
	if got := p.AppendTurn(nil, at(time.Minute)); !slices.Equal(got, []*Credential{c, a, b}) {
		t.Errorf("turn = %v, want [c a b]", got)
	}
	a.MarkInvalid("401", at(0), time.Time{})
	b.MarkInvalid("401", at(0), time.Time{})
	c.MarkInvalid("401", at(0), time.Time{})
	if got := p.AppendTurn(nil, at(time.Minute)); len(got) != 0 {
		t.Errorf("all invalid: turn = %v", got)
	}
}

// Pools of the same credentials start their turns at credentials drawn at
// random, so that processes given the same tokens do not all prefer the
// same one at the same moments (and queue on its bucket's row of a shared
// database).
func TestPoolsStartTurnsAtRandom(t *testing.T) {
	cs := []*Credential{
		NewToken("github", 1, "tok-a-111111", "t"), NewToken("github", 2, "tok-b-222222", "t"),
		NewToken("github", 3, "tok-c-333333", "t"), NewToken("github", 4, "tok-d-444444", "t"),
	}
	firsts := map[int]int{}
	for range 200 {
		turn := NewPool("github", cs...).AppendTurn(nil, at(0))
		if len(turn) != len(cs) {
			t.Fatalf("turn = %v, want all four", turn)
		}
		firsts[turn[0].Index()]++
	}
	// Each credential comes first in a quarter of the pools: 200 draws
	// miss one with a chance of 4 × (3/4)²⁰⁰, about 10⁻²⁴.
	if len(firsts) != len(cs) {
		t.Errorf("first turns of 200 pools started at credentials %v, want every one of 1 to 4", firsts)
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

func TestInvalidMarkIsRetriedAtItsTime(t *testing.T) {
	c := NewToken("github", 1, "tok-alice-1", "test")
	if !c.MarkInvalid("GET /repos/o/r answered 401", at(0), at(time.Hour)) {
		t.Fatal("not marked")
	}
	if c.Eligible(at(59 * time.Minute)) {
		t.Fatal("eligible before its retry time")
	}
	if got := c.Status(at(time.Hour)); got.State != Unknown || !got.Since.Equal(at(time.Hour)) {
		t.Fatalf("at its retry time: %+v, want Unknown since then", got)
	}
	// Tried again and refused again: a new mark, with a new retry time.
	if !c.MarkInvalid("again", at(2*time.Hour), at(3*time.Hour)) || c.Eligible(at(2*time.Hour)) {
		t.Fatal("not marked again")
	}
	// Validate marks for good; the transport then sets its period.
	d := NewToken("github", 2, "tok-alice-2", "test")
	d.MarkInvalid("GET /user answered 401", at(0), time.Time{})
	d.RetryInvalidAt(at(time.Hour))
	if d.Eligible(at(time.Minute)) || !d.Eligible(at(time.Hour)) {
		t.Fatal("RetryInvalidAt not applied")
	}
}
