package creds

import (
	"slices"
	"testing"
	"time"
)

// model is a server counting requests per user, as GitHub does: one
// counter and one reset per user, whatever token of the user is sent.
type model struct {
	owner map[*Credential]string
	used  map[string]int
	reset map[string]time.Time
	now   time.Time
}

func newModel() *model {
	return &model{owner: map[*Credential]string{}, used: map[string]int{}, reset: map[string]time.Time{}}
}

func (m *model) token(index int, user string) *Credential {
	c := NewToken("github", index, "tok-"+user+"-"+string(rune('a'+index)), "test")
	m.owner[c] = user
	return c
}

// answer counts one request of c and returns what its answer says.
func (m *model) answer(c *Credential) Usage {
	u := m.owner[c]
	m.used[u]++
	r, ok := m.reset[u]
	if !ok {
		r = t0.Add(time.Hour)
	}
	m.now = m.now.Add(100 * time.Millisecond)
	return Usage{Resource: "core", Limit: 5000, Used: m.used[u], Reset: r, At: t0.Add(m.now.Sub(time.Time{}))}
}

// learn runs the learner as the transport does, one request at a time,
// each with the credential Next names (or the first credential), until it
// has learnt everything or n requests went. It returns the requests sent.
func learn(t *testing.T, l *Learner, m *model, all []*Credential, n int) int {
	t.Helper()
	sent := 0
	for l.Learning() && sent < n {
		c := l.Next()
		if c == nil {
			c = all[0]
		}
		l.Observe(c, m.answer(c), true)
		sent++
	}
	if l.Learning() {
		t.Fatalf("still learning after %d requests", sent)
	}
	return sent
}

func buckets(cs []*Credential) map[string][]int {
	out := map[string][]int{}
	for _, c := range cs {
		out[c.BucketOwner()] = append(out[c.BucketOwner()], c.Index())
	}
	return out
}

func TestLearnerMergesTokensOfOneUser(t *testing.T) {
	m := newModel()
	a, b := m.token(1, "alice"), m.token(2, "alice")
	l := NewLearner([]*Credential{a, b})
	sent := learn(t, l, m, []*Credential{a, b}, 10)
	if a.BucketOwner() != b.BucketOwner() {
		t.Fatalf("two tokens of one user kept apart: %v", buckets([]*Credential{a, b}))
	}
	if sent != 3 {
		t.Fatalf("learnt in %d requests, want 3 (probe, probe, confirmation)", sent)
	}
	if len(l.NeedsWhoAmI()) != 0 {
		t.Fatal("asked who am I although the counters told")
	}
}

func TestLearnerKeepsDistinctUsersApart(t *testing.T) {
	t.Run("different resets", func(t *testing.T) {
		m := newModel()
		a, b := m.token(1, "alice"), m.token(2, "bob")
		m.reset["bob"] = t0.Add(37 * time.Minute)
		l := NewLearner([]*Credential{a, b})
		if sent := learn(t, l, m, []*Credential{a, b}, 10); sent != 2 {
			t.Fatalf("learnt in %d requests, want 2 probes", sent)
		}
		if a.BucketOwner() == b.BucketOwner() {
			t.Fatal("merged two users")
		}
	})
	t.Run("equal resets, colliding used", func(t *testing.T) {
		// Fixed windows give every user one reset; bob happens to
		// have spent exactly one more than alice.
		m := newModel()
		a, b := m.token(1, "alice"), m.token(2, "bob")
		m.used["alice"], m.used["bob"] = 4, 5
		l := NewLearner([]*Credential{a, b})
		sent := learn(t, l, m, []*Credential{a, b}, 10)
		if a.BucketOwner() == b.BucketOwner() {
			t.Fatal("merged two users whose counters collided")
		}
		if sent != 3 {
			t.Fatalf("learnt in %d requests, want 3", sent)
		}
	})
}

func TestLearnerTellsALowerCountApartAtOnce(t *testing.T) {
	// Equal resets (fixed windows), bob's count below alice's: a probe
	// that counts at or below the group's last answer cannot share it.
	m := newModel()
	a, b := m.token(1, "alice"), m.token(2, "bob")
	m.used["alice"], m.used["bob"] = 10, 3
	l := NewLearner([]*Credential{a, b})
	if sent := learn(t, l, m, []*Credential{a, b}, 10); sent != 2 {
		t.Fatalf("learnt in %d requests, want 2", sent)
	}
	if a.BucketOwner() == b.BucketOwner() {
		t.Fatal("merged")
	}
}

