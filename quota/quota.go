package quota

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// Kind names a pacing policy.
type Kind string

const (
	// Spread paces continuously: the next request is due after
	// time-to-reset ÷ (budget × Velocity). Because the rate is recomputed
	// from every reading, a velocity above 1 spends a little faster early
	// on yet still lands on zero exactly at the reset.
	Spread Kind = "spread"
	// Adaptive spreads the budget evenly (time-to-reset ÷ budget) and
	// slows down as the bucket drains: ×1 above 50 % left, ×1.5 from 20 %,
	// ×2 from 5 %, ×4 below; the delay is clamped to [MinDelay, MaxDelay].
	Adaptive Kind = "adaptive"
	// Greedy sends as fast as the secondary limits allow until only the
	// reserve is left, then waits for the reset.
	Greedy Kind = "greedy"
)

// Policy says how to spend a bucket.
type Policy struct {
	Kind Kind
	// Velocity multiplies Spread's rate (default 1.5).
	Velocity float64
	// Reserve is kept back for other work in every bucket: requests are
	// only sent while the budget (remaining − in flight) exceeds it. A
	// count must stay below each bucket's limit, or nothing could ever
	// be sent from it: Reserve returns a *ReserveError for such a
	// bucket. ReservePercent, in [0, 100), keeps that share of each
	// bucket's own limit instead (rounded down, so it never takes a whole
	// bucket); set one or the other.
	Reserve        int64
	ReservePercent float64
	// MinDelay and MaxDelay clamp the spacing between two requests of a
	// bucket, under every policy: MinDelay is a floor (greedy too: never
	// more than one request per MinDelay), MaxDelay a ceiling on what
	// spread and adaptive compute (0: none).
	MinDelay, MaxDelay time.Duration
	// Burst is how many requests may go back to back before the spacing
	// applies: a GCRA burst tolerance of Burst intervals. Greedy has no
	// spacing (unless MinDelay sets one) and so nothing to burst over.
	Burst int
}

// DefaultPolicy is the policy used when none is configured: greedy, since
// the usual job is to finish as fast as the quota allows. Long-running
// services that share a token with other work want spread or adaptive.
func DefaultPolicy() Policy { return Policy{Kind: Greedy, Velocity: 1.5, MaxDelay: time.Minute} }

// ParseKind reads a policy name.
func ParseKind(s string) (Kind, error) {
	switch k := Kind(strings.ToLower(strings.TrimSpace(s))); k {
	case Spread, Adaptive, Greedy:
		return k, nil
	}
	return "", fmt.Errorf("unknown policy %q: want spread, adaptive or greedy", s)
}

// Validate reports a policy that cannot work.
func (p Policy) Validate() error {
	if _, err := ParseKind(string(p.Kind)); err != nil {
		return err
	}
	switch {
	case p.Velocity < 0 || math.IsNaN(p.Velocity) || math.IsInf(p.Velocity, 0):
		return fmt.Errorf("policy velocity %v: want a positive number such as 1.5", p.Velocity)
	case p.MinDelay < 0 || p.MaxDelay < 0:
		return fmt.Errorf("min interval %v, max interval %v: want durations of 0 or more, such as 100ms and 1m", p.MinDelay, p.MaxDelay)
	case p.MaxDelay > 0 && p.MinDelay > p.MaxDelay:
		return fmt.Errorf("min interval %v is above max interval %v: want the min at most the max", p.MinDelay, p.MaxDelay)
	case p.Burst < 0:
		return fmt.Errorf("burst %d: want 0 or more requests", p.Burst)
	case p.Reserve < 0:
		return fmt.Errorf("policy reserve %d: want 0 or more requests", p.Reserve)
	case p.ReservePercent < 0 || p.ReservePercent >= 100 || math.IsNaN(p.ReservePercent):
		return fmt.Errorf("policy reserve %v%%: want a percentage from 0 up to (not including) 100", p.ReservePercent)
	case p.Reserve > 0 && p.ReservePercent > 0:
		return fmt.Errorf("policy reserve: both %d requests and %v%% given; want one of them", p.Reserve, p.ReservePercent)
	case p.MinDelay < 0 || p.MaxDelay < 0:
		return fmt.Errorf("policy delays must not be negative")
	case p.MaxDelay > 0 && p.MinDelay > p.MaxDelay:
		return fmt.Errorf("policy min delay %v is above max delay %v", p.MinDelay, p.MaxDelay)
	}
	return nil
}

