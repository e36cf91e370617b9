package quota

import (
	"maps"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const lease = 2 * time.Minute

var leaseSeq uint64

// lz returns a new lease taken at now.
func lz(now time.Time) Lease {
	leaseSeq++
	return Lease{ID: leaseSeq, Until: now.Add(lease)}
}

// settleOne answers the bucket's oldest reservation with r.
func settleOne(b *Bucket, r *headers.Reading, now time.Time, counted bool, def Default) {
	var id uint64
	if len(b.Leases) > 0 {
		id = b.Leases[0].ID
	}
	Settle(nil, b, id, &Answer{Reading: r, Counted: counted, Default: def}, now)
}

func reading(limit, remaining int64, reset time.Time) *headers.Reading {
	return &headers.Reading{Status: 200, Limit: limit, Remaining: remaining, Used: UnknownCount, Reset: reset}
}

func TestObserveOutOfOrderWithinWindow(t *testing.T) {
	b := NewBucket()
	reset := t0.Add(time.Hour)
	b.Observe(reading(5000, 4990, reset), t0, true, Default{})
	b.Observe(reading(5000, 4995, reset), t0.Add(time.Second), true, Default{}) // older response, arrived late
	if b.Remaining != 4990 {
		t.Fatalf("remaining rose within a window: %d", b.Remaining)
	}
	b.Observe(reading(5000, 4980, reset.Add(500*time.Millisecond)), t0.Add(2*time.Second), true, Default{})
	if b.Remaining != 4980 {
		t.Fatalf("remaining = %d, want 4980", b.Remaining)
	}
	// A later reset is a new window: its remaining is taken as it is.
	next := reset.Add(time.Hour)
	b.Observe(reading(5000, 4999, next), reset.Add(time.Second), true, Default{})
	if b.Remaining != 4999 || !b.Reset.Equal(next) {
		t.Fatalf("new window not taken: %+v", b)
	}
	// A straggler from the old window changes nothing.
	b.Observe(reading(5000, 3, reset), reset.Add(2*time.Second), true, Default{})
	if b.Remaining != 4999 {
		t.Fatalf("stale window reading applied: %d", b.Remaining)
	}
}

func TestReserveBudgetAndReset(t *testing.T) {
	b := NewBucket()
	reset := t0.Add(10 * time.Second)
	b.Observe(reading(3, 3, reset), t0, true, Default{})
	greedy := Policy{Kind: Greedy}
	for i := 0; i < 3; i++ {
		if w := b.Reserve(greedy, lz(t0), t0); w != 0 {
			t.Fatalf("reservation %d: wait %v", i, w)
		}
	}
	if got, known := b.Budget(0, t0); got != 0 || !known {
		t.Fatalf("budget = %d, want 0 with 3 in flight", got)
	}
	w := b.Reserve(greedy, lz(t0), t0)
	if w < 10*time.Second || w > 11*time.Second {
		t.Fatalf("wait = %v, want the reset plus a little grace", w)
	}
	// Answers arrive: the server says 0 left; reservations are returned.
	for i := 0; i < 3; i++ {
		settleOne(&b, reading(3, 0, reset), t0.Add(100*time.Millisecond), true, Default{})
	}
	if b.InFlight(t0) != 0 {
		t.Fatalf("in flight = %d", b.InFlight(t0))
	}
	// After the reset the bucket is assumed refilled.
	if w := b.Reserve(greedy, lz(reset.Add(time.Second)), reset.Add(time.Second)); w != 0 {
		t.Fatalf("after reset: wait %v", w)
	}
	if !b.Assumed || b.Remaining != 3 {
		t.Fatalf("refill not assumed: %+v", b)
	}
}

func TestReserveKeepsTheReserve(t *testing.T) {
	b := NewBucket()
	b.Observe(reading(100, 10, t0.Add(time.Minute)), t0, true, Default{})
	p := Policy{Kind: Greedy, Reserve: 8}
	if w := b.Reserve(p, lz(t0), t0); w != 0 {
		t.Fatal(w)
	}
	if w := b.Reserve(p, lz(t0), t0); w != 0 {
		t.Fatal(w)
	}
	if w := b.Reserve(p, lz(t0), t0); w == 0 {
		t.Fatal("reserve eaten into")
	}
}

func TestSpreadAndAdaptiveIntervals(t *testing.T) {
	cases := []struct {
		name      string
		p         Policy
		limit     int64
		remaining int64
		want      time.Duration
	}{
		// ttr is 100 s + 1 s grace (window unknown).
		{"spread", Policy{Kind: Spread, Velocity: 1.5}, 1000, 101, 666666666 * time.Nanosecond},
		{"adaptive healthy", Policy{Kind: Adaptive}, 200, 101, time.Second},
		{"adaptive 20-50%", Policy{Kind: Adaptive}, 400, 101, 1500 * time.Millisecond},
		{"adaptive 5-20%", Policy{Kind: Adaptive}, 1000, 101, 2 * time.Second},
		{"adaptive below 5%", Policy{Kind: Adaptive}, 10000, 101, 4 * time.Second},
		{"adaptive clamped", Policy{Kind: Adaptive, MaxDelay: 3 * time.Second}, 10000, 101, 3 * time.Second},
		{"adaptive min", Policy{Kind: Adaptive, MinDelay: 5 * time.Second}, 200, 101, 5 * time.Second},
		{"greedy", Policy{Kind: Greedy}, 200, 101, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := NewBucket()
			b.Observe(reading(c.limit, c.remaining, t0.Add(100*time.Second)), t0, true, Default{})
			if w := b.Reserve(c.p, lz(t0), t0); w != 0 {
				t.Fatalf("first reservation waits %v", w)
			}
			// The budget is now remaining−1; the interval is computed
			// from the budget before the reservation.
			got := maxTime(b.TAT, t0).Sub(t0) // greedy leaves TAT alone
			if diff := got - c.want; diff < -time.Millisecond || diff > time.Millisecond {
				t.Fatalf("interval = %v, want %v", got, c.want)
			}
			if c.want > 0 {
				if w := b.Reserve(c.p, lz(t0), t0); w != c.want {
					t.Fatalf("second reservation: wait %v, want %v", w, c.want)
				}
			}
		})
	}
}

