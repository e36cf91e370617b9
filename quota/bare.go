package quota

import (
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// This file is what a bucket does with a bare refusal (headers.Bare): a
// refusal that states no count and no reset — a proxy's or an abuse
// filter's 429 or 403 page, GitLab's headerless 429. It says nothing of the
// bucket's quota, so it is a pause, never "remaining 0 until the reset":
// Remaining and Reset stay as the last reading left them, and the next
// reading that states a count is taken as it is. (A request with a scope
// takes the refusal to its scope instead: see SettleScoped.)

// pauseBare pauses the bucket after a bare refusal: until its Retry-After
// exactly (capped at the answer's MaxPause), else, for a fresh refusal (of
// a request sent at or after the end of the bucket's last pause), for the
// provider's first pause (Answer.BareWait) doubled with each fresh bare
// refusal in a row (see bareBackoff). A refusal of a request already in
// flight when the pause began can only lengthen it, by at least the first
// pause from now.
func (b *Bucket) pauseBare(ans *Answer, now time.Time) {
	r := ans.Reading
	b.prune(now)
	b.roll(now)
	fresh := !sentAt(ans, now).Before(b.BlockedUntil)
	base := bareBase(ans.BareWait)
	var wait time.Duration
	switch {
	case r.HasRetryAfter:
		wait = r.RetryAfter
	case fresh:
		wait = bareBackoff(base, b.Strikes, ans.Jitter)
	default:
		wait = base
	}
	if fresh {
		b.Strikes++
	}
	if until := now.Add(capPause(wait, ans.MaxPause)); until.After(b.BlockedUntil) {
		b.BlockedUntil = until
	}
}

// clearBare ends a run of bare refusals at the first answer that is not a
// refusal, of a request sent after the pause: the next bare refusal pauses
// for the first pause again.
func (b *Bucket) clearBare(ans *Answer, now time.Time) {
	if b.Strikes > 0 && ans.Reading.Limited == headers.NotLimited && ans.Reading.Status < 500 &&
		!sentAt(ans, now).Before(b.BlockedUntil) {
		b.Strikes = 0
	}
}

// bareBase is the first pause after a bare refusal: the provider's, else
// ScopeBackoff.
func bareBase(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return ScopeBackoff
}

// bareBackoff is the pause after a fresh bare refusal naming no time that
// follows strikes others in a row: base exactly the first time (GitHub's
// "at least a minute" is a minute, so a batch loses no more), then
// base·2^strikes, lengthened by jitter (in [0, 1)) by up to the growth
// over base, so that clients refused together do not come back together
// and none comes back sooner than the doubling. The caller caps it.
func bareBackoff(base time.Duration, strikes int, jitter float64) time.Duration {
	if jitter < 0 || jitter >= 1 || jitter != jitter {
		jitter = 0
	}
	d := base << min(strikes, 20)
	return d + time.Duration(jitter*float64(d-base))
}