func TestLearnerFiveTokensOfThreeUsers(t *testing.T) {
	m := newModel()
	cs := []*Credential{m.token(1, "alice"), m.token(2, "bob"), m.token(3, "alice"), m.token(4, "carol"), m.token(5, "bob")}
	m.reset["bob"] = t0.Add(20 * time.Minute)
	m.reset["carol"] = t0.Add(40 * time.Minute)
	l := NewLearner(cs)
	learn(t, l, m, cs, 20)
	got := buckets(cs)
	if len(got) != 3 || !slices.Equal(got[cs[0].BucketOwner()], []int{1, 3}) || !slices.Equal(got[cs[1].BucketOwner()], []int{2, 5}) {
		t.Fatalf("buckets %v, want {1,3} {2,5} {4}", got)
	}
}

func TestLearnerRefreshesKnownGroupsFirst(t *testing.T) {
	m := newModel()
	a, b := m.token(1, "alice"), m.token(2, "alice")
	a.KeepOwnBucket() // learnt in an earlier run
	l := NewLearner([]*Credential{a, b})
	if l.Next() != a {
		t.Fatal("probed before the known group had a fresh answer to compare with")
	}
	learn(t, l, m, []*Credential{a, b}, 10)
	if a.BucketOwner() != b.BucketOwner() {
		t.Fatal("not merged with the known group")
	}
}

func TestLearnerAsksWhoAmIWhenNothingTells(t *testing.T) {
	a, b := NewToken("gitea", 1, "tok-aaaa-1", "t"), NewToken("gitea", 2, "tok-bbbb-2", "t")
	l := NewLearner([]*Credential{a, b})
	l.Observe(a, Usage{Used: -1, Limit: -1}, true) // no counters at all
	if got := l.NeedsWhoAmI(); !slices.Equal(got, []*Credential{a}) {
		t.Fatalf("NeedsWhoAmI = %v", got)
	}
	// Another client spending the same bucket between the probe and the
	// confirmation proves nothing: tried again, then handed over — with
	// x, whose bucket was taken for its own only because it came first:
	// left there while "who am I" puts y in alice's bucket, x would be
	// paced as a second quota of alice's.
	m := newModel()
	x, y := m.token(1, "alice"), m.token(2, "alice")
	l = NewLearner([]*Credential{x, y})
	for range 20 {
		if !l.Learning() {
			break
		}
		c := l.Next()
		m.used["alice"] += 3 // someone else's requests in between
		l.Observe(c, m.answer(c), true)
	}
	if l.Learning() || y.BucketKnown() {
		t.Fatalf("learning %v, buckets %v", l.Learning(), buckets([]*Credential{x, y}))
	}
	if got := l.NeedsWhoAmI(); !slices.Equal(got, []*Credential{y, x}) {
		t.Fatalf("NeedsWhoAmI = %v, want y and x", got)
	}
}

func TestLearnerIgnoresUncountedAnswers(t *testing.T) {
	m := newModel()
	a, b := m.token(1, "alice"), m.token(2, "alice")
	l := NewLearner([]*Credential{a, b})
	l.Observe(a, m.answer(a), true)
	m.used["alice"]-- // a 304: the server did not count it
	l.Observe(b, Usage{Resource: "core", Limit: 5000, Used: m.used["alice"] + 1, Reset: t0.Add(time.Hour)}, false)
	if b.BucketKnown() || !l.Learning() || l.Next() != b {
		t.Fatal("an uncounted answer was taken as evidence")
	}
	m.used["alice"]++
	learn(t, l, m, []*Credential{a, b}, 10)
	if a.BucketOwner() != b.BucketOwner() {
		t.Fatal("not merged")
	}
}

// A probe that counts more than one above the group's last answer is not a
// candidate: in one bucket, with nobody else spending, it would count
// exactly one more. Another client spending alice's quota between bob's
// probe and alice's next answer must not merge two users on one
// coincidence (alice's next answer equal to bob's count plus one).
func TestLearnerNeverMergesOnOneCoincidence(t *testing.T) {
	m := newModel()
	a, b := m.token(1, "alice"), m.token(2, "bob")
	m.used["alice"], m.used["bob"] = 10, 19
	a.KeepOwnBucket()
	l := NewLearner([]*Credential{a, b})
	for range 20 {
		if !l.Learning() {
			break
		}
		c := l.Next()
		if c == nil {
			c = a
		}
		u := m.answer(c)
		if c == b {
			// Another client spends 2 of alice's quota between
			// bob's probe and alice's next answer, which then
			// counts exactly one above bob's probe.
			m.used["alice"] = u.Used
		}
		l.Observe(c, u, true)
	}
	if a.BucketOwner() == b.BucketOwner() {
		t.Fatal("alice and bob merged on one coincidence")
	}
}