func TestUnknownBucketProbesOneAtATime(t *testing.T) {
	b := NewBucket()
	p := DefaultPolicy()
	if w := b.Reserve(p, lz(t0), t0); w != 0 {
		t.Fatal(w)
	}
	if w := b.Reserve(p, lz(t0), t0); w == 0 {
		t.Fatal("second request on an unknown bucket went before the first answer")
	}
	settleOne(&b, reading(60, 59, t0.Add(time.Hour)), t0.Add(time.Second), true, Default{})
	if w := b.Reserve(Policy{Kind: Greedy}, lz(t0.Add(time.Second)), t0.Add(time.Second)); w != 0 {
		t.Fatalf("known bucket still waits %v", w)
	}
}

func TestReservationsLapse(t *testing.T) {
	b := NewBucket()
	b.Observe(reading(2, 2, t0.Add(time.Hour)), t0, true, Default{})
	b.Reserve(Policy{Kind: Greedy}, lz(t0), t0)
	b.Reserve(Policy{Kind: Greedy}, lz(t0), t0)
	if w := b.Reserve(Policy{Kind: Greedy}, lz(t0.Add(time.Minute)), t0.Add(time.Minute)); w == 0 {
		t.Fatal("budget should be held by the other process")
	}
	if w := b.Reserve(Policy{Kind: Greedy}, lz(t0.Add(lease)), t0.Add(lease)); w != 0 {
		t.Fatalf("dead holder's reservations did not lapse: wait %v", w)
	}
}

