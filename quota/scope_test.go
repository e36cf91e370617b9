package quota

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// gitlabMain is GitLab's main throttle as its answers announce it: 2,000
// a minute, plenty left.
func gitlabMain(remaining int64, reset time.Time) *headers.Reading {
	return &headers.Reading{Status: http.StatusOK, Limit: 2000, Remaining: remaining, Used: UnknownCount, Reset: reset}
}

// usersRefusal is the 429 of GitLab's Users API throttle (40 per aligned
// minute here) as gitlab.com sends it: Retry-After to the end of its
// window and that throttle's own RateLimit-* headers.
func usersRefusal(retryAfter time.Duration, reset time.Time) *headers.Reading {
	return &headers.Reading{Status: http.StatusTooManyRequests, Limit: 40, Remaining: 0, Used: UnknownCount, Reset: reset,
		RetryAfter: retryAfter, HasRetryAfter: true, Resource: "throttle_authenticated_users_api", Limited: headers.Primary}
}

// bareRefusal is a 429 that says nothing at all (gitlab.com sometimes,
// GitLab Dedicated's plain "Retry later").
func bareRefusal() *headers.Reading {
	return &headers.Reading{Status: http.StatusTooManyRequests, Limit: UnknownCount, Remaining: UnknownCount, Used: UnknownCount, Limited: headers.Bare}
}

// reserveScoped reserves one request on bucket b with scope s at now and
// returns its lease ID, or fails with the wait.
func reserveScoped(t *testing.T, b, s *Bucket, a *Ask, now time.Time) uint64 {
	t.Helper()
	o := &Owner{}
	l := lz(now)
	d := Decide([]Option{{Owner: o, Bucket: b, Scope: s}}, a, l, now)
	if d.Wait != 0 || d.Err != nil {
		t.Fatalf("at %v: wait %v err %v, want to go", now.Sub(t0), d.Wait, d.Err)
	}
	return l.ID
}

func waitScoped(b, s *Bucket, a *Ask, now time.Time) time.Duration {
	return Decide([]Option{{Owner: &Owner{}, Bucket: b, Scope: s}}, a, lz(now), now).Wait
}

