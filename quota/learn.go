package quota

import (
	"math"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// This file is what an owner learns from its answers: how many requests in
// flight the server tolerates, and how long to pause after a secondary
// refusal.

// SecondaryBase is the first penalty after a secondary refusal without
// retry-after when the provider configures none (Secondary.Wait): GitHub
// documents waiting at least a minute.
const SecondaryBase = time.Minute

// DefaultMaxPause caps every pause an answer stores when Answer.MaxPause
// is zero: a proxy's "Retry-After: 86400" must not stop a bucket for a day.
const DefaultMaxPause = time.Hour

// RampStart is how many requests an owner that was never refused may have
// in flight at first. Each round of successes — as many as the cap, of
// requests sent at that cap — adds one, up to Secondary.MaxConcurrent,
// the way TCP's congestion avoidance grows its window by one segment a
// round trip. A server that allows fewer than the configured max is then
// found with about as many refusals as it allows in flight (those sent
// during the round trip before the first refusal comes back), where a
// first burst at the configured max would be refused past the server's
// limit in full; and since only requests sent at the current cap count,
// the cap rises no further before that refusal is back. Reaching GitHub's
// default of 20 takes 16 rounds of two round trips or less.
const RampStart = 4

// CapHoldPauses is how many times the pause a secondary refusal imposed a
// lowered cap holds, counted from the end of that pause, before one more
// request in flight is tried: ten minutes after GitHub's minute, thirty
// seconds after a 3 s penalty. Derived from the server's own pause, so the
// engine behaves alike at every time scale, and long enough that a probe
// above the server's limit (which costs one more pause) loses at most a
// tenth of the time. Each refusal of a cap that had risen doubles the hold.
const CapHoldPauses = 10

// CapStep is the hold of a lowered cap whose pause is not known (an owner
// lowered by an older version): GitHub's minute.
const CapStep = time.Minute

// ConcurrencyCap is how many requests of the owner may be in flight at now,
// or 0 for no cap: the cap learnt from the server, never above
// s.MaxConcurrent. An owner that was never refused ramps up from RampStart
// (see there). Once a fresh secondary refusal lowered it, the cap stays at
// the level the server allowed; it rises by one only when a round of
// successes at that level comes after the hold (Hold, from the end of the
// pause: see CapHoldPauses). With no MaxConcurrent configured only a
// refusal sets a cap.
func (o *Owner) ConcurrencyCap(s Secondary, now time.Time) int64 {
	c := o.Cap
	switch {
	case o.Lowered:
	case s.MaxConcurrent <= 0:
		return 0
	case c <= 0:
		c = RampStart
	}
	if s.MaxConcurrent > 0 {
		c = min(c, s.MaxConcurrent)
	}
	return max(c, 1)
}

// Observe applies the answer to one of the owner's requests, which came
// with inFlight of the owner's requests in flight (that one included).
//
// A secondary refusal pauses the owner: for its Retry-After when given;
// else for Secondary.Wait (SecondaryBase when zero) on the first strike,
// and on strikes in a row an exponentially growing pause of which the
// answer's Jitter (in [0, 1)) picks a point: wait + jitter × wait ×
// (2^strikes − 1); and when it states nothing left, at least until the
// reset. A reset sooner than that shortens nothing: it is the primary
// bucket's, and says nothing of when the secondary penalty ends (a fleet
// that went at a reset 3.5 s after such a refusal walked back into the
// server's penalty: memory seed 2172). Every pause is capped at the
// answer's MaxPause (DefaultMaxPause when zero).
//
// Refusals come in episodes: every request already in flight when the
// server began refusing is refused too, and its answer arrives after the
// pause was set. So only a fresh refusal — of a request sent at or after
// the end of the owner's last pause (Answer.Sent; zero means now) — is a
// new strike and lowers the concurrency cap (see lower); a refusal from the
// episode under way can only lengthen the pause with its own Retry-After.
// A refusal of a request sent during the pause, at or after the episode
// began (PenaltyAt), was not in flight when it began: its process had not
// heard of the pause (the shared database was away while the refusal that
// set it waited to be written). The server refused it in its own right,
// so the wait it names counts from it: it lengthens the pause to
// Secondary.Wait after it (or its Retry-After, or the reset), without a
// strike.
// A success (any answer below 500 that is not a refusal) sent after the
// last pause clears the strikes, and while the owner was never refused,
// successes ramp its cap up (see RampStart).
func (o *Owner) Observe(ans *Answer, inFlight int64, now time.Time) {
	r := ans.Reading
	sent := ans.Sent
	if sent.IsZero() {
		sent = now
	}
	fresh := !sent.Before(o.PenaltyUntil)
	unaware := !fresh && !o.PenaltyAt.IsZero() && !sent.Before(o.PenaltyAt)
	switch {
	case r.Limited == headers.NotLimited && r.Status >= 500:
		return // a struggling server: no reason to send it more
	case r.Limited == headers.NotLimited:
		if fresh {
			o.Strikes = 0
		}
		o.ramp(ans.Secondary, sent, now)
		return
	case r.Limited == headers.Primary, r.Limited == headers.Bare:
		// A bucket's or a scope's refusal, not the owner's: the
		// owner's other buckets go on.
		return
	}
	var pause time.Duration
	switch {
	case r.HasRetryAfter:
		pause = r.RetryAfter
	case fresh:
		pause = penalty(ans.Secondary.Wait, o.Strikes, ans.Jitter)
	case unaware:
		pause = penalty(ans.Secondary.Wait, 0, 0)
	}
	if !r.HasRetryAfter && r.Remaining == 0 && r.HasReset() {
		// The primary bucket is empty as well: nothing goes before its
		// reset either. The reset names no end of the secondary
		// penalty, though, which may outlast it: a reset a few seconds
		// away does not shorten the pause below Secondary.Wait.
		pause = max(pause, r.Reset.Sub(now))
	}
	pause = capPause(pause, ans.MaxPause)
	if until := now.Add(pause); until.After(o.PenaltyUntil) {
		o.PenaltyUntil = until
	}
	switch {
	case fresh:
		o.PenaltyAt = now
		o.Strikes++
		o.lower(ans.Secondary, inFlight, pause, now)
	case now.Before(o.PenaltyAt):
		// A refusal of the episode that came before the one that
		// began it, heard later (its write waited out an outage):
		// the episode began with it.
		o.PenaltyAt = now
	}
}

// lower sets the cap after a fresh secondary refusal that came with
// inFlight requests in flight, itself included, and paused the owner for
// pause. On a first strike it becomes the most requests in flight at once
// since the cap was last lowered (Peak, or inFlight if more), minus one,
// and below the cap in force: a server refusing the request that made n is
// answered exactly by n − 1, the tightest cap that explains the refusal and
// the least throughput given up (halving would run a server that allows 6
// at 3 for minutes). The peak, not the count when the refusal arrives,
// because the refusal's round trip overlaps the answers of the requests
// sent before it, which may all be back by then. A strike right after a
// pause (Strikes above 1) says the count in flight was not the trigger
// alone — GitHub also counts CPU time and points — so the cap halves as
// well, as TCP does, backing off fast whatever the trigger is. Never below
// 1.
//
// The lowered cap holds from the end of the pause (PenaltyUntil), never
// from the refusal: a hold counted from the refusal that is no longer than
// the pause would bring the cap back to the refused level exactly when the
// pause ends, and the first burst after every pause would be refused
// again. The hold is CapHoldPauses pauses, doubled when a cap that had
// risen after an earlier refusal is refused again.
func (o *Owner) lower(s Secondary, inFlight int64, pause time.Duration, now time.Time) {
	c := o.ConcurrencyCap(s, now)
	n := max(o.Peak, inFlight) - 1
	if c > 0 {
		n = min(n, c-1)
	}
	if o.Strikes > 1 {
		if c <= 0 {
			c = n + 1
		}
		n = min(n, c/2)
	}
	hold := CapHoldPauses * max(pause, time.Second)
	if o.Lowered && o.Raised {
		hold = max(hold, 2*o.Hold)
	}
	o.Cap, o.CapAt, o.Lowered, o.Raised, o.Hold, o.Run, o.Peak = max(n, 1), o.PenaltyUntil, true, false, hold, 0, 0
}

// ramp counts a success of a request sent at sent towards the next step.
// An owner that was never refused gains one more in flight after a round of
// successes as long as the cap, of requests sent since the cap last rose.
// A lowered cap gains one the same way, but only once its hold has passed
// since CapAt and the round reached the cap (Peak): successes at the level
// the server allowed, not time alone, show that more may be possible.
func (o *Owner) ramp(s Secondary, sent, now time.Time) {
	if !o.Lowered && s.MaxConcurrent <= 0 {
		return
	}
	c := o.ConcurrencyCap(s, now)
	switch {
	case s.MaxConcurrent > 0 && c >= s.MaxConcurrent:
		o.Cap, o.Run = c, 0
	case sent.Before(o.CapAt):
		// Sent at a lower cap, or during the pause: it says nothing
		// of this one.
	case o.Lowered && now.Sub(o.CapAt) < o.hold():
		// Holding: the level the server allowed is where to stay.
	default:
		o.Run++
		if o.Run >= c && (!o.Lowered || o.Peak >= c) {
			o.Cap, o.CapAt, o.Run = c+1, now, 0
			o.Raised = o.Raised || o.Lowered
		}
	}
}

// hold is how long a lowered cap holds before it may rise (see lower).
func (o *Owner) hold() time.Duration {
	if o.Hold > 0 {
		return o.Hold
	}
	return CapStep
}

// penalty is the pause after a secondary refusal without retry-after
// that follows strikes others in a row; base zero means SecondaryBase.
// The caller caps it.
func penalty(base time.Duration, strikes int, jitter float64) time.Duration {
	if base <= 0 {
		base = SecondaryBase
	}
	if strikes <= 0 {
		return base
	}
	if jitter < 0 || jitter >= 1 || math.IsNaN(jitter) {
		jitter = 0
	}
	growth := float64(base) * (math.Pow(2, float64(min(strikes, 20))) - 1)
	return base + time.Duration(min(jitter*growth, float64(100*365*24*time.Hour)))
}

// capPause bounds a pause an answer asks for by limit (DefaultMaxPause
// when zero or less).
func capPause(d, limit time.Duration) time.Duration {
	if limit <= 0 {
		limit = DefaultMaxPause
	}
	return min(d, limit)
}