func TestDefaultsWhenServerSaysNothing(t *testing.T) {
	b := NewBucket()
	def := Default{Limit: 60, Window: time.Minute}
	none := &headers.Reading{Status: 200, Limit: UnknownCount, Remaining: UnknownCount, Used: UnknownCount}
	b.Reserve(DefaultPolicy(), lz(t0), t0)
	settleOne(&b, none, t0, true, def)
	if b.Limit != 60 || b.Remaining != 59 || !b.Reset.Equal(t0.Add(time.Minute)) {
		t.Fatalf("default not applied: %+v", b)
	}
	b.Observe(none, t0, false, def) // a free 304
	if b.Remaining != 59 {
		t.Fatalf("free response counted: %d", b.Remaining)
	}
	b.Observe(none, t0, true, def)
	if b.Remaining != 58 {
		t.Fatalf("counted response not counted: %d", b.Remaining)
	}
	// The server starts talking: its word replaces the assumption.
	b.Observe(reading(5000, 4000, t0.Add(time.Hour)), t0, true, def)
	if b.Remaining != 4000 || b.Assumed {
		t.Fatalf("server word not taken over the default: %+v", b)
	}
}

func TestRefusalsBlock(t *testing.T) {
	b := NewBucket()
	r := reading(5000, 0, t0.Add(10*time.Minute))
	r.Status, r.Limited, r.Wait = 403, headers.Primary, 10*time.Minute
	b.Observe(r, t0, true, Default{})
	if w := b.Wait(Policy{Kind: Greedy}, t0); w < 10*time.Minute {
		t.Fatalf("primary refusal: wait %v", w)
	}
	b = NewBucket()
	r = &headers.Reading{Status: 429, Limit: UnknownCount, Remaining: UnknownCount, Used: UnknownCount,
		Limited: headers.Primary, HasRetryAfter: true, RetryAfter: 30 * time.Second, Wait: 30 * time.Second}
	b.Observe(r, t0, true, Default{})
	if w := b.Wait(Policy{Kind: Greedy}, t0); w != 30*time.Second {
		t.Fatalf("retry-after: wait %v", w)
	}
	b = NewBucket()
	r = &headers.Reading{Status: 503, Limit: UnknownCount, Remaining: UnknownCount, Used: UnknownCount, HasRetryAfter: true, RetryAfter: 5 * time.Second}
	b.Observe(r, t0, true, Default{})
	if w := b.Wait(Policy{Kind: Greedy}, t0); w != 5*time.Second {
		t.Fatalf("503 retry-after: wait %v", w)
	}
}

func TestOwnerSecondary(t *testing.T) {
	sec := func(r *headers.Reading) *Answer {
		r.Status, r.Limited = 403, headers.Secondary
		return &Answer{Reading: r, Jitter: 0.5}
	}
	var o Owner
	o.Observe(sec(&headers.Reading{Remaining: 100, HasRetryAfter: true, RetryAfter: 45 * time.Second}), 1, t0)
	if w := o.Wait(Secondary{}, Cost{}, t0); w != 45*time.Second {
		t.Fatalf("retry-after penalty = %v", w)
	}
	o = Owner{}
	o.Observe(sec(&headers.Reading{Remaining: 0, Reset: t0.Add(5 * time.Minute)}), 1, t0)
	if w := o.Wait(Secondary{}, Cost{}, t0); w != 5*time.Minute {
		t.Fatalf("none left: penalty = %v, want until reset", w)
	}
	o = Owner{}
	first := sec(&headers.Reading{Remaining: 100})
	first.Jitter = 0.99
	o.Observe(first, 1, t0)
	if w := o.Wait(Secondary{}, Cost{}, t0); w != time.Minute {
		t.Fatalf("first penalty = %v, want 60s", w)
	}
	// A request sent after the pause is refused again: a new strike,
	// 60 s + 0.5×60 s.
	at := t0.Add(time.Minute)
	again := sec(&headers.Reading{Remaining: 100})
	again.Sent = at
	o.Observe(again, 1, at)
	if w := o.Wait(Secondary{}, Cost{}, at); w != 90*time.Second {
		t.Fatalf("second penalty = %v, want 90s", w)
	}
	o.Observe(&Answer{Reading: &headers.Reading{Status: 200}}, 1, at.Add(2*time.Minute))
	if o.Strikes != 0 {
		t.Fatal("strikes not cleared by a success")
	}
}