// A refusal of GitLab's Users API, whose counts describe its own throttle
// (40, reset at the end of its minute), pauses the Users API scope until
// its Retry-After and leaves the main bucket as its answers left it: the
// Projects API goes on at once. On main before scopes the refusal was read
// as a stale reading of the main bucket (its reset is earlier) and
// ignored, so the refused URL went again at once.
func TestScopeRefusalPausesTheScopeNotTheBucket(t *testing.T) {
	mainReset := t0.Add(time.Minute)
	b, users := NewBucket(), NewBucket()
	a := &Ask{Policy: Policy{Kind: Greedy}}
	Settle(nil, &b, 0, &Answer{Reading: gitlabMain(1960, mainReset), Counted: true}, t0)

	// One /users/ request in flight when the refusal comes, one sent
	// with it.
	refused := reserveScoped(t, &b, &users, a, t0.Add(10*time.Second))
	inFlight := reserveScoped(t, &b, &users, a, t0.Add(10*time.Second))
	at := t0.Add(10*time.Second + 100*time.Millisecond)
	ra := 20 * time.Second // to the end of the users throttle's window
	SettleScoped(nil, &b, &users, refused, &Answer{Reading: usersRefusal(ra, at.Add(ra)), Counted: true, Sent: t0.Add(10 * time.Second)}, at)

	if b.Remaining != 1960 || !b.BlockedUntil.IsZero() || b.Reset != mainReset {
		t.Errorf("the main bucket took the Users API's refusal: remaining %d, blocked until %v, reset %v", b.Remaining, b.BlockedUntil, b.Reset)
	}
	if !users.Learnt || users.Limit != 40 || !users.LimitStated || users.Name != "throttle_authenticated_users_api" {
		t.Errorf("scope learnt %+v, want 40 stated, named", users)
	}
	if !users.BlockedUntil.Equal(at.Add(ra)) {
		t.Errorf("scope blocked until %v, want the Retry-After's %v", users.BlockedUntil, at.Add(ra))
	}
	// Nothing goes to the scope before the Retry-After, not even a
	// millisecond before; the main bucket goes now.
	if w := waitScoped(&b, &users, a, at); w != ra {
		t.Errorf("the scope's next request waits %v, want %v", w, ra)
	}
	if w := waitScoped(&b, &users, a, at.Add(ra-time.Millisecond)); w != time.Millisecond {
		t.Errorf("a millisecond before the Retry-After the scope waits %v", w)
	}
	var none *Bucket
	if w := waitScoped(&b, none, a, at); w != 0 {
		t.Errorf("a Projects API request waits %v behind the Users API's pause", w)
	}
	// The request in flight is refused too (it arrived after the first):
	// the pause stays as it was, nothing more is learnt.
	later := at.Add(30 * time.Millisecond)
	SettleScoped(nil, &b, &users, inFlight, &Answer{Reading: usersRefusal(ra-time.Second, at.Add(ra)), Counted: true, Sent: t0.Add(10 * time.Second)}, later)
	if !users.BlockedUntil.Equal(at.Add(ra)) || users.Strikes != 0 {
		t.Errorf("the episode's second refusal moved the pause to %v (strikes %d)", users.BlockedUntil, users.Strikes)
	}
	// Once the pause ends, 40 go in the window, then the scope waits for
	// the next: the window learnt is the wait to the end the refusal
	// named, the least the server's can be.
	open := at.Add(ra)
	for i := range 40 {
		id := reserveScoped(t, &b, &users, a, open)
		SettleScoped(nil, &b, &users, id, &Answer{Reading: gitlabMain(1900-int64(i), mainReset.Add(time.Minute)), Counted: true, Sent: open}, open)
	}
	if w := waitScoped(&b, &users, a, open); w < ra {
		t.Errorf("after the window's 40 the scope waits %v, want the rest of its %v", w, ra)
	}
}

// The main throttle's own refusal (its limit, remaining 0) of a scoped
// request pauses the main bucket, as before scopes.
func TestMainRefusalOfAScopedRequestPausesTheBucket(t *testing.T) {
	reset := t0.Add(time.Minute)
	b, users := NewBucket(), NewBucket()
	a := &Ask{Policy: Policy{Kind: Greedy}}
	Settle(nil, &b, 0, &Answer{Reading: gitlabMain(1, reset), Counted: true}, t0)
	id := reserveScoped(t, &b, &users, a, t0)
	r := &headers.Reading{Status: 429, Limit: 2000, Remaining: 0, Used: UnknownCount, Reset: reset, RetryAfter: 59 * time.Second, HasRetryAfter: true,
		Resource: "throttle_authenticated_api", Limited: headers.Primary}
	SettleScoped(nil, &b, &users, id, &Answer{Reading: r, Counted: true, Sent: t0}, t0.Add(time.Second))
	if users.Learnt || users.Known() {
		t.Errorf("the scope learnt the main throttle's refusal: %+v", users)
	}
	if !b.BlockedUntil.Equal(t0.Add(time.Minute)) {
		t.Errorf("main bucket blocked until %v, want the Retry-After", b.BlockedUntil)
	}
}

