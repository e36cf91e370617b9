package quota

import (
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// ReadFor is Read for a request paced by one of the buckets an answer
// describes, named by its headers' qualifier ("tokens"): see
// headers.ParseFor.
func ReadFor(status int, h http.Header, body []byte, now time.Time, skew time.Duration, bucket string) headers.Reading {
	r := headers.ParseFor(status, h, body, now.Add(skew), bucket)
	if skew != 0 && r.HasReset() {
		r.Reset = r.Reset.Add(-skew)
	}
	return r
}

// learnRefill learns a continuous bucket's rate from reading r at now:
// its reset is when the bucket is full again, so it refills what it
// lacks, limit − remaining, by then. A full bucket teaches nothing and
// keeps the rate known.
func (b *Bucket) learnRefill(r *headers.Reading, now time.Time) {
	if r.Remaining == UnknownCount {
		return // a pause, or another bucket's refusal: nothing of this one
	}
	if r.Limit <= 0 || r.Remaining == UnknownCount || r.Remaining >= r.Limit || !r.Reset.After(now) {
		if b.Refill > 0 {
			b.RefilledAt = now
		}
		return
	}
	// Each reading gives a rate at most the true one, and the most any
	// reading of the same limit gave is the best known: a reset in whole
	// seconds (Anthropic's RFC 3339 times) is rounded up, and the
	// remaining stated is the bucket's level rounded down, so it lacks
	// more than limit − remaining − 1. (Without that unit a bucket of 30
	// requests a minute, read at 2.9 left, would be taken to refill 3 %
	// faster than it does, and its waiters sent early.)
	if lack := r.Limit - r.Remaining - 1; lack > 0 {
		b.Refill = max(b.Refill, float64(lack)/r.Reset.Sub(now).Seconds())
	}
	b.RefilledAt = now
}

// refillContinuous brings a continuous bucket's remaining up to now: the
// whole units its rate gave back since RefilledAt, up to the limit.
// RefilledAt moves on by the time those units took, so fractions are not
// lost between rolls.
func (b *Bucket) refillContinuous(now time.Time) {
	if b.Refill <= 0 || b.Remaining == UnknownCount || b.Limit <= 0 || !now.After(b.RefilledAt) {
		return
	}
	if b.Remaining >= b.Limit {
		b.RefilledAt = now
		return
	}
	units := int64(now.Sub(b.RefilledAt).Seconds()*b.Refill + 1e-6) // what float rounding took
	if units <= 0 {
		return
	}
	if b.Remaining+units >= b.Limit {
		b.Remaining, b.RefilledAt = b.Limit, now
		return
	}
	b.Remaining += units
	b.RefilledAt = b.RefilledAt.Add(time.Duration(float64(units) / b.Refill * float64(time.Second)))
}

// refillWait is how long from now until a continuous bucket has given
// back need more units, counting what it gave back since RefilledAt.
func (b *Bucket) refillWait(need int64, now time.Time) time.Duration {
	d := time.Duration(float64(need)/b.Refill*float64(time.Second)) - now.Sub(b.RefilledAt)
	return max(d.Round(time.Millisecond)+time.Millisecond, time.Millisecond)
}