// Another process's requests, sent between this learner's probe and its
// confirmation, can fake one bucket: alice's group seen at 1, another
// process sends one of alice's (2), bob's probe happens to count 2 — one
// more than alice's last, as in one bucket — and alice's confirmation
// counts 3, one more than the probe. Forget, called when another process
// held the turn in between, drops the counters seen before: the probe is
// sent again after alice's group is asked afresh, and the buckets come out
// apart.
func TestForgetKeepsOtherProcessesFromFakingOneBucket(t *testing.T) {
	m := newModel()
	a, b := m.token(1, "alice"), m.token(2, "bob")
	l := NewLearner([]*Credential{a, b})
	l.Observe(a, m.answer(a), true) // a: its own bucket, alice at 1
	m.used["alice"]++               // another process's request of alice's
	m.used["bob"]++                 // and bob at 1, so his probe counts 2
	if c := l.Next(); c != b {
		t.Fatalf("Next = %v, want the probe of b", c)
	}
	l.Observe(b, m.answer(b), true)
	if got := l.MayShare(b); !slices.Equal(got, []string{a.BucketOwner()}) {
		t.Fatalf("MayShare(b) = %v while b is alice's candidate", got)
	}
	l.Forget()
	if got := l.MayShare(b); got != nil {
		t.Fatalf("MayShare(b) = %v after Forget, want nil (unknown)", got)
	}
	learn(t, l, m, []*Credential{a, b}, 10)
	if a.BucketOwner() == b.BucketOwner() {
		t.Fatal("alice's and bob's tokens merged on counters another process moved")
	}
	if got := l.MayShare(b); !slices.Equal(got, []string{b.ID()}) {
		t.Fatalf("MayShare(b) = %v, want its own bucket", got)
	}
}

// A GraphQL query counts its points: a probe is one bucket's next count
// when it counts its own units above the group's last answer, and its
// confirmation the confirming query's units above the probe.
func TestLearnerCountsUnits(t *testing.T) {
	m := newModel()
	a, b, c := m.token(1, "alice"), m.token(2, "bob"), m.token(3, "alice")
	l := NewLearner([]*Credential{a, b, c})
	costs := []int{33, 40, 5, 12, 21, 1, 8, 30, 17, 26}
	for k := 0; l.Learning() && k < 30; k++ {
		x := l.Next()
		if x == nil {
			x = a
		}
		cost := costs[k%len(costs)]
		u := m.answer(x)
		m.used[m.owner[x]] += cost - 1
		u.Used += cost - 1
		u.Units = cost
		l.Observe(x, u, true)
	}
	if l.Learning() || len(l.NeedsWhoAmI()) != 0 {
		t.Fatalf("still learning %v, or handed to \"who am I\"", l.Learning())
	}
	if got := buckets([]*Credential{a, b, c}); len(got) != 2 || a.BucketOwner() != c.BucketOwner() {
		t.Fatalf("buckets %v, want alice's 1 and 3 apart from bob's 2", got)
	}
}

// A window's end tells two buckets apart only on the server's clock. Our
// clock's resets move with the estimate of the server's clock made at
// each answer, which an answer received long after its Date (a loaded
// machine) leaves loose by seconds: alice's first answer, received 2 s
// after its Date, put her window's end 2 s late, so her second token's
// probe, counted just after the window turned, looked sent before it
// ended with a new reset — "forwards before the window ended", proof of
// another bucket. On the server's clock it came after the end: nothing
// is proven, and the probe is tried again.
func TestLearnerJudgesWindowsOnTheServersClock(t *testing.T) {
	a, b := NewToken("github", 1, "tok-alice-1", "test"), NewToken("github", 2, "tok-alice-2", "test")
	l := NewLearner([]*Credential{a, b})
	end := t0.Add(5 * time.Second) // alice's window on the server's clock
	first := Usage{Resource: "core", Limit: 60, Used: 30, Reset: end.Add(2 * time.Second), At: end.Add(-500 * time.Millisecond),
		ServerReset: end, ServerAt: end.Add(-2500 * time.Millisecond)}
	if got := l.Observe(a, first, true); len(got) != 1 || got[0] != a {
		t.Fatalf("first answer settled %v, want alice's first token as a bucket of its own so far", got)
	}
	probe := Usage{Resource: "core", Limit: 60, Used: 1, Reset: end.Add(5 * time.Second), At: end.Add(50 * time.Millisecond),
		ServerReset: end.Add(5 * time.Second), ServerAt: end}
	if got := l.Observe(b, probe, true); len(got) != 0 {
		t.Fatalf("the probe in the next window settled %v as a bucket of its own", got)
	}
	if !l.Learning() {
		t.Fatal("learning ended on a probe that proves nothing")
	}
}
