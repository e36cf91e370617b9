package quota

import (
	"slices"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// UnknownCount is the value of a count that no server has stated yet.
const UnknownCount = headers.UnknownCount

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
	// ServerReset is Reset on the server's clock, as the window's
	// readings state it (headers.Reading.ServerReset), zero when none
	// did: readings of one window are told from another's by it when
	// both have one, not by Reset, which each process's estimate of the
	// server's clock moves.
	ServerReset time.Time `json:"server_reset,omitzero"`
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
	// Defaulted marks Limit and Window as the provider's default, taken
	// because no answer stated a limit: a guess, unlike the limit a
	// window's roll keeps, which is still the server's word (see
	// refusalOfScope). A reading that states a limit clears it.
	Defaulted bool `json:"defaulted,omitempty"`
	// Inferred marks a Reset no server stated: readings with remaining
	// but no reset refill a window after the first reading of their
	// window (see Observe).
	Inferred bool `json:"inferred,omitempty"`
	// Silent marks a bucket whose server answered without stating any
	// count, with no default to assume: nothing will ever be known of
	// it, so its requests are not held to one probe at a time (see
	// wait). The first reading that states a count clears it.
	Silent bool `json:"silent,omitempty"`
	// Unstated are when the requests were sent that the server charged
	// in the current window without stating counts (a proxy's 502):
	// the bucket counted each in Remaining itself. A reading of a
	// request sent before them, arriving after, cannot have counted
	// them: they are taken off it, so that its count does not undo
	// theirs (see observeStated). A reading of a request sent after
	// them counts them, and forgets them; a new window forgets them
	// all. At most maxUnstated, the latest.
	Unstated []time.Time `json:"unstated,omitempty"`

	// Leases are the reservations whose responses have not arrived:
	// quota spent that the server has not reported yet. Each lapses on
	// its own (see Lease), so a crashed process cannot pin the bucket.
	Leases Leases `json:"leases,omitempty"`

	// BlockedUntil is set by a refusal or a Retry-After: nothing may be
	// sent before it.
	BlockedUntil time.Time `json:"blocked_until,omitzero"`

	// TAT is the GCRA's theoretical arrival time: when the next request
	// is due if requests are spread evenly.
	TAT time.Time `json:"tat,omitzero"`

	// Observed is when the last reading was applied.
	Observed time.Time `json:"observed,omitzero"`

	// Name is the server's name for the bucket's throttle, when its
	// answers give one (GitLab's RateLimit-Name, an IETF policy name): a
	// refusal naming another is not this bucket's (see refusalOfScope).
	Name string `json:"name,omitempty"`

	// The fields below are a scope's (see scope.go). Learnt marks a limit
	// the server never announced, learnt from its refusals; Configured,
	// one the user wrote down. LimitStated says a refusal stated the
	// limit (RateLimit-Limit), so it is not raised. Strikes counts the
	// fresh refusals in a row that named no time (of an announced
	// bucket: its fresh bare refusals, see bare.go); EpisodeAt is when the
	// episode of refusals under way began, RefusedAt when the last fresh
	// refusal came; Probing (below) the first request of a learnt window.
	Learnt      bool `json:"learnt,omitempty"`
	Configured  bool `json:"configured,omitempty"`
	LimitStated bool `json:"limit_stated,omitempty"`
	Strikes     int  `json:"strikes,omitempty"`
	// Probing marks a learnt scope whose window has just rolled over: one
	// request at a time until one succeeds, so that a window learnt too
	// short is found by one refusal, not a burst.
	Probing   bool      `json:"probing,omitempty"`
	EpisodeAt time.Time `json:"episode_at,omitzero"`
	RefusedAt time.Time `json:"refused_at,omitzero"`
	// Counted is how many requests of a scope something is known of
	// succeeded in its current window, whichever process sent them:
	// the store shares it as it shares the bucket, so a refusal learns
	// the fleet's count, not one process's. CountedFrom is when that
	// count began (the window's start), zero while no whole window is
	// counted (a scope refused before anything was known of it).
	Counted     int64     `json:"counted,omitempty"`
	CountedFrom time.Time `json:"counted_from,omitzero"`
	// CountedBy is the holder (the process, Lease.Holder) of every
	// success Counted holds, while they are all one's; "*" once another's
	// came, "" before any (or for requests whose holder is not known). A
	// provisional limit is one process's count: while the window's count
	// is all one process's too, the limit is likely the fleet's, and the
	// requests past it go one at a time (see pastProvisional).
	CountedBy string `json:"counted_by,omitempty"`
	// Lag is how much earlier than CountedFrom the server's own window
	// may have begun: the server renewed the scope somewhere between the
	// episode's last refusal and its first success when no refusal named
	// the time (a backoff found it), within the rounding of a named one
	// otherwise. A count that may span two of the server's windows
	// teaches nothing certain (see observeScopeRefusal).
	Lag time.Duration `json:"lag,omitempty"`
	// Whole marks a learnt limit that is the fleet's count of a whole
	// window of the server's, taken when the server refused the next
	// request: the limit itself, not a bound. It holds LimitHoldWindows
	// windows from that refusal before it may rise (see riseLearnt).
	Whole bool `json:"whole,omitempty"`
	// Uncounted are the IDs of the scope's leases in flight when a
	// refusal found its count whole (at most maxUncounted): the server
	// may have admitted each in the refused window. An answer ends one
	// (a success of that window raises the limit: see observeScope and
	// countedLate; one answered after the refusal's pause, of either
	// window, raises it too, whole no longer); one that ends without an
	// answer — its holder gone
	// (FreeHolders), or lapsed — may have been charged and never
	// counted, so the limit rises by one for it and is whole no longer
	// (see uncountedLost). UncountedFrom is when that count began.
	Uncounted     []uint64  `json:"uncounted,omitempty"`
	UncountedFrom time.Time `json:"uncounted_from,omitzero"`
	// Probe is how many requests a window of a learnt limit admits
	// beyond it, to ask whether the server allows more (see riseLearnt):
	// the limit itself rises only once a window's count shows it.
	Probe int64 `json:"probe,omitempty"`
	// LastCounted is when the latest answer counted in Counted came, and
	// Straddled marks a count whose window began less than Lag after
	// the previous window's last answer: the server may have admitted
	// that request in the window now counted, and the count may miss it.
	LastCounted time.Time `json:"last_counted,omitzero"`
	Straddled   bool      `json:"straddled,omitempty"`
	// NamedEnd is the end of the server's window the last fresh refusal
	// of a scope named (its Retry-After or reset); the window is between
	// Gap and GapMax, as the gaps between such ends of different windows
	// bound it (see namedWindow).
	NamedEnd time.Time     `json:"named_end,omitzero"`
	Gap      time.Duration `json:"gap,omitempty"`
	GapMax   time.Duration `json:"gap_max,omitempty"`
	// NamedSlack is how much earlier than NamedEnd the end may be: the
	// second a Retry-After or a reset rounds to, and for a Retry-After the
	// round trip of the answer that named it, which counts from when the
	// server wrote it (see namedWindow). Zero in rows written before it
	// was kept: a second.
	NamedSlack time.Duration `json:"named_slack,omitempty"`
	// Provisional marks a learnt limit that is not a count of a whole
	// window by the whole fleet: a first refusal knows only this
	// process's count, and a window that grew knows only its shorter
	// part. It does not cap the scope: the next window is counted, and
	// its refusal teaches the limit (see scope.go).
	Provisional bool `json:"provisional,omitempty"`

	// Refill, when above 0, is the units a second a continuous bucket (a
	// language model's token bucket) refills, learnt from its readings;
	// Remaining is as of RefilledAt and rises at that rate up to the
	// limit (see refillContinuous).
	Refill     float64   `json:"refill,omitempty"`
	RefilledAt time.Time `json:"refilled_at,omitzero"`
}