// reserveFor is what the policy keeps back of bucket b: the count, or the
// percentage of b's limit rounded down (nothing while the limit is
// unknown).
func (p Policy) reserveFor(b *Bucket) int64 {
	if p.ReservePercent > 0 {
		if b.Limit <= 0 {
			return 0
		}
		return int64(float64(b.Limit) * p.ReservePercent / 100)
	}
	return p.Reserve
}

// reachable reports a count reserve that leaves nothing of bucket b.
func (p Policy) reachable(b *Bucket) error {
	if p.ReservePercent == 0 && p.Reserve > 0 && b.Limit > 0 && p.Reserve >= b.Limit {
		return &ReserveError{Reserve: p.Reserve, Limit: b.Limit}
	}
	return nil
}

// ReserveError says that a policy's reserve leaves nothing of a bucket: a
// count reserve at or above the bucket's limit, known once a server (or a
// provider's default) stated it. No request could ever be sent from that
// bucket, so Reserve says so instead of waiting for ever.
type ReserveError struct {
	Reserve, Limit int64
}

func (e *ReserveError) Error() string {
	return fmt.Sprintf("a reserve of %d requests leaves nothing of the bucket's limit of %d; keep back fewer than %d, or a percentage such as 10%%",
		e.Reserve, e.Limit, e.Limit)
}

// Health classifies how much of a bucket is left.
type Health string

// The health words, from the bands below (see bands).
const (
	Healthy       Health = "HEALTHY"   // 50 % or more left
	Fair          Health = "FAIR"      // 20 % to 50 %
	Warning       Health = "WARNING"   // 5 % to 20 %
	Critical      Health = "CRITICAL"  // under 5 %
	Exhausted     Health = "EXHAUSTED" // nothing left, or blocked
	HealthUnknown Health = "UNKNOWN"   // nothing known yet
)

// bands are the shares of a bucket left that status reports and the
// adaptive policy both go by: one table, so that what status calls
// WARNING is where adaptive pacing has slowed down, and by how much.
var bands = [...]struct {
	from   float64 // the band holds shares from here up to the band above
	health Health
	slow   float64 // Adaptive's delay multiplier in the band
}{
	{0.50, Healthy, 1},
	{0.20, Fair, 1.5},
	{0.05, Warning, 2},
	{0, Critical, 4},
}

// band returns the band of share f (remaining ÷ limit, in [0, 1]).
func band(f float64) (Health, float64) {
	for _, b := range bands {
		if f >= b.from {
			return b.health, b.slow
		}
	}
	last := bands[len(bands)-1]
	return last.health, last.slow
}

// HealthOf classifies remaining requests of limit: Exhausted at 0,
// HealthUnknown when remaining is not known, Healthy when the limit is
// not, else the band of remaining ÷ limit.
func HealthOf(remaining, limit int64) Health {
	switch {
	case remaining == UnknownCount:
		return HealthUnknown
	case remaining <= 0:
		return Exhausted
	case limit <= 0:
		return Healthy
	}
	h, _ := band(float64(remaining) / float64(limit))
	return h
}

// HealthAt classifies the bucket at now.
func (b *Bucket) HealthAt(now time.Time) Health {
	c := *b
	c.roll(now)
	if now.Before(b.BlockedUntil) {
		return Exhausted
	}
	return HealthOf(c.Remaining, c.Limit)
}

// Default is what to assume of a bucket whose server states nothing: a
// provider's conservative default (60 requests per minute).
type Default struct {
	Limit  int64
	Window time.Duration
}