func TestOwnerConcurrencyWritesPoints(t *testing.T) {
	read := Cost{Points: 1, Endpoint: "GET /repos/{owner}/{repo}"}
	write := Cost{Write: true, Points: 5, Endpoint: "POST /repos/{owner}/{repo}/issues", CreatesContent: true}
	var o Owner
	s := Secondary{MaxConcurrent: 2}
	o.Reserve(s, read, lz(t0), t0)
	o.Reserve(s, read, lz(t0), t0)
	if w := o.Reserve(s, read, lz(t0), t0); w == 0 {
		t.Fatal("third concurrent request allowed")
	}
	o.Release(o.Leases[0].ID)
	if w := o.Reserve(s, read, lz(t0), t0); w != 0 {
		t.Fatal("slot not returned")
	}

	o = Owner{}
	s = Secondary{WriteSpacing: time.Second}
	o.Reserve(s, write, lz(t0), t0)
	if w := o.Reserve(s, write, lz(t0.Add(300*time.Millisecond)), t0.Add(300*time.Millisecond)); w != 700*time.Millisecond {
		t.Fatalf("write spacing wait = %v", w)
	}
	if w := o.Reserve(s, read, lz(t0.Add(300*time.Millisecond)), t0.Add(300*time.Millisecond)); w != 0 {
		t.Fatal("reads must not wait for write spacing")
	}

	o = Owner{}
	s = Secondary{PointsPerMinute: 10}
	if w := o.Reserve(s, write, lz(t0), t0); w != 0 {
		t.Fatal(w)
	}
	// The minute's points may all go at once; more wait until the first
	// have left the minute (and the 2 s slot they were counted in).
	if w := o.Reserve(s, write, lz(t0), t0); w != 0 {
		t.Fatalf("second write's 5 points: wait %v, want none", w)
	}
	if w := o.Reserve(s, write, lz(t0), t0); w != time.Minute+2*time.Second {
		t.Fatalf("third write's 5 points: wait %v, want 1m2s", w)
	}
	if w := o.Reserve(s, read, lz(t0), t0); w != 0 {
		t.Fatal("points of one endpoint charged to another")
	}

	o = Owner{}
	s = Secondary{ContentPerMinute: 2, ContentPerHour: 6}
	o.Reserve(s, write, lz(t0), t0)
	if w := o.Reserve(s, write, lz(t0), t0); w != 0 {
		t.Fatalf("2nd creation at once: wait %v, want none", w)
	}
	if w := o.Reserve(s, write, lz(t0), t0); w != time.Minute+2*time.Second {
		t.Fatalf("3rd creation at once: wait %v, want 1m2s", w)
	}
}

// A batch within one minute's points goes at once: 900 GETs of one
// endpoint, GitHub's budget, wait for nothing (they once waited for half
// the budget to be spread over the minute), and the 901st waits until the
// first have left the minute.
func TestSecondaryPointsBudgetSpentAtOnce(t *testing.T) {
	s := Secondary{PointsPerMinute: 900}
	read := Cost{Points: 1, Endpoint: "GET /repos/{owner}/{repo}"}
	var o Owner
	for i := range 900 {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		if w := o.Reserve(s, read, lz(at), at); w != 0 {
			t.Fatalf("GET %d of a batch within the budget waited %v", i+1, w)
		}
	}
	at := t0.Add(time.Second)
	if w := o.Reserve(s, read, lz(at), at); w < time.Minute-time.Second || w > time.Minute+2*time.Second {
		t.Fatalf("GET 901 waits %v, want the first GETs' minute", w)
	}
}