// NewBucket returns a bucket nothing is known about yet.
func NewBucket() Bucket {
	return Bucket{Limit: UnknownCount, Remaining: UnknownCount}
}

// Known reports whether a server (or a provider default) has said how much
// is left.
func (b *Bucket) Known() bool { return b.Remaining != UnknownCount }

// InFlight is the quota held by reservations not yet answered whose lease
// has not lapsed at now: their units (one per request, or a GraphQL
// query's predicted points).
func (b *Bucket) InFlight(now time.Time) int64 { return b.Leases.LiveUnits(now) }

// Budget is what may be spent at now: remaining, less what is in flight
// and the reserve, and whether it is known at all. It is negative when the
// reserve is already eaten into — any negative number, −1 included, which
// is why "unknown" is a separate result and not a sentinel count.
func (b *Bucket) Budget(reserve int64, now time.Time) (budget int64, known bool) {
	if b.Remaining == UnknownCount {
		return 0, false
	}
	return b.Remaining - b.InFlight(now) - reserve, true
}

// budgetNow is Budget under policy p as of now, for a window whose refill
// time has passed or a bucket refilling continuously counted refilled
// (as waitUnits does). It changes nothing.
func (b *Bucket) budgetNow(p Policy, now time.Time) (int64, bool) {
	if b.Refill > 0 || b.refilledBy(now) {
		c := *b // rolls scalars only: the shared Leases are just read
		c.roll(now)
		return c.Budget(p.reserveFor(&c), now)
	}
	return b.Budget(p.reserveFor(b), now)
}