// A primary refusal stating remaining 0 and a reset that is the first
// answer of its bucket (another spender emptied it) is the bucket's: a
// request of another scope waits for the reset too. It was given to the
// refused request's scope, and the other scope went to the empty bucket
// (the fleet simulation's memory seed 3, -sim.spendall).
func TestFirstAnswerAPrimaryRefusalPausesTheBucket(t *testing.T) {
	reset := t0.Add(20 * time.Second)
	b, items, search := NewBucket(), NewBucket(), NewBucket()
	a := &Ask{Policy: Policy{Kind: Greedy}}
	id := reserveScoped(t, &b, &items, a, t0)
	r := &headers.Reading{Status: http.StatusForbidden, Limit: 10, Remaining: 0, Used: 10, Reset: reset, Limited: headers.Primary}
	at := t0.Add(10 * time.Millisecond)
	SettleScoped(nil, &b, &items, id, &Answer{Reading: r, Counted: true, Sent: t0}, at)
	if items.Known() || items.Learnt {
		t.Errorf("the request's scope took the bucket's refusal: %+v", items)
	}
	if b.Remaining != 0 || b.Limit != 10 || b.BlockedUntil.Before(reset) {
		t.Errorf("bucket remaining %d limit %d blocked until %v, want 0 of 10 until the reset %v", b.Remaining, b.Limit, b.BlockedUntil, reset)
	}
	if w := waitScoped(&b, &search, a, at); w < reset.Sub(at) {
		t.Errorf("a request of another scope waits %v, want the reset's %v", w, reset.Sub(at))
	}
}

// The same refusal after answers that stated nothing (a proxy's 502s),
// which had the bucket count against the provider's default limit of 60:
// that limit is assumed, so a refusal stating 24 does not contradict it,
// and the refusal is still the bucket's (the fleet simulation's memory
// seed 3902, whose 502s state nothing on even seeds).
func TestPrimaryRefusalAfterAssumedCountsPausesTheBucket(t *testing.T) {
	reset := t0.Add(8 * time.Second)
	def := Default{Limit: 60, Window: time.Minute}
	b, items, search := NewBucket(), NewBucket(), NewBucket()
	a := &Ask{Policy: Policy{Kind: Greedy}}
	id := reserveScoped(t, &b, &items, a, t0)
	bad := &headers.Reading{Status: http.StatusBadGateway, Limit: UnknownCount, Remaining: UnknownCount, Used: UnknownCount}
	SettleScoped(nil, &b, &items, id, &Answer{Reading: bad, Counted: true, Sent: t0, Default: def}, t0.Add(5*time.Millisecond))
	if !b.Assumed || b.Limit != 60 {
		t.Fatalf("after a 502 stating nothing the bucket is %+v, want the default of 60 assumed", b)
	}
	id = reserveScoped(t, &b, &items, a, t0.Add(10*time.Millisecond))
	r := &headers.Reading{Status: http.StatusForbidden, Limit: 24, Remaining: 0, Used: 24, Reset: reset, Limited: headers.Primary}
	at := t0.Add(20 * time.Millisecond)
	SettleScoped(nil, &b, &items, id, &Answer{Reading: r, Counted: true, Sent: t0.Add(10 * time.Millisecond), Default: def}, at)
	if items.Learnt || items.BlockedUntil.After(at) {
		t.Errorf("the request's scope took the bucket's refusal: %+v", items)
	}
	if b.Remaining != 0 || b.Limit != 24 || b.BlockedUntil.Before(reset) {
		t.Errorf("bucket remaining %d limit %d blocked until %v, want 0 of 24 until the reset %v", b.Remaining, b.Limit, b.BlockedUntil, reset)
	}
	if w := waitScoped(&b, &search, a, at); w < reset.Sub(at) {
		t.Errorf("a request of another scope waits %v, want the reset's %v", w, reset.Sub(at))
	}
}

