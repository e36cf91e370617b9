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
	// PointsPerMinute caps the points one endpoint may be charged per
	// minute (GitHub: 900 for a REST endpoint, 1 per read, 5 per write).
	PointsPerMinute int64
	// ContentPerMinute and ContentPerHour cap requests that create
	// content (GitHub: 80 and 500).
	ContentPerMinute, ContentPerHour int64
}

// Cost is what one request spends against the secondary limits.
type Cost struct {
	Write          bool
	Points         int64
	Endpoint       string
	CreatesContent bool
}

// Owner is what is known about one credential owner's secondary limits:
// its penalty after a secondary refusal, its requests in flight, its last
// write, its points per endpoint and its content creation. Like Bucket, a
// value with exported fields; methods change the receiver.
type Owner struct {
	PenaltyUntil time.Time            `json:"penalty_until,omitzero"`
	Strikes      int                  `json:"strikes,omitempty"`
	Holders      map[string]Holder    `json:"holders,omitempty"`
	NextWrite    time.Time            `json:"next_write,omitzero"`
	PointsTAT    map[string]time.Time `json:"points_tat,omitempty"`
	ContentMin   time.Time            `json:"content_min,omitzero"`
	ContentHour  time.Time            `json:"content_hour,omitzero"`
}

// SecondaryBase is the first penalty after a secondary refusal without
// retry-after (GitHub: wait at least a minute).
const SecondaryBase = time.Minute

// maxPenalty caps the exponential penalty.
const maxPenalty = 30 * time.Minute

func (o *Owner) refresh(now time.Time) {
	for id, h := range o.Holders {
		if h.N <= 0 || !now.Before(h.Until) {
			delete(o.Holders, id)
		}
	}
	// A theoretical arrival time in the past carries no information.
	for ep, tat := range o.PointsTAT {
		if !tat.After(now) {
			delete(o.PointsTAT, ep)
		}
	}
}

// The secondary budgets are GCRAs that keep any sliding window of the
// stated length within the stated count, whatever the server's way of
// counting: a burst of half the count, and the other half spread over the
// window. (A GCRA with a whole window's burst would allow nearly twice the
// count in the window after a burst, which a server counting over a
// sliding window refuses.)

// gcraWait is how long a request costing n units must wait under such a
// GCRA allowing perWindow units per window.
func gcraWait(tat, now time.Time, n, perWindow int64, window time.Duration) time.Duration {
	if perWindow <= 0 || tat.IsZero() {
		return 0
	}
	per := 2 * window / time.Duration(perWindow)
	allowed := now.Add(window - time.Duration(n)*per)
	if tat.After(allowed) {
		return tat.Sub(allowed)
	}
	return 0
}

func gcraTake(tat, now time.Time, n, perWindow int64, window time.Duration) time.Time {
	per := 2 * window / time.Duration(perWindow)
	return maxTime(tat, now).Add(time.Duration(n) * per)
}

// Wait returns how long from now until the owner may send a request of
// cost c, without reserving.
func (o *Owner) Wait(s Secondary, c Cost, now time.Time) time.Duration {
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
	if c.Write && s.WriteSpacing > 0 && now.Before(o.NextWrite) {
		w = max(w, o.NextWrite.Sub(now))
	}
	if s.PointsPerMinute > 0 && c.Points > 0 {
		w = max(w, gcraWait(o.PointsTAT[c.Endpoint], now, c.Points, s.PointsPerMinute, time.Minute))
	}
	if c.CreatesContent {
		if s.ContentPerMinute > 0 {
			w = max(w, gcraWait(o.ContentMin, now, 1, s.ContentPerMinute, time.Minute))
		}
		if s.ContentPerHour > 0 {
			w = max(w, gcraWait(o.ContentHour, now, 1, s.ContentPerHour, time.Hour))
		}
	}
	return w
}

// Reserve takes the owner's permission for one request of cost c at now,
// or returns how long to wait and changes nothing.
func (o *Owner) Reserve(s Secondary, c Cost, now time.Time, holder string, lease time.Duration) time.Duration {
	o.refresh(now)
	if w := o.Wait(s, c, now); w > 0 {
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
	if c.Write && s.WriteSpacing > 0 {
		o.NextWrite = now.Add(s.WriteSpacing)
	}
	if s.PointsPerMinute > 0 && c.Points > 0 {
		if o.PointsTAT == nil {
			o.PointsTAT = make(map[string]time.Time, 1)
		}
		o.PointsTAT[c.Endpoint] = gcraTake(o.PointsTAT[c.Endpoint], now, c.Points, s.PointsPerMinute, time.Minute)
	}
	if c.CreatesContent {
		if s.ContentPerMinute > 0 {
			o.ContentMin = gcraTake(o.ContentMin, now, 1, s.ContentPerMinute, time.Minute)
		}
		if s.ContentPerHour > 0 {
			o.ContentHour = gcraTake(o.ContentHour, now, 1, s.ContentPerHour, time.Hour)
		}
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