// TestSecondaryBudgetsHoldInEverySlidingWindow: however a greedy client
// spends, no window of a minute (or an hour) anywhere in its history holds
// more than the budget — a server counting over a sliding window never
// refuses.
func TestSecondaryBudgetsHoldInEverySlidingWindow(t *testing.T) {
	s := Secondary{PointsPerMinute: 30, ContentPerMinute: 8, ContentPerHour: 20}
	var o Owner
	var reads, creations []time.Time
	cost := Cost{Points: 1, Endpoint: "GET /x"}
	create := Cost{Write: true, Points: 1, Endpoint: "POST /y", CreatesContent: true}
	for now := t0; now.Before(t0.Add(3 * time.Hour)); now = now.Add(250 * time.Millisecond) {
		if o.Reserve(s, cost, lz(now), now) == 0 {
			reads = append(reads, now)
		}
		if o.Reserve(s, create, lz(now), now) == 0 {
			creations = append(creations, now)
		}
	}
	most := func(ts []time.Time, window time.Duration) int {
		best := 0
		for i := range ts {
			n := 0
			for j := i; j < len(ts) && ts[j].Sub(ts[i]) < window; j++ {
				n++
			}
			best = max(best, n)
		}
		return best
	}
	if n := most(creations, time.Hour); n > 20 {
		t.Fatalf("%d creations in one hour, budget 20", n)
	}
	if n := most(creations, time.Minute); n > 8 {
		t.Fatalf("%d creations in one minute, budget 8", n)
	}
	if n := most(reads, time.Minute); n > 30 {
		t.Fatalf("%d points of one endpoint in one minute, budget 30", n)
	}
	// A whole budget per window and at most a slot: over three hours
	// that is 3×20 creations and about 174×30 reads (a GCRA safe in
	// every window could spend only half: 40 and 2,700).
	if len(creations) < 60 || len(reads) < 5000 {
		t.Fatalf("only %d creations and %d reads in three hours: the budgets are not used", len(creations), len(reads))
	}
}

func TestHealth(t *testing.T) {
	for _, c := range []struct {
		rem  int64
		want Health
	}{{100, Healthy}, {50, Healthy}, {49, Fair}, {20, Fair}, {19, Warning}, {5, Warning}, {4, Critical}, {1, Critical},
		{0, Exhausted}, {UnknownCount, HealthUnknown}} {
		b := NewBucket()
		b.Limit, b.Remaining = 100, c.rem
		if got := b.HealthAt(t0); got != c.want {
			t.Errorf("remaining %d: %v, want %v", c.rem, got, c.want)
		}
	}
	b := NewBucket()
	b.Limit, b.Remaining, b.BlockedUntil = 100, 100, t0.Add(time.Second)
	if b.HealthAt(t0) != Exhausted {
		t.Error("blocked bucket not exhausted")
	}
	// Adaptive slows down by the same bands status reports.
	for _, c := range []struct {
		rem  int64
		slow float64
	}{{100, 1}, {50, 1}, {49, 1.5}, {20, 1.5}, {19, 2}, {5, 2}, {4, 4}} {
		b := NewBucket()
		b.Limit, b.Remaining = 100, c.rem
		if got := healthMultiplier(&b); got != c.slow {
			t.Errorf("remaining %d (%v): adaptive slows by %v, want %v", c.rem, b.HealthAt(t0), got, c.slow)
		}
	}
}