// Observe folds a reading into the bucket. r must be on the local clock
// (see Read); now is when the response arrived. counted says whether the
// server charged the request (a 304 answered to a conditional request is
// free on GitHub); it only matters when the response states nothing, so
// the bucket has to count by itself. The request's own lease is returned
// separately (see Settle).
//
// Within one window Remaining only falls, so readings that arrive out of
// order cannot undo spending; a later reset starts a new window and its
// reading is taken as it is. A reading that states remaining but no reset
// (Docker Hub's "ratelimit-remaining: 76;w=21600", Shopify's call limit)
// is taken to refill a window after the first reading of its window: the
// window it states, else the one known, else def's. A Retry-After pauses
// the bucket for at most DefaultMaxPause (see Answer.MaxPause). A bare
// refusal (headers.Bare) only pauses it, for its Retry-After or
// ScopeBackoff (Settle applies the provider's first pause, Answer.BareWait,
// and its doubling).
func (b *Bucket) Observe(r *headers.Reading, now time.Time, counted bool, def Default) {
	b.observe(r, now, time.Time{}, counted, def, DefaultMaxPause)
}

// observe is Observe of the answer to a request sent at sent (zero:
// unknown) with the cap on pauses (DefaultMaxPause when zero).
func (b *Bucket) observe(r *headers.Reading, now, sent time.Time, counted bool, def Default, maxPause time.Duration) {
	if r.Limited == headers.Bare {
		b.pauseBare(&Answer{Reading: r, MaxPause: maxPause}, now)
		return
	}
	b.prune(now)
	b.roll(now)
	b.Observed = now
	if r.Window > 0 {
		b.Window = r.Window
	}
	if r.Resource != "" && r.Limited == headers.NotLimited {
		b.Name = r.Resource
	}
	if r.Remaining != UnknownCount {
		b.Silent = false
		if !b.observeStated(r, now, sent, def) {
			if r.Limited == headers.Primary {
				// A refusal from a window already overtaken teaches
				// no counts, but the time it names is still kept.
				b.blockStale(r, now, maxPause)
			}
			return
		}
	} else {
		b.observeUnstated(r, now, sent, counted, def)
	}

	switch r.Limited {
	case headers.Primary:
		b.observeRefusal(r, now, maxPause)
	case headers.NotLimited:
		if r.HasRetryAfter && r.RetryAfter > 0 {
			// A 503 (or any response) asking for a pause.
			if until := now.Add(capPause(r.RetryAfter, maxPause)); until.After(b.BlockedUntil) {
				b.BlockedUntil = until
			}
		}
	}
}

// observeStated folds in a reading that states remaining, of a request
// sent at sent (zero: unknown): taken as it is when it starts a new
// window, kept to the least remaining within the current one; either way
// less the requests the bucket counted itself that were sent after it
// (Unstated), which it cannot have counted. It reports false, having
// changed nothing of the counts, for a reading from a window already
// overtaken.
func (b *Bucket) observeStated(r *headers.Reading, now, sent time.Time, def Default) bool {
	// Resets compared on the server's clock when both are known there:
	// the local ones each carry their process's estimate of it.
	tol := sameWindowTolerance(b.Window)
	mine, theirs := b.Reset, r.Reset
	if !b.ServerReset.IsZero() && !r.ServerReset.IsZero() {
		mine, theirs = b.ServerReset, r.ServerReset
	}
	newWindow := b.Remaining == UnknownCount || b.Assumed ||
		r.HasReset() && (b.Reset.IsZero() || theirs.After(mine.Add(tol)))
	staleWindow := !newWindow && r.HasReset() && !b.Reset.IsZero() && theirs.Before(mine.Add(-tol))
	remaining := r.Remaining
	if remaining > 0 && !sent.IsZero() {
		remaining = max(remaining-b.unstatedAfter(sent), 0)
	}
	switch {
	case newWindow:
		b.Remaining = remaining
		b.Reset = r.Reset // zero when not stated: see below
		b.ServerReset = r.ServerReset
	case staleWindow:
		// A response from the previous window, overtaken by
		// one from the current window: nothing to learn, not
		// even a refusal — the window it refused has ended,
		// and taking it would idle the token through the whole
		// new one.
		return false
	default:
		b.Remaining = min(b.Remaining, remaining)
		if r.HasReset() && (r.Reset.After(b.Reset) || b.Inferred) {
			b.Reset = r.Reset
		}
		if r.ServerReset.After(b.ServerReset) {
			b.ServerReset = r.ServerReset
		}
	}
	b.forgetUnstated(sent)
	if r.Limit != UnknownCount {
		b.Limit, b.Defaulted = r.Limit, false
	}
	if r.HasReset() {
		b.Inferred = false
	}
	if w := cmp.Or(r.Window, b.Window, def.Window); b.Reset.IsZero() && w > 0 && r.Limited != headers.Primary {
		// No reset stated: every request the window counts was
		// sent before now, so all have left it a window from now,
		// fixed or sliding. Without this the bucket would never
		// refill once spent. (A refusal sets its own: see
		// observeRefusal.)
		b.Reset, b.Inferred = now.Add(w), true
	}
	b.Assumed = false
	if r.HasReset() && b.Reset.Equal(r.Reset) {
		if span := r.Reset.Sub(now); span > b.Span {
			b.Span = span
		}
	}
	return true
}