// A 429 that states nothing while the main bucket has plenty left is a
// limit nobody announced: the scope learns how many succeeded since its
// window began, and pauses for a second, then longer (never shorter) on
// each fresh refusal in a row; a refusal of a request sent before the
// pause ended changes nothing.
func TestBareRefusalBacksOffAndLearnsTheCount(t *testing.T) {
	reset := t0.Add(time.Minute)
	b, users := NewBucket(), NewBucket()
	a := &Ask{Policy: Policy{Kind: Greedy}}
	Settle(nil, &b, 0, &Answer{Reading: gitlabMain(1900, reset), Counted: true}, t0)
	id := reserveScoped(t, &b, &users, a, t0)
	var since time.Time
	count := func(s time.Time) int64 { since = s; return 37 }
	at := t0.Add(100 * time.Millisecond)
	SettleScoped(nil, &b, &users, id, &Answer{Reading: bareRefusal(), Counted: true, Sent: t0, Succeeded: count}, at)
	if users.Limit != 37 || users.LimitStated || !users.Learnt {
		t.Errorf("learnt %+v, want 37 learnt from the count", users)
	}
	if want := at.Add(ScopeBackoff); !users.BlockedUntil.Equal(want) {
		t.Errorf("first bare refusal pauses until %v, want %v (the first backoff, jitter never shortens it)", users.BlockedUntil, want)
	}
	if users.Window != time.Second || !since.Equal(at.Add(-time.Second)) {
		t.Errorf("window %v counted since %v: want the first backoff rounded up to 1s, counted over the second before the refusal", users.Window, since)
	}
	// Refused again as soon as it opens (a probe: one at a time while the
	// episode lasts): the window was too short; the limit stays, the
	// pause at least doubles and the window grows to cover the episode.
	open := users.BlockedUntil
	id = reserveScoped(t, &b, &users, a, open)
	SettleScoped(nil, &b, &users, id, &Answer{Reading: bareRefusal(), Counted: true, Sent: open, Jitter: 0}, open.Add(100*time.Millisecond))
	if users.Limit != 37 || users.Strikes != 2 {
		t.Errorf("second strike: limit %d strikes %d, want 37 and 2", users.Limit, users.Strikes)
	}
	if w := users.BlockedUntil.Sub(open.Add(100 * time.Millisecond)); w < 2*ScopeBackoff {
		t.Errorf("second fresh refusal pauses %v, want at least %v", w, 2*ScopeBackoff)
	}
	if users.Window != 10*time.Second {
		t.Errorf("window %v, want 10s (the episode so far, rounded up)", users.Window)
	}
	// While the episode lasts, one probe at a time.
	probeAt := users.BlockedUntil
	reserveScoped(t, &b, &users, a, probeAt)
	if w := waitScoped(&b, &users, a, probeAt); w == 0 {
		t.Errorf("a second request went beside the episode's probe")
	}
	// The probe succeeds: the server renewed the scope. The episode ends,
	// the limit is what succeeded in the window before it began, and the
	// scope's window starts now.
	SettleScoped(nil, &b, &users, users.Leases[0].ID, &Answer{Reading: gitlabMain(1800, reset), Counted: true, Sent: probeAt,
		Succeeded: func(s time.Time) int64 {
			if s.After(at) {
				return 0
			}
			return 40
		}}, probeAt.Add(40*time.Millisecond))
	if !users.EpisodeAt.IsZero() || users.Strikes != 0 || users.Limit != 40 || users.Remaining != 39 {
		t.Errorf("after the episode: %+v, want it ended with 40, 39 left", users)
	}
	if w := waitScoped(&b, &users, a, probeAt.Add(40*time.Millisecond)); w != 0 {
		t.Errorf("after the episode the scope waits %v", w)
	}
}

// A limit written in the config paces its scope from the first request:
// at GitLab's documented 300 per 10 minutes for GET /users/:id, the 301st
// waits for the window; nothing written, the scope costs nothing.
func TestConfiguredLimitPacesFromTheFirstRequest(t *testing.T) {
	b, users := NewBucket(), NewBucket()
	Settle(nil, &b, 0, &Answer{Reading: gitlabMain(2000, t0.Add(time.Minute)), Counted: true}, t0)
	a := &Ask{Policy: Policy{Kind: Greedy}, Scope: Default{Limit: 300, Window: 10 * time.Minute}}
	for range 300 {
		id := reserveScoped(t, &b, &users, a, t0)
		SettleScoped(nil, &b, &users, id, &Answer{Reading: gitlabMain(1999, t0.Add(time.Minute)), Counted: true, Sent: t0}, t0)
	}
	if w := waitScoped(&b, &users, a, t0); w < 10*time.Minute {
		t.Errorf("the 301st waits %v, want the 10-minute window", w)
	}
	if !users.Configured || users.Learnt {
		t.Errorf("configured scope %+v", users)
	}
	free := NewBucket()
	if w := waitScoped(&b, &free, &Ask{Policy: Policy{Kind: Greedy}}, t0); w != 0 || free.Known() {
		t.Errorf("a scope nothing is known of waits %v, known %v", w, free.Known())
	}
	id := reserveScoped(t, &b, &free, &Ask{Policy: Policy{Kind: Greedy}}, t0)
	if len(free.Leases) != 0 {
		t.Errorf("a scope nothing is known of holds a lease")
	}
	SettleScoped(nil, &b, &free, id, &Answer{Reading: gitlabMain(1, t0.Add(time.Minute)), Counted: true}, t0)
	if free.Known() {
		t.Errorf("a success taught the idle scope: %+v", free)
	}
}

