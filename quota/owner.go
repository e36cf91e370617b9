package quota

import (
	"math"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// Secondary describes the limits a provider enforces per owner on top of
// its quota buckets (GitHub's secondary limits). Zero fields are off.
type Secondary struct {
	// MaxConcurrent caps requests in flight per owner.
	MaxConcurrent int64
	// WriteSpacing is the least time between two writes of one owner.
	WriteSpacing time.Duration
	// PointsPerMinute caps points spent per minute; a read costs 1 point
	// and a write WriteCost.
	PointsPerMinute int64
	WriteCost       int64
}

// Owner is what is known about one credential owner's secondary limits:
// its penalty after a secondary refusal, its requests in flight, its last
// write and its points. Like Bucket, a value with exported fields.
type Owner struct {
	PenaltyUntil time.Time         `json:"penalty_until,omitzero"`
	Strikes      int               `json:"strikes,omitempty"`
	Holders      map[string]Holder `json:"holders,omitempty"`
	NextWrite    time.Time         `json:"next_write,omitzero"`
	PointsTAT    time.Time         `json:"points_tat,omitzero"`
}

// SecondaryBase is the first penalty after a secondary refusal without
// retry-after (GitHub: wait at least a minute).
const SecondaryBase = time.Minute

// maxPenalty caps the exponential penalty.
const maxPenalty = 30 * time.Minute

func (o *Owner) cost(s Secondary, write bool) int64 {
	if write && s.WriteCost > 0 {
		return s.WriteCost
	}
	return 1
}

func (o *Owner) refresh(now time.Time) {
	for id, h := range o.Holders {
		if h.N <= 0 || !now.Before(h.Until) {
			delete(o.Holders, id)
		}
	}
}

// Wait returns how long from now until the owner may send a request
// (write or not), without reserving.
func (o *Owner) Wait(s Secondary, write bool, now time.Time) time.Duration {
	var w time.Duration
	if now.Before(o.PenaltyUntil) {
		w = o.PenaltyUntil.Sub(now)
	}
	if s.MaxConcurrent > 0 {
		n := int64(0)
		for _, h := range o.Holders {
			if h.N > 0 && now.Before(h.Until) {
				n += h.N
			}
		}
		if n >= s.MaxConcurrent {
			w = max(w, probeRetry)
		}
	}
	if write && s.WriteSpacing > 0 && now.Before(o.NextWrite) {
		w = max(w, o.NextWrite.Sub(now))
	}
	if s.PointsPerMinute > 0 {
		per := time.Minute / time.Duration(s.PointsPerMinute)
		// GCRA with a burst of one minute's points: a request of cost c
		// conforms while TAT − now ≤ minute − c·per.
		allowed := now.Add(time.Minute - time.Duration(o.cost(s, write))*per)
		if o.PointsTAT.After(allowed) {
			w = max(w, o.PointsTAT.Sub(allowed))
		}
	}
	return w
}

// Reserve takes the owner's permission for one request at now, or returns
// how long to wait and changes nothing.
func (o *Owner) Reserve(s Secondary, write bool, now time.Time, holder string, lease time.Duration) time.Duration {
	o.refresh(now)
	if w := o.Wait(s, write, now); w > 0 {
		return w
	}
	if s.MaxConcurrent > 0 {
		if o.Holders == nil {
			o.Holders = make(map[string]Holder, 1)
		}
		h := o.Holders[holder]
		h.N++
		h.Until = now.Add(lease)
		o.Holders[holder] = h
	}
	if write && s.WriteSpacing > 0 {
		o.NextWrite = now.Add(s.WriteSpacing)
	}
	if s.PointsPerMinute > 0 {
		per := time.Minute / time.Duration(s.PointsPerMinute)
		o.PointsTAT = maxTime(o.PointsTAT, now).Add(time.Duration(o.cost(s, write)) * per)
	}
	return 0
}

// Release gives back a request's concurrency slot.
func (o *Owner) Release(holder string, n int64) {
	if n <= 0 || o.Holders == nil {
		return
	}
	h, ok := o.Holders[holder]
	if !ok {
		return
	}
	h.N -= n
	if h.N <= 0 {
		delete(o.Holders, holder)
		return
	}
	o.Holders[holder] = h
}

// Observe applies a response's verdict to the owner. A secondary refusal
// pauses the owner: for the Retry-After when given; else until the reset
// when nothing is left; else a minute the first time and, on refusals in a
// row, an exponentially growing penalty of which jitter (a number in
// [0, 1), from the caller's random source) picks a point: 60 s + jitter ×
// 60 s × (2^strikes − 1), capped at 30 minutes. Any other response clears
// the strikes.
func (o *Owner) Observe(r *headers.Reading, now time.Time, jitter float64) {
	if r.Limited != headers.Secondary {
		if r.Limited == headers.NotLimited {
			o.Strikes = 0
		}
		return
	}
	var pause time.Duration
	switch {
	case r.HasRetryAfter:
		pause = r.RetryAfter
	case r.Remaining == 0 && r.HasReset():
		pause = max(r.Reset.Sub(now), 0)
	default:
		pause = penalty(o.Strikes, jitter)
	}
	o.Strikes++
	if until := now.Add(pause); until.After(o.PenaltyUntil) {
		o.PenaltyUntil = until
	}
}

// penalty is the pause after strikes secondary refusals in a row without
// retry-after.
func penalty(strikes int, jitter float64) time.Duration {
	if strikes <= 0 {
		return SecondaryBase
	}
	if jitter < 0 || jitter >= 1 || math.IsNaN(jitter) {
		jitter = 0
	}
	growth := float64(SecondaryBase) * (math.Pow(2, float64(min(strikes, 10))) - 1)
	return min(SecondaryBase+time.Duration(jitter*growth), maxPenalty)
}