// maxUnstated bounds Bucket.Unstated: a server that never states its
// counts again keeps no more than these.
const maxUnstated = 32

// unstatedAfter is how many of the requests the bucket counted itself
// (Unstated) were sent at or after sent: a reading of a request sent at
// sent did not count them (of two sent at one instant, either may have
// reached the server first: the count errs low, the safe side).
func (b *Bucket) unstatedAfter(sent time.Time) int64 {
	var n int64
	for _, at := range b.Unstated {
		if !at.Before(sent) {
			n++
		}
	}
	return n
}

// forgetUnstated forgets the requests the bucket counted itself that were
// sent before sent: a reading of a request sent at sent counts them (a
// server counts requests in the order they arrive). A reading of a
// request whose sending is unknown (sent zero) is taken as the latest
// word: it forgets them all.
func (b *Bucket) forgetUnstated(sent time.Time) {
	if sent.IsZero() {
		b.Unstated = nil
		return
	}
	if b.unstatedAfter(sent) == int64(len(b.Unstated)) {
		return
	}
	var later []time.Time
	for _, at := range b.Unstated {
		if !at.Before(sent) {
			later = append(later, at)
		}
	}
	b.Unstated = later
}

// observeUnstated folds in a reading that states no remaining, of a
// request sent at sent (zero: unknown, taken as now): a stated limit is kept until counts come; with
// nothing stated at all the bucket counts by itself, against def from the
// first response on.
func (b *Bucket) observeUnstated(r *headers.Reading, now, sent time.Time, counted bool, def Default) {
	switch {
	case r.Limit != UnknownCount && b.Remaining == UnknownCount:
		b.Limit, b.Defaulted = r.Limit, false
	case b.Remaining == UnknownCount && def.Limit > 0 && r.Limited == headers.NotLimited:
		// The server says nothing: count against the provider's
		// default from this first response on.
		b.Limit, b.Remaining, b.Window, b.Assumed, b.Defaulted = def.Limit, def.Limit, def.Window, true, true
		if def.Window > 0 {
			b.Reset = now.Add(def.Window)
		}
		if counted {
			b.Remaining--
		}
	case b.Remaining == UnknownCount && r.Limit == UnknownCount && r.Limited == headers.NotLimited && r.Status > 0 && r.Status < 500:
		// An answer that states nothing and no default to assume:
		// a probe tells no more than this one did. (A server error
		// proves nothing of the host's limits.)
		b.Silent = true
	case counted && b.Remaining > 0:
		// The server charged the request but did not say so:
		// count it ourselves until it speaks again, and remember
		// when it went, so that a reading of a request sent before
		// it does not undo the count (see observeStated).
		b.Remaining--
		b.Unstated = append(slices.Clip(b.Unstated), cmp.Or(sent, now))
		if n := len(b.Unstated) - maxUnstated; n > 0 {
			b.Unstated = b.Unstated[n:]
		}
	}
}