func TestSkewAndRead(t *testing.T) {
	var s Skew
	if s.Estimate() != 0 {
		t.Fatal("estimate without samples")
	}
	// The server is 30 s ahead; Dates are truncated to the second and
	// responses take 40 ms.
	for i := 0; i < 10; i++ {
		arrival := t0.Add(time.Duration(i) * 1300 * time.Millisecond)
		server := arrival.Add(30*time.Second - 40*time.Millisecond).Truncate(time.Second)
		s.Add(server, arrival.Add(-80*time.Millisecond), arrival)
	}
	est := s.Estimate()
	if est > 30*time.Second || est < 29*time.Second {
		t.Fatalf("estimate %v, want just under 30s", est)
	}
	s.Add(t0.Add(-48*time.Hour), t0, t0) // a stale cached Date is ignored
	if s.Estimate() != est {
		t.Fatal("stale Date moved the estimate")
	}

	// Clocks that agree: every answer arrives 0.7 s into a second (they
	// went out together at resets), so the bounds are [−0.7 s, 0.35 s]
	// and the estimate is the lower, the safe side: a Date cannot tell
	// these clocks from a server 0.7 s behind. One answer 20 ms into a
	// second narrows it to −20 ms, and a long burst at 0.7 s after it
	// does not widen it again.
	var same Skew
	for i := range 10 {
		arrival := t0.Add(time.Duration(i)*time.Second + 700*time.Millisecond)
		same.Add(arrival.Truncate(time.Second), arrival.Add(-50*time.Millisecond), arrival)
	}
	if got := same.Estimate(); got != -700*time.Millisecond {
		t.Fatalf("estimate %v for answers at 0.7 s into a second, want -700ms, the lower bound", got)
	}
	quick := t0.Add(20*time.Second + 20*time.Millisecond)
	same.Add(quick.Truncate(time.Second), quick.Add(-30*time.Millisecond), quick)
	for i := range 300 {
		arrival := t0.Add(time.Duration(21+i)*time.Second + 700*time.Millisecond)
		same.Add(arrival.Truncate(time.Second), arrival.Add(-50*time.Millisecond), arrival)
	}
	if got := same.Estimate(); got > -20*time.Millisecond || got < -20*time.Millisecond-time.Duration(maxDrift*301*1000) {
		t.Fatalf("estimate %v after a quick answer and 300 at 0.7 s, want -20ms less maxDrift of 301 s", got)
	}
	// A server 400 ms behind, seen at varied fractions: its bounds
	// exclude 0, and the estimate is the safe lower bound.
	var behind Skew
	for i := range 20 {
		arrival := t0.Add(time.Duration(i) * 1070 * time.Millisecond)
		behind.Add(arrival.Add(-400*time.Millisecond).Truncate(time.Second), arrival.Add(-20*time.Millisecond), arrival)
	}
	if got := behind.Estimate(); got > -400*time.Millisecond || got < -500*time.Millisecond {
		t.Fatalf("estimate %v for a server 400ms behind, want a little below -400ms", got)
	}

	h := http.Header{}
	h.Set("X-RateLimit-Remaining", "0")
	h.Set("X-RateLimit-Reset", "1767225661") // t0+61s on the server's clock = t0+31s on ours
	h.Set("Date", "Thu, 01 Jan 2026 00:00:30 GMT")
	r := Read(200, h, nil, t0, 30*time.Second)
	if !r.Reset.Equal(t0.Add(31 * time.Second)) {
		t.Fatalf("reset %v, want %v", r.Reset, t0.Add(31*time.Second))
	}
	if r.Wait != 31*time.Second {
		t.Fatalf("wait %v", r.Wait)
	}
	h = http.Header{}
	h.Set("RateLimit", `"d";r=0;t=10`)
	r = Read(200, h, nil, t0, 30*time.Second)
	if !r.Reset.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("relative reset moved by skew: %v", r.Reset)
	}
}

func TestPolicyValidation(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []Policy{{Kind: "fast"}, {Kind: Spread, Velocity: -1}, {Kind: Greedy, Reserve: -1},
		{Kind: Adaptive, MinDelay: 2 * time.Second, MaxDelay: time.Second}} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if k, err := ParseKind(" Greedy "); err != nil || k != Greedy {
		t.Fatal(k, err)
	}
}

// TestNoViolationsAgainstAModelServer drives buckets the way the transport
// does — reserve, send, answer after a random latency, observe out of order
// — against a model of a GitHub-like server (rolling windows from the first
// request, Unix resets rounded up), for each policy, and checks that no
// request ever arrives at an empty bucket and that greedy uses the quota.
func TestNoViolationsAgainstAModelServer(t *testing.T) {
	for _, kind := range []Kind{Greedy, Spread, Adaptive} {
		t.Run(string(kind), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			const limit, window = 100, 10 * time.Second
			type answer struct {
				at        time.Time
				remaining int64
				reset     time.Time
			}
			var (
				srvStart  time.Time
				srvUsed   int64
				pending   []answer
				b         = NewBucket()
				now       = t0
				sent      int
				violation int
			)
			p := Policy{Kind: kind, Velocity: 1.5, MaxDelay: time.Minute}
			end := t0.Add(60 * time.Second)
			for now.Before(end) {
				// Deliver answers due by now, in random order.
				sort.Slice(pending, func(i, j int) bool { return pending[i].at.Before(pending[j].at) })
				var due []answer
				for len(pending) > 0 && !pending[0].at.After(now) {
					due = append(due, pending[0])
					pending = pending[1:]
				}
				rng.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
				for _, a := range due {
					settleOne(&b, reading(limit, a.remaining, a.reset), now, true, Default{})
				}
				// Up to 8 workers try to send.
				for w := 0; w < 8 && len(pending) < 8; w++ {
					if b.Reserve(p, lz(now), now) != 0 {
						break
					}
					sent++
					arrive := now.Add(time.Duration(rng.IntN(30)) * time.Millisecond)
					if srvStart.IsZero() || !arrive.Before(srvStart.Add(window)) {
						srvStart, srvUsed = arrive, 0
					}
					if srvUsed >= limit {
						violation++
					} else {
						srvUsed++
					}
					reset := srvStart.Add(window).Truncate(time.Second).Add(time.Second)
					pending = append(pending, answer{at: arrive.Add(time.Duration(rng.IntN(80)) * time.Millisecond), remaining: limit - srvUsed, reset: reset})
				}
				now = now.Add(5 * time.Millisecond)
			}
			if violation > 0 {
				t.Fatalf("%d of %d requests hit an empty bucket", violation, sent)
			}
			// Six windows fit in 60 s; every policy should use most of them.
			if kind == Greedy && sent < 5*limit {
				t.Fatalf("greedy sent only %d requests in 60s", sent)
			}
			if sent < 4*limit {
				t.Fatalf("%s sent only %d requests in 60s", kind, sent)
			}
		})
	}
}