// A learnt limit is probed a tenth above once a window at its level
// passes without a refusal, and rises once a window's count shows the
// server allowed more; a stated one does not.
func TestLearntLimitRisesAfterACleanWindow(t *testing.T) {
	s := NewBucket()
	s.Learnt, s.Limit, s.Remaining, s.Window, s.Reset = true, 20, 0, time.Minute, t0.Add(time.Minute)
	s.RefusedAt = t0.Add(-2 * time.Minute)
	s.BlockedUntil = s.RefusedAt
	s.roll(t0.Add(time.Minute + 2*time.Second))
	if s.Limit != 20 || s.Remaining != 22 || s.Probe != 2 {
		t.Errorf("after a clean full window: limit %d remaining %d probe %d, want 20, 22 and 2", s.Limit, s.Remaining, s.Probe)
	}
	s.Remaining, s.Counted = 0, 22
	s.roll(t0.Add(2*time.Minute + 2*time.Second))
	if s.Limit != 22 {
		t.Errorf("a clean window counted 22: limit %d, want 22", s.Limit)
	}
	s.Remaining = 0
	s.LimitStated = true
	s.roll(t0.Add(3*time.Minute + 2*time.Second))
	if s.Limit != 22 || s.Probe != 0 {
		t.Errorf("a stated limit rose to %d (probe %d)", s.Limit, s.Probe)
	}
	// Refused within the window: no rise.
	r := NewBucket()
	r.Learnt, r.Limit, r.Remaining, r.Window, r.Reset = true, 20, 0, time.Minute, t0.Add(time.Minute)
	r.RefusedAt = t0.Add(30 * time.Second)
	r.roll(t0.Add(time.Minute + 2*time.Second))
	if r.Limit != 20 {
		t.Errorf("refused in the window, the limit rose to %d", r.Limit)
	}
	// Refused at the very start of the window, whose reset is then
	// waited for with the grace; the episode has not ended yet: no rise.
	// (It rose, and every window after was refused.)
	e := NewBucket()
	e.Learnt, e.Limit, e.Remaining, e.Window = true, 20, 0, time.Minute
	e.RefusedAt, e.EpisodeAt, e.Reset = t0, t0, t0.Add(time.Minute)
	e.BlockedUntil = e.Reset.Add(5 * time.Millisecond) // a later refusal of the episode
	e.roll(t0.Add(time.Minute + 2*time.Second))
	if e.Limit != 20 {
		t.Errorf("refused at the window's start, the limit rose to %d", e.Limit)
	}
}

// A refusal whose counts describe a window already overtaken (its reset
// is before the bucket's) still keeps its Retry-After: before scopes it
// was dropped whole and its request resent at once.
func TestStaleRefusalKeepsItsRetryAfter(t *testing.T) {
	b := NewBucket()
	Settle(nil, &b, 0, &Answer{Reading: gitlabMain(1500, t0.Add(time.Minute)), Counted: true}, t0)
	r := usersRefusal(3*time.Second, t0.Add(3*time.Second))
	Settle(nil, &b, 0, &Answer{Reading: r, Counted: true}, t0)
	if b.Remaining != 1500 {
		t.Errorf("remaining %d: the overtaken refusal's counts were taken", b.Remaining)
	}
	if w := b.Wait(Policy{Kind: Greedy}, t0); w != 3*time.Second {
		t.Errorf("waits %v, want the refusal's 3s", w)
	}
}