// observeRefusal empties the bucket on a primary-limit refusal and blocks
// it until the refusal's wait: its Retry-After (capped at maxPause), else
// its reset plus the grace, else headers.DefaultWait.
func (b *Bucket) observeRefusal(r *headers.Reading, now time.Time, maxPause time.Duration) {
	b.Remaining = 0
	var until time.Time
	switch {
	case r.HasRetryAfter:
		until = now.Add(capPause(r.RetryAfter, maxPause)) // the server's word: exact, up to the cap
	case r.HasReset():
		// Waited for like any reset, with the grace. A reset
		// already past (a server rounding down, or behind us)
		// is retried once after the grace, not at once.
		until = maxTime(r.Reset, now).Add(b.grace())
	default:
		until = now.Add(headers.DefaultWait)
	}
	if r.HasReset() && r.Reset.After(b.Reset) {
		b.Reset = r.Reset
	}
	if r.ServerReset.After(b.ServerReset) {
		b.ServerReset = r.ServerReset
	}
	if b.Reset.Before(until) && !b.Reset.Add(b.grace()).Equal(until) || b.Inferred && r.HasRetryAfter {
		// Nothing says when the bucket refills but the refusal's
		// own wait (a reset inferred from a window is only a
		// bound): assume it refills then (exactly, since the
		// wait already holds any grace).
		b.Reset, b.Assumed, b.Inferred, b.ServerReset = until, true, false, time.Time{}
	}
	if until.After(b.BlockedUntil) {
		b.BlockedUntil = until
	}
}

// blockStale keeps the wait of a refusal whose counts describe a window
// already overtaken: nothing goes before its Retry-After, or its reset (plus
// the grace) while that is still ahead. Both are at most moments away.
func (b *Bucket) blockStale(r *headers.Reading, now time.Time, maxPause time.Duration) {
	var until time.Time
	switch {
	case r.HasRetryAfter:
		until = now.Add(capPause(r.RetryAfter, maxPause))
	case r.Reset.After(now):
		until = r.Reset.Add(b.grace())
	}
	if until.After(b.BlockedUntil) {
		b.BlockedUntil = until
	}
}

// Reserve takes one request's worth of the bucket's quota at now under
// lease l if the policy allows it, and returns 0; otherwise it changes
// nothing and returns how long to wait before trying again. It knows
// nothing of the owner's secondary limits: a request reserves both at once
// with the package-level Reserve.
func (b *Bucket) Reserve(p Policy, l Lease, now time.Time) time.Duration {
	if w, _ := b.waitUnits(p, 1, now); w > 0 {
		return w
	}
	b.take(p, l, now)
	return 0
}

// take commits a reservation the bucket allows at now: its units are
// spaced as that many requests.
func (b *Bucket) take(p Policy, l Lease, now time.Time) {
	b.prune(now)
	b.roll(now)
	l.Spacing = time.Duration(l.units()) * b.interval(p, now)
	if l.Spacing > 0 {
		// A request that spaces nothing (greedy) leaves the schedule
		// alone: moving it to its own now would make a decision taken
		// at an earlier now (another goroutine's, another process's
		// whose clock offset is off by a millisecond) wait the
		// difference.
		b.TAT = maxTime(b.TAT, now).Add(l.Spacing)
	}
	b.Leases = append(b.Leases, l)
}

// Wait returns how long from now until the policy would let one request
// go, without reserving anything. Zero means now.
func (b *Bucket) Wait(p Policy, now time.Time) time.Duration {
	w, _ := b.waitUnits(p, 1, now)
	return w
}

// waitUnits is Wait for a request of n units (see Ask.Units), and whether
// the wait is on requests in flight (see wait).
func (b *Bucket) waitUnits(p Policy, n int64, now time.Time) (time.Duration, bool) {
	if b.Refill <= 0 && !b.refilledBy(now) {
		return b.wait(p, n, now) // nothing to roll, and wait changes nothing
	}
	// A continuous bucket (Refill) rolls at every moment, not at a reset.
	c := *b // rolls scalars only: the shared Leases are just read
	c.roll(now)
	return c.wait(p, n, now)
}