// prune forgets lapsed leases.
func (b *Bucket) prune(now time.Time) {
	if len(b.Uncounted) > 0 {
		for _, l := range b.Leases {
			if !now.Before(l.Until) {
				b.uncountedLost(l.ID)
			}
		}
	}
	b.Leases = b.Leases.pruned(now)
}

// refillAt is the one moment the bucket counts as refilled, and so the
// moment a wait for it ends: the reset plus the grace (see grace), or the
// reset itself when it is the end of the server's own Retry-After, which
// is exact. Waits and the refill agree on it, so a waiter never wakes into
// the old window. Zero when no reset is known.
func (b *Bucket) refillAt() time.Time {
	switch {
	case b.Reset.IsZero():
		return time.Time{}
	case b.Reset.Equal(b.BlockedUntil):
		return b.Reset
	}
	return b.Reset.Add(b.grace())
}

// refilledBy reports whether the bucket's refill time (refillAt) has come
// at now. refillAt is never before the reset, so a now before the reset
// needs no grace computed: the case of every decision within a window.
func (b *Bucket) refilledBy(now time.Time) bool {
	if b.Reset.IsZero() || now.Before(b.Reset) {
		return false
	}
	return !now.Before(b.refillAt())
}

// roll brings the bucket's window up to now: a window whose refill time
// (refillAt) has passed is assumed refilled. It touches no reservation, so
// a shallow copy may roll without disturbing the original.
func (b *Bucket) roll(now time.Time) {
	b.refillContinuous(now)
	if b.refilledBy(now) {
		b.riseLearnt()
		b.Probing = b.Learnt
		b.Unstated = nil
		if b.Learnt || b.Configured {
			// A scope's new window is counted afresh.
			b.Counted, b.CountedFrom, b.CountedBy = 0, time.Time{}, ""
		}
		if b.Limit != UnknownCount {
			b.Remaining = b.Limit + b.Probe
		} else {
			b.Remaining = UnknownCount
		}
		if b.Window > 0 {
			// Fixed windows roll on; a rolling window (GitHub's)
			// starts at the next request, which this approximates.
			next := b.Reset.Add(b.Window)
			for !now.Before(next.Add(b.grace())) {
				next = next.Add(b.Window)
			}
			b.Reset = next
			if b.Learnt || b.Configured {
				b.CountedFrom = next.Add(-b.Window)
				b.Straddled = !b.LastCounted.Before(b.CountedFrom.Add(-b.Lag))
			}
		} else {
			b.Reset = time.Time{}
		}
		b.Assumed, b.ServerReset = true, time.Time{}
		b.TAT = time.Time{}
	}
}

// sameWindowTolerance is how far two readings' resets may differ and still
// describe one window: resets computed from delta seconds move with
// latency and rounding.
//
// A reset stated in whole seconds from now (the IETF drafts' t=, Hugging
// Face) moves by up to a second between two answers of one window, so the
// tolerance is a little over a second; only a window shorter than a
// couple of seconds lowers it, to half the window, so that the next
// window's reset is still told apart.
func sameWindowTolerance(window time.Duration) time.Duration {
	tol := 1100 * time.Millisecond
	if window > 0 && window/2 < tol {
		tol = window / 2
	}
	return tol
}

// Clone returns a copy of b that shares no memory with it: a decision on
// the copy leaves b as it was.
func (b Bucket) Clone() Bucket {
	b.Leases = slices.Clone(b.Leases)
	b.Unstated = slices.Clone(b.Unstated)
	b.Uncounted = slices.Clone(b.Uncounted)
	return b
}