func TestCommonWindow(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{
		{0, time.Second}, {time.Second, time.Second}, {1100 * time.Millisecond, 10 * time.Second},
		{59 * time.Second, time.Minute}, {61 * time.Second, 10 * time.Minute}, {2 * time.Hour, time.Hour},
	} {
		if got := commonWindow(c.in); got != c.want {
			t.Errorf("commonWindow(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// GitLab states a throttle's RateLimit-Limit per minute, whatever its
// period: a 429 of a 40-per-10-s throttle says 240, and the scope, its
// window learnt as 10 s from the ends its refusals name, keeps 40 per
// window; a 300-per-10-minutes throttle says 30 and keeps 300 per 10
// minutes.
func TestGitLabStatesItsLimitPerMinute(t *testing.T) {
	for _, c := range []struct {
		stated    int64
		ra, wantW time.Duration
		want      int64
	}{
		{240, 7 * time.Second, 10 * time.Second, 40},
		{30, 9 * time.Minute, 10 * time.Minute, 300},
		{100, 45 * time.Second, time.Minute, 100},
	} {
		s := NewBucket()
		r := usersRefusal(c.ra, t0.Add(c.ra))
		r.Limit, r.Dialect = c.stated, headers.DialectGitLab
		s.observeScopeRefusal(&Answer{Reading: r, Counted: true, Sent: t0}, t0)
		// Refused again half a window after the pause, to the end of
		// the next window.
		at := t0.Add(c.ra + c.wantW/2)
		r = usersRefusal(c.wantW/2, at.Add(c.wantW/2))
		r.Limit, r.Dialect = c.stated, headers.DialectGitLab
		s.observeScopeRefusal(&Answer{Reading: r, Counted: true, Sent: at}, at)
		if s.Limit != c.want || s.Window != c.wantW {
			t.Errorf("stated %d per minute, Retry-After %v: learnt %d per %v, want %d per %v", c.stated, c.ra, s.Limit, s.Window, c.want, c.wantW)
		}
	}
}

// A first refusal of a scope nothing was known of knows only this
// process's count: its limit is provisional and caps nothing. The next
// window is counted in the scope's state, every process's successes
// alike, and its refusal teaches the fleet's count; a success of a
// request that was in flight when it came counts too. Before, the first
// refusal's count (one process's share of a fleet) capped the scope, and
// it rose by a tenth per window.
func TestFleetCountTeachesTheLimit(t *testing.T) {
	reset := t0.Add(time.Hour)
	b, users := NewBucket(), NewBucket()
	a := &Ask{Policy: Policy{Kind: Greedy}}
	Settle(nil, &b, 0, &Answer{Reading: gitlabMain(1900, reset), Counted: true}, t0)
	mine := func(time.Time) int64 { return 5 } // this process's share of 40
	// Nothing known: successes count nothing, so a store writes nothing.
	id := reserveScoped(t, &b, &users, a, t0)
	SettleScoped(nil, &b, &users, id, &Answer{Reading: gitlabMain(1899, reset), Counted: true, Sent: t0, Succeeded: mine}, t0)
	if users.Known() || users.Counted != 0 || !users.CountedFrom.IsZero() {
		t.Fatalf("a success counted in a scope nothing is known of: %+v", users)
	}
	// Refused at 20 s into the server's minute, Retry-After to its end.
	at := t0.Add(20 * time.Second)
	id = reserveScoped(t, &b, &users, a, at)
	SettleScoped(nil, &b, &users, id, &Answer{Reading: retryAfterOnly(40 * time.Second), Counted: true, Sent: at, Succeeded: mine}, at)
	if !users.Learnt || !users.Provisional || users.Limit != 5 || users.Window != 40*time.Second {
		t.Fatalf("first refusal: %+v, want a provisional 5 over 40s (the wait to the window's end)", users)
	}
	// The server renews the scope; refused 30 s into its window, to the
	// end of its minute: the window is a minute, the count of 30 s is
	// not of a whole one.
	open := t0.Add(time.Minute)
	for range 20 {
		id := reserveScoped(t, &b, &users, a, open)
		SettleScoped(nil, &b, &users, id, &Answer{Reading: gitlabMain(1850, reset), Counted: true, Sent: open}, open)
	}
	refusedAt := open.Add(30 * time.Second)
	id = reserveScoped(t, &b, &users, a, refusedAt)
	SettleScoped(nil, &b, &users, id, &Answer{Reading: retryAfterOnly(30 * time.Second), Counted: true, Sent: refusedAt, Succeeded: mine}, refusedAt)
	if !users.Provisional || users.Window != time.Minute {
		t.Fatalf("second refusal: %+v, want provisional over a minute", users)
	}
	// The next window is counted, not capped by the provisional limit.
	// Two processes send 40 between them.
	open = open.Add(time.Minute)
	var inFlight uint64
	for i := range 40 {
		id := reserveScoped(t, &b, &users, a, open)
		if i == 39 {
			inFlight = id // answered after the refusal
			continue
		}
		SettleScoped(nil, &b, &users, id, &Answer{Reading: gitlabMain(1800, reset), Counted: true, Sent: open}, open)
	}
	if users.Counted != 39 {
		t.Errorf("counted %d of the window's 39 answered successes", users.Counted)
	}
	refusedAt = open.Add(10 * time.Second)
	id = reserveScoped(t, &b, &users, a, refusedAt)
	SettleScoped(nil, &b, &users, id, &Answer{Reading: retryAfterOnly(50 * time.Second), Counted: true, Sent: refusedAt, Succeeded: mine}, refusedAt)
	if users.Provisional || users.Limit != 39 {
		t.Errorf("refused in a counted window: %+v, want the fleet's 39, not provisional", users)
	}
	SettleScoped(nil, &b, &users, inFlight, &Answer{Reading: gitlabMain(1700, reset), Counted: true, Sent: open}, refusedAt.Add(time.Second))
	if users.Limit != 40 {
		t.Errorf("the success in flight left the limit at %d, want 40", users.Limit)
	}
	// The next window is capped at 40.
	next := open.Add(time.Minute)
	for range 40 {
		id := reserveScoped(t, &b, &users, a, next)
		SettleScoped(nil, &b, &users, id, &Answer{Reading: gitlabMain(1600, reset), Counted: true, Sent: next}, next)
	}
	if w := waitScoped(&b, &users, a, next); w < 59*time.Second {
		t.Errorf("the 41st of a window waits %v, want the rest of the minute", w)
	}
}

// A provisional limit caps nothing and does not rise: a clean window's
// count may span two of the server's windows. The next window is counted
// afresh from its start.
func TestProvisionalLimitWaitsForARefusal(t *testing.T) {
	s := NewBucket()
	s.Learnt, s.Provisional, s.Limit, s.Remaining, s.Window = true, true, 5, 0, time.Minute
	s.Reset, s.CountedFrom, s.Counted = t0.Add(time.Minute), t0, 33
	s.roll(t0.Add(time.Minute + 2*time.Second))
	if s.Limit != 5 || !s.Provisional || s.Counted != 0 || !s.CountedFrom.Equal(t0.Add(time.Minute)) {
		t.Errorf("after a clean counted window: %+v, want a provisional 5, the next window counted from its start", s)
	}
}

// retryAfterOnly is a 429 with a Retry-After and no rate-limit header.
func retryAfterOnly(d time.Duration) *headers.Reading {
	r := bareRefusal()
	r.RetryAfter, r.HasRetryAfter = d, true
	return r
}

// A provisional limit (one process's count) caps nothing, but a window
// counted by that one process alone goes one at a time past it: the
// refusal that teaches the limit is then of one request, not of every
// request in flight. A window counted by two processes goes on at full
// speed past it, as a fleet's must to find the server's limit.
func TestPastAProvisionalLimitOneProcessGoesOneAtATime(t *testing.T) {
	reset := t0.Add(time.Hour)
	a := &Ask{Policy: Policy{Kind: Greedy}}
	for _, c := range []struct {
		name    string
		holders []string
		wait    bool
	}{
		{"one process", []string{"p1"}, true},
		{"two processes", []string{"p1", "p2"}, false},
		{"holders unknown", []string{""}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, users := NewBucket(), NewBucket()
			Settle(nil, &b, 0, &Answer{Reading: gitlabMain(1900, reset), Counted: true}, t0)
			users.Learnt, users.Provisional, users.Limit, users.Window = true, true, 5, time.Minute
			users.Reset, users.CountedFrom, users.Remaining = t0.Add(time.Minute), t0, 5
			o := &Owner{}
			take := func(k int) uint64 {
				t.Helper()
				l := lz(t0)
				l.Holder = c.holders[k%len(c.holders)]
				d := Decide([]Option{{Owner: o, Bucket: &b, Scope: &users}}, a, l, t0)
				if d.Wait != 0 || d.Err != nil {
					t.Fatalf("request %d: wait %v err %v, want to go", k+1, d.Wait, d.Err)
				}
				return l.ID
			}
			for k := range 5 {
				SettleScoped(o, &b, &users, take(k), &Answer{Reading: gitlabMain(1800, reset), Counted: true, Sent: t0}, t0)
			}
			take(5) // in flight, past the provisional 5
			l := lz(t0)
			l.Holder = c.holders[0]
			d := Decide([]Option{{Owner: o, Bucket: &b, Scope: &users}}, a, l, t0)
			if got := d.Wait > 0; got != c.wait {
				t.Errorf("the 7th with the 6th in flight: wait %v (counted by %q); want a wait: %v", d.Wait, users.CountedBy, c.wait)
			}
		})
	}
}

// An endpoint's refusal stating its own counts (a limit of 2, remaining 0,
// its window's reset) that comes after the bucket rolled into a new window
// is still the endpoint's: the bucket's remaining is assumed at the roll,
// but its limit of 14 is the server's word, and a refusal stating 2
// contradicts it. The refusal was given to the bucket, which then refilled
// at the endpoint's reset, and a request went a second after another
// process's primary refusal had said none were left for 6 s (the fleet
// simulation's memory seed 8494).
func TestScopeRefusalAfterTheBucketRolledPausesTheScope(t *testing.T) {
	reset := t0.Add(7 * time.Second)
	b, items, search := NewBucket(), NewBucket(), NewBucket()
	a := &Ask{Policy: Policy{Kind: Greedy}}
	Settle(nil, &b, 0, &Answer{Reading: &headers.Reading{Status: http.StatusOK, Limit: 14, Remaining: 3, Used: 11, Reset: reset}, Counted: true}, t0)
	at := reset.Add(time.Second) // past the reset and its grace: the bucket rolls
	id := reserveScoped(t, &b, &search, a, at)
	if !b.Assumed || b.Limit != 14 {
		t.Fatalf("after its reset the bucket is %+v, want its stated limit of 14 with the counts assumed", b)
	}
	endpointReset := at.Add(time.Second)
	r := &headers.Reading{Status: http.StatusTooManyRequests, Limit: 2, Remaining: 0, Used: 2, Reset: endpointReset, Limited: headers.Primary}
	SettleScoped(nil, &b, &search, id, &Answer{Reading: r, Counted: true, Sent: at}, at.Add(50*time.Millisecond))
	if b.Limit != 14 || b.Remaining == 0 {
		t.Errorf("the bucket took the endpoint's refusal: limit %d remaining %d, want its 14 left as it was", b.Limit, b.Remaining)
	}
	if w := waitScoped(&b, &items, a, at.Add(60*time.Millisecond)); w != 0 {
		t.Errorf("a request of another scope waits %v, want none", w)
	}
	if w := waitScoped(&b, &search, a, at.Add(60*time.Millisecond)); w <= 0 {
		t.Errorf("a search goes at once after its endpoint's refusal")
	}
}