// fits caps n units at what the bucket can ever hold beyond the reserve,
// so that a request costing more than a whole window still goes once the
// window is full (and is refused by the server, which then says so)
// instead of waiting for ever.
func (b *Bucket) fits(p Policy, n int64) int64 {
	if b.Limit > 0 {
		n = min(n, max(b.Limit-p.reserveFor(b), 1))
	}
	return max(n, 1)
}

// spentElsewhere counts n units the server may have charged to the bucket
// without telling it (a request of a credential whose owner was not known,
// answered with another bucket's reading).
func (b *Bucket) spentElsewhere(n int64, now time.Time) {
	b.prune(now)
	b.roll(now)
	if b.Remaining > 0 {
		b.Remaining = max(b.Remaining-n, 0)
	}
}

// Release returns the reservation of lease id unused (the request was
// never sent, or its answer is not going to be observed). Releasing a
// lease that lapsed, or twice, does nothing.
func (b *Bucket) Release(id uint64) {
	b.Leases, _, _ = b.Leases.without(id)
	b.answered(id)
}

// refund releases lease id and gives back the pacing it took: the server
// did not charge its answer.
func (b *Bucket) refund(id uint64) {
	var l Lease
	var ok bool
	b.answered(id)
	if b.Leases, l, ok = b.Leases.without(id); ok && l.Spacing > 0 && !b.TAT.IsZero() {
		b.TAT = b.TAT.Add(-l.Spacing)
	}
}

// probeInFlight is how many requests may be in flight on a bucket nothing
// is known about: the first answer tells the limits.
const probeInFlight = 1

// wait is waitUnits on a refreshed bucket: how long until n units may go,
// and whether the wait is on requests in flight, which their answers may
// end sooner (see Decide): the first probe of a bucket nothing is known
// about (until the earliest lease lapses, the latest its answer can come),
// or a bucket spent only by its requests in flight (until the refill).
//
// The latter because the server's remaining is read when a request
// arrives: a request still in flight here may already be counted in the
// remaining of an answer that came back first, and is then subtracted
// twice until its own answer arrives. Just after a refill, when a fleet's
// waiters all send at once, that can show a bucket spent with units left;
// a waiter that then slept until the next refill would leave them unused
// for a whole window.
func (b *Bucket) wait(p Policy, n int64, now time.Time) (time.Duration, bool) {
	var w, inFlight time.Duration
	if now.Before(b.BlockedUntil) {
		w = b.BlockedUntil.Sub(now)
	}
	budget, known := b.Budget(p.reserveFor(b), now)
	switch {
	case !known:
		if !b.Silent && b.Leases.Live(now) >= probeInFlight {
			inFlight = b.Leases.firstLapse(now)
		}
	case budget < b.fits(p, n) && b.Refill > 0 && b.Limit > 0:
		// A token bucket: wait until enough has dripped back, not for
		// the moment it is full; or, with requests in flight, until an
		// answer, which may give back what its reservation held beyond
		// its cost (Anthropic's max_tokens) or count it already.
		if refill := b.refillWait(b.fits(p, n)-budget, now); b.InFlight(now) > 0 {
			inFlight = refill
		} else {
			w = max(w, refill)
		}
	case budget < b.fits(p, n):
		at, out := b.refillAt(), b.InFlight(now) > 0
		var refill time.Duration
		switch {
		case !at.IsZero():
			refill = at.Sub(now)
		case out:
			refill = b.Leases.firstLapse(now)
		case b.Window > 0:
			refill = b.Window
		default:
			refill = headers.DefaultWait
		}
		if out && (at.IsZero() || b.Remaining-p.reserveFor(b) >= b.fits(p, n)) {
			inFlight = refill
		} else {
			w = max(w, refill)
		}
	default:
		// GCRA with a tolerance of Burst intervals: that many may go
		// back to back before the spacing applies.
		due := max(b.TAT.Sub(now), 0) - time.Duration(p.Burst)*b.interval(p, now)
		w = max(w, due)
	}
	return max(w, inFlight), inFlight > w
}

