package quota

import (
	"errors"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// secondaryRefusal is the answer to a request sent at sent and refused by
// a secondary limit, without Retry-After unless retryAfter > 0.
func secondaryRefusal(sent time.Time, retryAfter time.Duration, s Secondary) *Answer {
	r := &headers.Reading{Status: 403, Limited: headers.Secondary, Limit: 5000, Remaining: 4000, Used: UnknownCount}
	if retryAfter > 0 {
		r.HasRetryAfter, r.RetryAfter = true, retryAfter
	}
	return &Answer{Reading: r, Sent: sent, Secondary: s, Jitter: 0.5}
}

func success(sent time.Time, s Secondary) *Answer {
	return &Answer{Reading: &headers.Reading{Status: 200, Limit: 5000, Remaining: 4000, Used: UnknownCount}, Sent: sent, Secondary: s}
}

// TestEpisodeGivesOneStrike: the requests in flight when a server starts
// refusing are refused together; their answers make one strike, one pause
// and one lowering of the cap. Only a refusal of a request sent after the
// pause is a new strike, and its pause doubles (with jitter).
func TestEpisodeGivesOneStrike(t *testing.T) {
	s := Secondary{MaxConcurrent: 20, Wait: 6 * time.Second}
	o := Owner{Cap: 8} // ramped up to 8
	first := t0.Add(40 * time.Millisecond)
	o.Observe(secondaryRefusal(t0, 0, s), 8, first)
	if o.Strikes != 1 || !o.PenaltyUntil.Equal(first.Add(6*time.Second)) {
		t.Fatalf("first refusal: %d strikes, penalty until +%v; want 1 and secondary_wait (6 s)", o.Strikes, o.PenaltyUntil.Sub(first))
	}
	if c := o.ConcurrencyCap(s, first); c != 7 {
		t.Fatalf("cap %d after a refusal with 8 in flight, want 7", c)
	}
	// Seven more of that episode: sent before the first answer came.
	for i := range 7 {
		at := first.Add(time.Duration(i+1) * 5 * time.Millisecond)
		o.Observe(secondaryRefusal(t0.Add(time.Duration(i)*5*time.Millisecond), 0, s), 7-int64(i), at)
	}
	if o.Strikes != 1 || !o.PenaltyUntil.Equal(first.Add(6*time.Second)) || o.ConcurrencyCap(s, first) != 7 {
		t.Fatalf("after the episode: %d strikes, penalty until +%v, cap %d; want 1, 6 s, 7",
			o.Strikes, o.PenaltyUntil.Sub(first), o.ConcurrencyCap(s, first))
	}
	// A late success of a request sent before the pause clears nothing.
	o.Observe(success(t0, s), 1, first.Add(time.Second))
	if o.Strikes != 1 {
		t.Fatal("a success sent before the pause cleared the strikes")
	}
	// Refused again by a request sent after the pause: strike 2, a pause
	// of 6 s + 0.5 × 6 s × (2¹ − 1), and the cap halves.
	after := o.PenaltyUntil
	o.Observe(secondaryRefusal(after, 0, s), 7, after.Add(40*time.Millisecond))
	if o.Strikes != 2 || o.PenaltyUntil.Sub(after.Add(40*time.Millisecond)) != 9*time.Second {
		t.Fatalf("second episode: %d strikes, pause %v; want 2, 9 s", o.Strikes, o.PenaltyUntil.Sub(after.Add(40*time.Millisecond)))
	}
	if c := o.ConcurrencyCap(s, after); c != 3 {
		t.Fatalf("cap %d after a strike right after a pause, want half of 7", c)
	}
	// A success sent after that pause clears the strikes.
	end := o.PenaltyUntil
	o.Observe(success(end, s), 1, end.Add(40*time.Millisecond))
	if o.Strikes != 0 {
		t.Fatal("a success after the pause left the strikes")
	}
}

// TestRetryAfterEpisode: with Retry-After every refusal of an episode may
// lengthen the pause to what it says, but the episode is one strike.
func TestRetryAfterEpisode(t *testing.T) {
	s := Secondary{MaxConcurrent: 20}
	o := Owner{Cap: 7} // ramped up to 7
	at := t0.Add(40 * time.Millisecond)
	o.Observe(secondaryRefusal(t0, 4*time.Second, s), 7, at)
	later := at.Add(30 * time.Millisecond)
	o.Observe(secondaryRefusal(t0.Add(10*time.Millisecond), 4*time.Second, s), 6, later)
	if o.Strikes != 1 || !o.PenaltyUntil.Equal(later.Add(4*time.Second)) {
		t.Fatalf("%d strikes, penalty until +%v; want 1, 4 s after the last refusal", o.Strikes, o.PenaltyUntil.Sub(at))
	}
	if c := o.ConcurrencyCap(s, later); c != 6 {
		t.Fatalf("cap %d, want 6: the second refusal was of the same episode", c)
	}
}

// TestPenaltyGrowth is secondary_wait doubling per strike, jitter picking
// a point between the base and the doubled bound.
func TestPenaltyGrowth(t *testing.T) {
	for _, c := range []struct {
		base    time.Duration
		strikes int
		jitter  float64
		want    time.Duration
	}{
		{0, 0, 0.9, time.Minute}, // GitHub's documented minute
		{6 * time.Second, 0, 0.9, 6 * time.Second},
		{6 * time.Second, 1, 0, 6 * time.Second},
		{6 * time.Second, 1, 0.5, 9 * time.Second},
		{6 * time.Second, 2, 0.5, 15 * time.Second},           // 6 + 0.5 × 6 × 3
		{6 * time.Second, 3, 0.999, 47958 * time.Millisecond}, // just under 6 × 8
		{6 * time.Second, 3, 1.5, 6 * time.Second},            // bad jitter: none
	} {
		if got := penalty(c.base, c.strikes, c.jitter); got != c.want {
			t.Errorf("penalty(%v, %d, %v) = %v, want %v", c.base, c.strikes, c.jitter, got, c.want)
		}
	}
	if p := penalty(time.Minute, 1000, 0.999); p <= 0 {
		t.Fatalf("penalty overflowed: %v", p)
	}
}

// TestAIMDLowersAndRecovers: a new owner ramps up from RampStart by one
// per round of successes; a fresh refusal lowers the cap to what was in
// flight minus one; the cap holds CapHoldPauses pauses from the end of
// the pause, then gains one per round of successes at its level; a refused
// probe doubles the hold.
func TestAIMDLowersAndRecovers(t *testing.T) {
	s := Secondary{MaxConcurrent: 20}
	var o Owner
	now := t0
	if c := o.ConcurrencyCap(s, now); c != RampStart {
		t.Fatalf("new owner's cap %d, want %d", c, RampStart)
	}
	if c := o.ConcurrencyCap(Secondary{MaxConcurrent: 2}, now); c != 2 {
		t.Fatalf("cap %d above the configured max of 2", c)
	}
	if c := o.ConcurrencyCap(Secondary{}, now); c != 0 {
		t.Fatalf("cap %d with none configured and nothing learnt", c)
	}
	// 4 + 5 + 6 successes: three rounds, the cap is 7.
	for range 4 + 5 + 6 {
		o.Observe(success(now, s), 1, now)
	}
	if c := o.ConcurrencyCap(s, now); c != 7 {
		t.Fatalf("cap %d after three rounds of successes, want 7", c)
	}
	// Server errors are no reason to send more.
	for range 10 {
		a := success(now, s)
		a.Reading.Status = 503
		o.Observe(a, 1, now)
	}
	if c := o.ConcurrencyCap(s, now); c != 7 {
		t.Fatalf("cap %d after 503s, want still 7", c)
	}
	// Holding the cap: the owner waits for a free slot.
	for range 7 {
		o.Reserve(s, Cost{}, lz(now), now)
	}
	if w := o.Wait(s, Cost{}, now); w == 0 {
		t.Fatal("an eighth request went with a cap of 7")
	}
	// Successes of requests sent before the cap rose say nothing of it.
	for range 10 {
		o.Observe(success(now.Add(-time.Millisecond), s), 1, now)
	}
	if c := o.ConcurrencyCap(s, now); c != 7 {
		t.Fatalf("cap %d after successes of requests sent at a lower cap, want still 7", c)
	}
	// The seventh in flight was refused: the server allows 6.
	refusedAt := now.Add(40 * time.Millisecond)
	o.Observe(secondaryRefusal(now, time.Second, s), o.InFlight(refusedAt), refusedAt)
	if c := o.ConcurrencyCap(s, refusedAt); c != 6 {
		t.Fatalf("cap %d after a refusal with 7 in flight, want 6", c)
	}
	// The pause was a second: the cap holds ten pauses from its end, and
	// only a round of successes at that level after the hold raises it.
	pauseEnd := refusedAt.Add(time.Second)
	hold := CapHoldPauses * time.Second
	if !o.CapAt.Equal(pauseEnd) || o.Hold != hold {
		t.Fatalf("hold %v from %v, want %v from the end of the pause %v", o.Hold, o.CapAt, hold, pauseEnd)
	}
	roundAt := func(at time.Time, n int64) {
		for range n {
			o.Reserve(s, Cost{}, lz(at), at)
		}
		for range n {
			o.Observe(success(at, s), n, at.Add(40*time.Millisecond))
			o.Release(o.Leases[0].ID)
		}
	}
	roundAt(pauseEnd.Add(hold-time.Second), 6)
	if c := o.ConcurrencyCap(s, pauseEnd.Add(hold)); c != 6 {
		t.Fatalf("cap %d after successes within the hold, want 6", c)
	}
	if c := o.ConcurrencyCap(s, pauseEnd.Add(100*hold)); c != 6 {
		t.Fatalf("cap %d after time alone, want 6: only successes at the level raise it", c)
	}
	roundAt(pauseEnd.Add(hold), 6)
	if c := o.ConcurrencyCap(s, pauseEnd.Add(hold+time.Second)); c != 7 {
		t.Fatalf("cap %d after a round of successes at 6 past the hold, want 7", c)
	}
	// The probe at 7 is refused: back to 6, for twice the hold.
	probeAt := pauseEnd.Add(hold + 2*time.Second)
	for range 7 {
		o.Reserve(s, Cost{}, lz(probeAt), probeAt)
	}
	o.Observe(secondaryRefusal(probeAt, time.Second, s), 7, probeAt.Add(40*time.Millisecond))
	if c := o.ConcurrencyCap(s, probeAt.Add(time.Minute)); c != 6 || o.Hold != 2*hold {
		t.Fatalf("after a refused probe: cap %d, hold %v; want 6 for %v", c, o.Hold, 2*hold)
	}
	// A refusal with one request in flight cannot go below 1.
	var lone Owner
	lone.Observe(secondaryRefusal(t0, 0, s), 1, t0)
	if c := lone.ConcurrencyCap(s, t0); c != 1 {
		t.Fatalf("cap %d, want 1", c)
	}
	// Without a configured max a refusal still sets a cap.
	var free Owner
	free.Observe(secondaryRefusal(t0, 0, Secondary{}), 10, t0)
	if c := free.ConcurrencyCap(Secondary{}, t0.Add(time.Hour)); c != 9 {
		t.Fatalf("cap %d with no max after a refusal with 10 in flight; want 9", c)
	}
}

// TestPausesAreCapped: no Retry-After, on any status, and no penalty stops
// a bucket or an owner for longer than the cap.
func TestPausesAreCapped(t *testing.T) {
	day := 24 * time.Hour
	for _, c := range []struct {
		name     string
		maxPause time.Duration
		want     time.Duration
	}{{"default", 0, DefaultMaxPause}, {"configured", 10 * time.Minute, 10 * time.Minute}, {"longer", 2 * time.Hour, 2 * time.Hour}} {
		t.Run(c.name, func(t *testing.T) {
			for _, status := range []int{429, 503} {
				r := &headers.Reading{Status: status, Limit: UnknownCount, Remaining: UnknownCount, Used: UnknownCount, HasRetryAfter: true, RetryAfter: day}
				if status == 429 {
					r.Limited = headers.Primary
				}
				b := NewBucket()
				Settle(nil, &b, 0, &Answer{Reading: r, Counted: true, MaxPause: c.maxPause}, t0)
				if w := b.Wait(Policy{Kind: Greedy}, t0); w != c.want {
					t.Errorf("%d with Retry-After: a day: wait %v, want %v", status, w, c.want)
				}
			}
			var o Owner
			a := secondaryRefusal(t0, day, Secondary{})
			a.MaxPause = c.maxPause
			o.Observe(a, 1, t0)
			if w := o.Wait(Secondary{}, Cost{}, t0); w != c.want {
				t.Errorf("secondary Retry-After: a day: wait %v, want %v", w, c.want)
			}
			o = Owner{Strikes: 30}
			a = secondaryRefusal(t0, 0, Secondary{})
			a.MaxPause, a.Jitter = c.maxPause, 0.999
			o.Observe(a, 1, t0)
			if w := o.Wait(Secondary{}, Cost{}, t0); w != c.want {
				t.Errorf("31st strike: wait %v, want %v", w, c.want)
			}
		})
	}
}

// TestNoResetReadingRefills: a bucket whose server states remaining but no
// reset refills a window after the first reading of its window — the
// window the reading states (Docker Hub's w=), else the provider's default
// — instead of waiting a window at every try for ever.
func TestNoResetReadingRefills(t *testing.T) {
	def := Default{Limit: 60, Window: time.Minute}
	p := Policy{Kind: Greedy, Reserve: 2}
	for _, c := range []struct {
		name   string
		window time.Duration // stated by the reading
		want   time.Duration // the refill, after the first reading
	}{{"docker hub w=21600", 6 * time.Hour, 6 * time.Hour}, {"shopify call limit", 0, time.Minute}} {
		t.Run(c.name, func(t *testing.T) {
			b := NewBucket()
			read := func(remaining int64, now time.Time) {
				r := &headers.Reading{Status: 200, Limit: 100, Remaining: remaining, Used: UnknownCount, Window: c.window}
				Settle(nil, &b, 0, &Answer{Reading: r, Counted: true, Default: def}, now)
			}
			read(5, t0)
			read(2, t0.Add(time.Second)) // the same window: not pushed back
			read(4, t0.Add(2*time.Second))
			if b.Remaining != 2 {
				t.Fatalf("remaining %d, want 2: within a window it only falls", b.Remaining)
			}
			w := b.Wait(p, t0.Add(2*time.Second))
			refill := t0.Add(c.want)
			if got := t0.Add(2 * time.Second).Add(w); got.Before(refill) || got.After(refill.Add(time.Second)) {
				t.Fatalf("at the reserve: waits until +%v, want the refill at +%v", got.Sub(t0), c.want)
			}
			at := t0.Add(2 * time.Second).Add(w)
			if w := b.Wait(p, at); w != 0 {
				t.Fatalf("after the refill: wait %v", w)
			}
			if b.Reserve(p, lz(at), at) != 0 {
				t.Fatal("no reservation after the refill")
			}
			// The next reading starts a new window, a window from it.
			read(90, at.Add(time.Second))
			if b.Remaining != 90 || !b.Reset.Equal(at.Add(time.Second).Add(c.want)) {
				t.Fatalf("next window: remaining %d, reset +%v", b.Remaining, b.Reset.Sub(at))
			}
		})
	}
	// A refusal's Retry-After is exact where the inferred window is only
	// a bound.
	b := NewBucket()
	Settle(nil, &b, 0, &Answer{Reading: &headers.Reading{Status: 200, Limit: 40, Remaining: 8, Used: 32}, Counted: true, Default: def}, t0)
	r := &headers.Reading{Status: 429, Limited: headers.Primary, Limit: 40, Remaining: 0, Used: 40, HasRetryAfter: true, RetryAfter: 2 * time.Second}
	Settle(nil, &b, 0, &Answer{Reading: r, Counted: true, Default: def}, t0.Add(time.Second))
	if w := b.Wait(Policy{Kind: Greedy}, t0.Add(time.Second)); w != 2*time.Second {
		t.Fatalf("429 with Retry-After 2 on a bucket without reset: wait %v, want 2s", w)
	}
}

// TestReserveCountOrPercent: a percentage keeps that share of each
// bucket's own limit; a count at or above a bucket's limit is an error
// once the limit is known, not a wait for ever.
func TestReserveCountOrPercent(t *testing.T) {
	search := func() Bucket {
		b := NewBucket()
		b.Observe(reading(30, 30, t0.Add(time.Minute)), t0, true, Default{})
		return b
	}
	core := NewBucket()
	core.Observe(reading(5000, 600, t0.Add(time.Hour)), t0, true, Default{})
	tenth := Policy{Kind: Greedy, ReservePercent: 10}
	for _, c := range []struct {
		name   string
		b      Bucket
		budget int64
	}{{"search 30", search(), 27}, {"core 5000", core, 100}} {
		if got, _ := c.b.Budget(tenth.reserveFor(&c.b), t0); got != c.budget {
			t.Errorf("%s with 10%% kept back: budget %d, want %d", c.name, got, c.budget)
		}
	}
	var o Owner
	b := search()
	ask := &Ask{Policy: Policy{Kind: Greedy, Reserve: 100}}
	i, w, err := Reserve([]Option{{Owner: &o, Bucket: &b}}, ask, lz(t0), t0)
	var re *ReserveError
	if !errors.As(err, &re) || re.Reserve != 100 || re.Limit != 30 || i != -1 || w != 0 {
		t.Fatalf("reserve 100 on a limit of 30: %d, %v, %v; want a ReserveError", i, w, err)
	}
	if len(o.Leases)+len(b.Leases) != 0 {
		t.Fatal("a refused reservation took a lease")
	}
	// Equal to the limit is as bad; below it is fine; an unknown bucket
	// is probed first, and a free request needs no budget.
	ask.Policy.Reserve = 30
	if _, _, err := Reserve([]Option{{Owner: &o, Bucket: &b}}, ask, lz(t0), t0); err == nil {
		t.Fatal("a reserve equal to the limit was accepted")
	}
	ask.Policy.Reserve = 29
	if _, w, err := Reserve([]Option{{Owner: &o, Bucket: &b}}, ask, lz(t0), t0); err != nil || w != 0 {
		t.Fatalf("reserve 29 of 30: wait %v, %v", w, err)
	}
	ask.Policy.Reserve = 100
	unknown := NewBucket()
	if _, w, err := Reserve([]Option{{Owner: &o, Bucket: &unknown}}, ask, lz(t0), t0); err != nil || w != 0 {
		t.Fatalf("unknown bucket: wait %v, %v; want the probe to go", w, err)
	}
	ask.Free = true
	if _, _, err := Reserve([]Option{{Owner: &o, Bucket: &b}}, ask, lz(t0), t0); err != nil {
		t.Fatalf("a free request: %v", err)
	}
	// Another credential whose bucket can go wins over the error.
	ask.Free = false
	big := NewBucket()
	big.Observe(reading(5000, 0, t0.Add(time.Hour)), t0, true, Default{})
	var o2 Owner
	if i, w, err := Reserve([]Option{{Owner: &o, Bucket: &b}, {Owner: &o2, Bucket: &big}}, ask, lz(t0), t0); err != nil || i != 1 || w < time.Hour {
		t.Fatalf("with a usable second option: %d, %v, %v; want 1 and its reset", i, w, err)
	}
	// A credential of unknown owner that may share the reserve-blocked
	// bucket is not held back by it: that wait would never end (each
	// reset refills a bucket the reserve still leaves nothing of).
	fresh, o3 := NewBucket(), Owner{}
	if i, w, err := Reserve([]Option{{Owner: &o, Bucket: &b}, {Owner: &o3, Bucket: &fresh, Also: []*Bucket{&b}}}, ask, lz(t0), t0); err != nil || i != 1 || w != 0 {
		t.Fatalf("unknown owner beside a reserve-blocked bucket: %d, %v, %v; want it to go now", i, w, err)
	}
	for _, p := range []Policy{{Kind: Greedy, ReservePercent: 100}, {Kind: Greedy, ReservePercent: -1},
		{Kind: Greedy, Reserve: 5, ReservePercent: 10}} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

// TestSecondaryNoneLeftPausesAtLeastTheWait: a secondary refusal without
// Retry-After that states the primary bucket empty pauses the owner until
// the reset, and never less than Secondary.Wait: a reset 3.5 s away is the
// primary bucket's and says nothing of when the secondary penalty ends
// (memory seed 2172: the fleet went at such a reset, into the server's
// penalty, 56 s before the minute a refusal naming no end of its own asks).
func TestSecondaryNoneLeftPausesAtLeastTheWait(t *testing.T) {
	s := Secondary{Wait: time.Minute}
	noneLeft := func(sent time.Time, reset time.Duration) *Answer {
		a := secondaryRefusal(sent, 0, s)
		a.Reading.Limit, a.Reading.Remaining, a.Reading.Used, a.Reading.Reset = 18, 0, 18, t0.Add(reset)
		return a
	}
	var o Owner
	o.Observe(noneLeft(t0.Add(-300*time.Millisecond), 3500*time.Millisecond), 1, t0)
	if got := o.PenaltyUntil.Sub(t0); got != time.Minute {
		t.Fatalf("reset in 3.5 s: paused %v, want the secondary wait (1m0s)", got)
	}
	// Another refusal of the episode (sent before the pause began) with
	// the same reset shortens nothing.
	o.Observe(noneLeft(t0.Add(-200*time.Millisecond), 3500*time.Millisecond), 1, t0.Add(50*time.Millisecond))
	if got := o.PenaltyUntil.Sub(t0); got != time.Minute {
		t.Fatalf("a refusal of the episode moved the pause to %v", got)
	}
	// A refusal of a process that had not heard of the pause (sent
	// into it) lengthens it to the wait after itself.
	at := t0.Add(2 * time.Second)
	o.Observe(noneLeft(t0.Add(time.Second), 3500*time.Millisecond), 1, at)
	if got := o.PenaltyUntil.Sub(at); got != time.Minute {
		t.Fatalf("a refusal sent into the pause: paused %v after it, want 1m0s", got)
	}
	// A reset later than the wait still holds the owner until it.
	o = Owner{}
	o.Observe(noneLeft(t0, 5*time.Minute), 1, t0)
	if got := o.PenaltyUntil.Sub(t0); got != 5*time.Minute {
		t.Fatalf("reset in 5 min: paused %v, want until the reset", got)
	}
	// A Retry-After is the server's own word: it stands, reset or not.
	o = Owner{}
	a := noneLeft(t0, 3500*time.Millisecond)
	a.Reading.HasRetryAfter, a.Reading.RetryAfter = true, 10*time.Second
	o.Observe(a, 1, t0)
	if got := o.PenaltyUntil.Sub(t0); got != 10*time.Second {
		t.Fatalf("retry-after 10 s: paused %v", got)
	}
}
