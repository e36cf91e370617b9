package statetest

import (
	"errors"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/transport"
)

// These cases are what a State learns from answers (issue: learn from the
// server): the owner's concurrency, episodes of secondary refusals, pauses
// and refills, and the reserve. Each is decided by package quota; the
// suite proves every State keeps what it decided.

func settleAnswer(t *testing.T, s transport.State, sl transport.Slot, lease uint64, a quota.Answer, now time.Time) {
	t.Helper()
	if err := s.Settle(t.Context(), &transport.SettleParams{Slot: sl, Lease: lease, Now: now, Answer: a}); err != nil {
		t.Fatalf("Settle: %v", err)
	}
}

// secondary is a secondary refusal's reading, with Retry-After when ra > 0.
func secondary(ra time.Duration) *headers.Reading {
	r := ok(5000, 4000, t0.Add(time.Hour))
	r.Status, r.Limited = 403, headers.Secondary
	if ra > 0 {
		r.HasRetryAfter, r.RetryAfter = true, ra
	}
	return r
}

// fill reserves until the owner's cap stops it, and returns the leases.
func fill(t *testing.T, s transport.State, ask quota.Ask, l *leases, now time.Time, sl transport.Slot) []quota.Lease {
	t.Helper()
	var held []quota.Lease
	for range 100 {
		lease := l.at(now)
		if _, w := reserve(t, s, ask, lease, now, sl); w > 0 {
			return held
		}
		held = append(held, lease)
	}
	t.Fatal("no cap stopped 100 requests")
	return nil
}

func testAIMD(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	known(t, s, a, 5000, 5000, t0.Add(time.Hour), t0)
	ask := capped(20)
	ans := func(r *headers.Reading, sent time.Time) quota.Answer {
		return quota.Answer{Reading: r, Counted: true, Sent: sent, Secondary: ask.Secondary}
	}
	if held := fill(t, s, ask, &l, t0, a); len(held) != quota.RampStart {
		t.Fatalf("a new owner took %d in flight, want %d", len(held), quota.RampStart)
	} else {
		for _, h := range held {
			settleAnswer(t, s, a, h.ID, ans(ok(5000, 4000, t0.Add(time.Hour)), t0), t0)
		}
	}
	// A round of successes as long as the cap raised it by one.
	held := fill(t, s, ask, &l, t0, a)
	if len(held) != quota.RampStart+1 {
		t.Fatalf("after a round of successes %d in flight, want %d", len(held), quota.RampStart+1)
	}
	// The server refuses the fifth: it allows 4. The others in flight are
	// refused too, in the same episode.
	at := t0.Add(40 * time.Millisecond)
	settleAnswer(t, s, a, held[len(held)-1].ID, ans(secondary(time.Second), t0), at)
	for _, h := range held[:len(held)-1] {
		settleAnswer(t, s, a, h.ID, ans(secondary(time.Second), t0), at)
	}
	o := ownerOf(t, s, a)
	if c := o.ConcurrencyCap(ask.Secondary, at); c != 4 || o.Strikes != 1 {
		t.Fatalf("after the refusal: cap %d, %d strikes; want 4 (5 in flight − 1), 1", c, o.Strikes)
	}
	after := at.Add(time.Second)
	if held := fill(t, s, ask, &l, after, a); len(held) != 4 {
		t.Fatalf("after the pause %d in flight, want the learnt 4", len(held))
	} else {
		for _, h := range held {
			settleAnswer(t, s, a, h.ID, ans(ok(5000, 3900, t0.Add(time.Hour)), after), after)
		}
	}
	// It holds ten pauses (10 s) from the end of the pause, then a round
	// of successes at its level raises it by one.
	hold := quota.CapHoldPauses * time.Second
	for _, c := range []struct {
		d    time.Duration
		want int
	}{{hold - time.Second, 4}, {hold + time.Second, 4}, {hold + 2*time.Second, 5}} {
		now := after.Add(c.d)
		held := fill(t, s, ask, &l, now, a)
		if len(held) != c.want {
			t.Fatalf("%v after the pause: %d in flight, want %d", c.d, len(held), c.want)
		}
		for _, h := range held {
			settleAnswer(t, s, a, h.ID, ans(ok(5000, 3000, t0.Add(time.Hour)), now), now)
		}
	}
}