// waitConditional is Wait for a request likely to be answered with a free
// 304 (Ask.Conditional): it goes while the server's own remaining, less
// the counted requests in flight, is above zero — the reserve is not its
// to keep, and it is not paced, since it is not expected to spend. A
// server that refuses conditional requests at an empty bucket (GitHub
// appears to) is never asked at one. A bucket nothing is known of is
// probed one request at a time, as for any request.
func (b *Bucket) waitConditional(now time.Time) (time.Duration, bool) {
	c := *b // rolls scalars only: the shared Leases are just read
	c.roll(now)
	c.TAT = time.Time{}
	return c.wait(Policy{Kind: Greedy}, 1, now)
}

// AnswersMayFree reports whether an answer of one of b's requests in
// flight may let a request go that cannot go now: b is spent only by its
// requests in flight (see wait) — the server said units are left, fewer
// than are in flight here — for a policy keeping back at most a tenth of
// b's limit. A store shared by processes wakes their waiters when it
// writes such an answer; a waiter of a policy keeping back more asks again
// on its own (its wait is on answers all the same). Not on a bucket with
// units to spare (nobody waits) or one the server says is spent (an
// answer gives nothing back before the refill), so a busy bucket's
// answers wake nobody.
func (b *Bucket) AnswersMayFree(now time.Time) bool {
	if !b.Known() || b.Remaining <= 0 {
		return false
	}
	inFlight := b.InFlight(now)
	return inFlight > 0 && b.Remaining-inFlight < 1+max(b.Limit, 0)/10
}

// grace is added to waits for a reset: a server that rounds its Unix
// reset down, or whose clock is a little behind ours, can still count a
// request that arrives exactly at the reset in the old window. It is an
// eightieth of the window's span, between 50 ms and 1 s: a second for
// GitHub's hour, 125 ms for a 10-second window, so short windows do not
// lose a tenth of their time to it.
func (b *Bucket) grace() time.Duration {
	span := b.Window
	if span == 0 {
		span = b.Span
	}
	if span == 0 {
		return time.Second
	}
	return min(max(span/80, 50*time.Millisecond), time.Second)
}

// interval is the policy's spacing between requests at now, clamped to
// [MinDelay, MaxDelay].
func (b *Bucket) interval(p Policy, now time.Time) time.Duration {
	if p.Kind == Greedy {
		return max(p.MinDelay, 0) // paced spaces nothing
	}
	d := b.paced(p, now)
	if p.MaxDelay > 0 && d > p.MaxDelay {
		d = p.MaxDelay
	}
	return max(d, p.MinDelay)
}

// paced is the spacing the policy computes from the budget and the time to
// reset: none for greedy, budget spread over the time left (faster by the
// velocity) for spread, and for adaptive the same slowed down as the
// bucket drains (see bands).
func (b *Bucket) paced(p Policy, now time.Time) time.Duration {
	if p.Kind == Greedy {
		return 0
	}
	budget, known := b.Budget(p.reserveFor(b), now)
	if !known || budget <= 0 {
		return 0
	}
	ttr := b.timeToReset(now)
	if ttr <= 0 {
		return 0
	}
	if p.Kind == Spread {
		v := p.Velocity
		if v <= 0 {
			v = 1.5
		}
		return time.Duration(float64(ttr) / (float64(budget) * v))
	}
	return time.Duration(float64(ttr) / float64(budget) * healthMultiplier(b))
}

// healthMultiplier slows Adaptive down as the bucket drains, band by band
// (see bands).
func healthMultiplier(b *Bucket) float64 {
	if b.Limit <= 0 || b.Remaining == UnknownCount {
		return 1
	}
	_, slow := band(float64(b.Remaining) / float64(b.Limit))
	return slow
}

func (b *Bucket) timeToReset(now time.Time) time.Duration {
	if !b.Reset.IsZero() {
		return b.Reset.Sub(now) + b.grace()
	}
	return b.Window
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