func TestReserveComputesThenCommits(t *testing.T) {
	var o Owner
	b := NewBucket()
	b.Observe(reading(10, 1, t0.Add(time.Hour)), t0, true, Default{})
	ask := &Ask{Policy: Policy{Kind: Greedy},
		Secondary: Secondary{MaxConcurrent: 5, WriteSpacing: time.Second, PointsPerMinute: 900},
		Cost:      Cost{Write: true, Points: 5, Endpoint: "POST /issues"}}
	if _, w, _ := Reserve([]Option{{Owner: &o, Bucket: &b}}, ask, lz(t0), t0); w != 0 {
		t.Fatalf("wait %v", w)
	}
	o2, b2 := o, b
	o2.Leases, b2.Leases = slices.Clone(o.Leases), slices.Clone(b.Leases)
	o2.Points = maps.Clone(o.Points)
	// The owner allows a second write after its spacing; the bucket does
	// not (its one request is in flight): nothing is taken from either.
	at := t0.Add(2 * time.Second)
	if _, w, _ := Reserve([]Option{{Owner: &o, Bucket: &b}}, ask, lz(at), at); w < time.Hour-2*time.Second {
		t.Fatalf("wait %v, want the reset", w)
	}
	if !reflect.DeepEqual(o, o2) || !reflect.DeepEqual(b, b2) {
		t.Fatalf("a refused reservation changed the state:\nowner %+v\nwas   %+v\nbucket %+v\nwas    %+v", o, o2, b, b2)
	}
}

func TestReserveTheEarliest(t *testing.T) {
	var oa, ob Owner
	a, b := NewBucket(), NewBucket()
	a.Observe(reading(10, 0, t0.Add(50*time.Minute)), t0, true, Default{})
	b.Observe(reading(10, 0, t0.Add(2*time.Minute)), t0, true, Default{})
	ask := &Ask{Policy: Policy{Kind: Greedy}}
	before := a
	i, w, _ := Reserve([]Option{{Owner: &oa, Bucket: &a}, {Owner: &ob, Bucket: &b}}, ask, lz(t0), t0)
	if i != 1 || w < 2*time.Minute || w > 2*time.Minute+2*time.Second {
		t.Fatalf("Reserve = %d, %v; want 1 and about 2 minutes", i, w)
	}
	if !reflect.DeepEqual(a, before) || len(b.Leases) != 0 {
		t.Fatal("a wait changed a bucket")
	}
	at := t0.Add(w)
	if i, w, _ := Reserve([]Option{{Owner: &oa, Bucket: &a}, {Owner: &ob, Bucket: &b}}, ask, lz(at), at); i != 1 || w != 0 || len(b.Leases) != 1 || len(ob.Leases) != 1 {
		t.Fatalf("at its time: Reserve = %d, %v; leases %d/%d", i, w, len(b.Leases), len(ob.Leases))
	}
	if i, w, err := Reserve(nil, ask, lz(t0), t0); i != -1 || w != 0 || err != nil {
		t.Fatalf("Reserve(nil) = %d, %v, %v", i, w, err)
	}
}