func testEpisode(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	known(t, s, a, 5000, 5000, t0.Add(time.Hour), t0)
	ask := capped(4)
	ask.Secondary.Wait = 6 * time.Second
	held := fill(t, s, ask, &l, t0, a)
	ans := func(sent time.Time) quota.Answer {
		return quota.Answer{Reading: secondary(0), Counted: true, Sent: sent, Secondary: ask.Secondary, Jitter: 0.5}
	}
	first := t0.Add(40 * time.Millisecond)
	for i, h := range held {
		settleAnswer(t, s, a, h.ID, ans(t0), first.Add(time.Duration(i)*time.Millisecond))
	}
	o := ownerOf(t, s, a)
	if o.Strikes != 1 || !o.PenaltyUntil.Equal(first.Add(6*time.Second)) {
		t.Fatalf("%d refusals of one episode: %d strikes, paused until +%v; want 1 and secondary_wait (6 s)",
			len(held), o.Strikes, o.PenaltyUntil.Sub(first))
	}
	// Refused again after the pause: a second strike, twice as long at
	// most (6 s + 0.5 × 6 s).
	end := o.PenaltyUntil
	lease := l.at(end)
	if _, w := reserve(t, s, ask, lease, end, a); w != 0 {
		t.Fatalf("at the end of the pause: wait %v", w)
	}
	settleAnswer(t, s, a, lease.ID, ans(end), end.Add(40*time.Millisecond))
	o = ownerOf(t, s, a)
	if o.Strikes != 2 || o.PenaltyUntil.Sub(end.Add(40*time.Millisecond)) != 9*time.Second {
		t.Fatalf("a refusal after the pause: %d strikes, pause %v; want 2, 9 s", o.Strikes, o.PenaltyUntil.Sub(end.Add(40*time.Millisecond)))
	}
}

func testNoResetRefills(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "pull")
	// Docker Hub: "ratelimit-remaining: 1;w=21600", no reset.
	r := &headers.Reading{Status: 200, Limit: 100, Remaining: 1, Used: quota.UnknownCount, Window: 6 * time.Hour}
	settleAnswer(t, s, a, 0, quota.Answer{Reading: r, Counted: true}, t0)
	lease := l.at(t0)
	if _, w := reserve(t, s, greedy, lease, t0, a); w != 0 {
		t.Fatalf("the last request: wait %v", w)
	}
	r = &headers.Reading{Status: 200, Limit: 100, Remaining: 0, Used: quota.UnknownCount, Window: 6 * time.Hour}
	settleAnswer(t, s, a, lease.ID, quota.Answer{Reading: r, Counted: true}, t0.Add(time.Second))
	_, w := reserve(t, s, greedy, l.at(t0.Add(time.Second)), t0.Add(time.Second), a)
	if refill := t0.Add(time.Second).Add(w); refill.Before(t0.Add(6*time.Hour)) || refill.After(t0.Add(6*time.Hour+time.Second)) {
		t.Fatalf("spent: waits until +%v, want the window's end (+6h)", refill.Sub(t0))
	}
	at := t0.Add(time.Second).Add(w)
	if _, w := reserve(t, s, greedy, l.at(at), at, a); w != 0 {
		t.Fatalf("after the window: wait %v; the bucket never refilled", w)
	}
}

func testPauseCapped(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a, c := slot("alice", "core"), slot("carol", "core")
	// A proxy's 429 with "Retry-After: 86400", and a secondary refusal
	// saying the same.
	r := &headers.Reading{Status: 429, Limited: headers.Primary, Limit: quota.UnknownCount, Remaining: quota.UnknownCount, Used: quota.UnknownCount,
		HasRetryAfter: true, RetryAfter: 24 * time.Hour}
	settleAnswer(t, s, a, 0, quota.Answer{Reading: r, Counted: true, MaxPause: 10 * time.Minute}, t0)
	if _, w := reserve(t, s, greedy, l.at(t0), t0, a); w != 10*time.Minute {
		t.Fatalf("Retry-After of a day, pauses capped at 10 min: wait %v", w)
	}
	known(t, s, c, 5000, 5000, t0.Add(time.Hour), t0)
	settleAnswer(t, s, c, 0, quota.Answer{Reading: secondary(24 * time.Hour), Counted: true}, t0)
	if _, w := reserve(t, s, greedy, l.at(t0), t0, c); w != quota.DefaultMaxPause {
		t.Fatalf("secondary Retry-After of a day: wait %v, want the default cap %v", w, quota.DefaultMaxPause)
	}
}

func testReserve(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	search := slot("alice", "search")
	known(t, s, search, 30, 4, t0.Add(time.Minute), t0)
	tenth := greedy
	tenth.Policy.ReservePercent = 10
	// 10 % of 30 is 3: one request of the 4 left may go.
	if _, w := reserve(t, s, tenth, l.at(t0), t0, search); w != 0 {
		t.Fatalf("4 left of 30, 10%% kept back: wait %v", w)
	}
	if _, w := reserve(t, s, tenth, l.at(t0), t0, search); w < time.Minute {
		t.Fatalf("3 left of 30, 10%% kept back: wait %v, want the reset", w)
	}
	hundred := greedy
	hundred.Policy.Reserve = 100
	before := snapshot(t, s, search)
	_, err := s.Reserve(t.Context(), &transport.ReserveParams{Slots: []transport.Slot{search}, Ask: hundred, Lease: l.at(t0), Now: t0})
	var re *quota.ReserveError
	if !errors.As(err, &re) || re.Reserve != 100 || re.Limit != 30 {
		t.Fatalf("a reserve of 100 on a limit of 30: %v, want a quota.ReserveError", err)
	}
	if after := snapshot(t, s, search); after != before {
		t.Fatalf("the refused reservation changed the state:\nbefore %s\nafter  %s", before, after)
	}
}
