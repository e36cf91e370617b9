package quota

import (
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// Unknown is the value of a count that no server has stated yet.
const Unknown = headers.Unknown

// Bucket is what is known about one server-side quota: one (provider,
// owner, resource). Every method is a pure function of the bucket, its
// arguments and the time passed in; a Bucket is a value, safe to copy and
// to serialise (its fields are exported for the stores).
type Bucket struct {
	// Limit, Remaining and Reset are the server's latest word, on the
	// local clock. Remaining never rises within one window: readings that
	// arrive out of order cannot undo spending.
	Limit     int64     `json:"limit"`
	Remaining int64     `json:"remaining"`
	Reset     time.Time `json:"reset,omitzero"`
	// Window is the length of the quota window when known (stated by the
	// server, or the provider's default).
	Window time.Duration `json:"window,omitempty"`
	// Span is the longest time from a reading to its window's reset seen
	// so far: a lower bound of the window length when the server does
	// not state it.
	Span time.Duration `json:"span,omitempty"`
	// Assumed marks Remaining and Reset as this package's guess (a
	// provider default, or a refill assumed at the reset) rather than a
	// server's statement; the next reading replaces them outright.
	Assumed bool `json:"assumed,omitempty"`

	// Holders counts, per process, reservations whose responses have not
	// arrived: quota spent that the server has not reported yet. A process
	// that crashed cannot return its reservations, so each holder's lease
	// lapses unless the process keeps using the bucket.
	Holders map[string]Holder `json:"holders,omitempty"`

	// BlockedUntil is set by a refusal or a Retry-After: nothing may be
	// sent before it.
	BlockedUntil time.Time `json:"blocked_until,omitzero"`

	// TAT is the GCRA's theoretical arrival time: when the next request
	// is due if requests are spread evenly.
	TAT time.Time `json:"tat,omitzero"`

	// Observed is when the last reading was applied.
	Observed time.Time `json:"observed,omitzero"`
}

// Holder is one process's reservations on a bucket.
type Holder struct {
	N     int64     `json:"n"`
	Until time.Time `json:"until"`
}

// NewBucket returns a bucket nothing is known about yet.
func NewBucket() Bucket {
	return Bucket{Limit: Unknown, Remaining: Unknown}
}

// Known reports whether a server (or a provider default) has said how much
// is left.
func (b *Bucket) Known() bool { return b.Remaining != Unknown }

// InFlight is the number of reservations not yet answered whose lease
// has not lapsed at now.
func (b *Bucket) InFlight(now time.Time) int64 {
	var n int64
	for _, h := range b.Holders {
		if h.N > 0 && now.Before(h.Until) {
			n += h.N
		}
	}
	return n
}

// Budget is what may be spent at now: remaining, less what is in flight
// and the reserve. It is negative when the reserve is already eaten into,
// and Unknown when nothing is known.
func (b *Bucket) Budget(reserve int64, now time.Time) int64 {
	if b.Remaining == Unknown {
		return Unknown
	}
	return b.Remaining - b.InFlight(now) - reserve
}

// prune forgets holders whose reservations are all answered or lapsed.
func (b *Bucket) prune(now time.Time) {
	for id, h := range b.Holders {
		if h.N <= 0 || !now.Before(h.Until) {
			delete(b.Holders, id)
		}
	}
}

// roll brings the bucket's window up to now: a window whose reset has
// passed is assumed refilled. It touches no reservation, so a shallow copy
// may roll without disturbing the original.
func (b *Bucket) roll(now time.Time) {
	if !b.Reset.IsZero() && !now.Before(b.Reset) {
		if b.Limit != Unknown {
			b.Remaining = b.Limit
		} else {
			b.Remaining = Unknown
		}
		if b.Window > 0 {
			// Fixed windows roll on; a rolling window (GitHub's)
			// starts at the next request, which this approximates.
			next := b.Reset.Add(b.Window)
			for !now.Before(next) {
				next = next.Add(b.Window)
			}
			b.Reset = next
		} else {
			b.Reset = time.Time{}
		}
		b.Assumed = true
		b.TAT = time.Time{}
	}
}

// sameWindowTolerance is how far two readings' resets may differ and still
// describe one window: resets computed from delta seconds move with
// latency and rounding.
func sameWindowTolerance(window time.Duration) time.Duration {
	tol := time.Second
	if window > 0 && window/10 < tol {
		tol = window / 10
	}
	return tol
}