// TestSpentOnlyInFlightWaitsOnAnswers: the server reads its remaining when
// a request arrives, so an answer that comes back before others sent with
// it already counts them while they are still in flight here. At GitHub's
// numbers (5,000 an hour, 10 left, the reset 30 minutes away), 8 requests
// go; the 5th to arrive answers first ("5 left"): 5 left less 7 in flight
// shows the bucket spent, though the server will end with 2 left. The
// wait is then on answers (an answer may end it), not a sleep until the
// reset; once every answer is in, 2 requests go. A bucket the server says
// is spent waits for the reset alone.
func TestSpentOnlyInFlightWaitsOnAnswers(t *testing.T) {
	reset := t0.Add(30 * time.Minute)
	b := NewBucket()
	b.Observe(reading(5000, 10, reset), t0, true, Default{})
	var o Owner
	ask := &Ask{Policy: Policy{Kind: Greedy}}
	opts := []Option{{Owner: &o, Bucket: &b}}
	var ids []uint64
	for range 8 {
		l := lz(t0)
		if d := Decide(opts, ask, l, t0); d.Wait != 0 {
			t.Fatalf("request %d: wait %v", len(ids)+1, d.Wait)
		}
		ids = append(ids, l.ID)
	}
	now := t0.Add(300 * time.Millisecond)
	answer := func(id uint64, remaining int64) {
		Settle(&o, &b, id, &Answer{Reading: reading(5000, remaining, reset), Counted: true}, now)
	}
	plenty := b.Clone()
	plenty.Remaining = 4000
	if plenty.AnswersMayFree(now) {
		t.Fatal("4,000 left, 8 in flight: answers said to free what nobody waits for")
	}
	answer(ids[4], 5)
	if !b.AnswersMayFree(now) {
		t.Fatal("5 left, 7 in flight: answers not said to free")
	}
	d := Decide(opts, ask, lz(now), now)
	if d.Wait < reset.Sub(now) || !d.OnAnswer {
		t.Fatalf("5 left, 7 in flight: wait %v on answers %v; want until the reset (%v), on answers", d.Wait, d.OnAnswer, reset.Sub(now))
	}
	for k, rem := range []int64{9, 8, 7, 6, 4, 3, 2} {
		answer(ids[[]int{0, 1, 2, 3, 5, 6, 7}[k]], rem)
	}
	ids = ids[:0]
	for i := range 2 {
		l := lz(now)
		if d := Decide(opts, ask, l, now); d.Wait != 0 {
			t.Fatalf("every answer in, 2 left: request %d waits %v", i+1, d.Wait)
		}
		ids = append(ids, l.ID)
	}
	answer(ids[0], 1)
	answer(ids[1], 0)
	// Spent by the server's word: no answer can give back what the
	// server says is gone.
	d = Decide(opts, ask, lz(now), now)
	if b.AnswersMayFree(now) {
		t.Fatal("0 left: answers said to free")
	}
	if d.Wait < reset.Sub(now) || d.OnAnswer {
		t.Fatalf("0 left: wait %v on answers %v; want until the reset, not on answers", d.Wait, d.OnAnswer)
	}

	// Among options, the soonest known time is the wait, and an option
	// spent only in flight makes it end at an answer too.
	other := NewBucket()
	other.Observe(reading(5000, 0, t0.Add(20*time.Minute)), t0, true, Default{})
	c := NewBucket()
	c.Observe(reading(5000, 1, reset), t0, true, Default{})
	var oc Owner
	if d := Decide([]Option{{Owner: &oc, Bucket: &c}}, ask, lz(t0), t0); d.Wait != 0 {
		t.Fatal(d.Wait)
	}
	d = Decide([]Option{{Owner: &oc, Bucket: &c}, {Owner: &Owner{}, Bucket: &other}}, ask, lz(t0), t0)
	if d.Index != 1 || d.Wait > 21*time.Minute || !d.OnAnswer {
		t.Fatalf("Decide = %+v; want option 1's 20 minutes, on answers", d)
	}
}
