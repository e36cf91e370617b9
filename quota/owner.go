package quota

import (
	"maps"
	"slices"
	"time"
)

// Secondary describes the limits a provider enforces per owner on top of
// its quota buckets (GitHub's secondary limits). Zero fields are off.
type Secondary struct {
	// MaxConcurrent caps requests in flight per owner. The owner's
	// learnt cap (see Owner.ConcurrencyCap) stays at or below it.
	MaxConcurrent int64
	// Wait is the first pause after a secondary refusal that does not
	// say when to come back (no Retry-After, quota left); each new strike
	// doubles it, with jitter (see Owner.Observe). Zero means
	// SecondaryBase, GitHub's documented minute.
	Wait time.Duration
	// WriteSpacing is the least time between two writes of one owner.
	WriteSpacing time.Duration
	// PointsPerMinute caps the points one endpoint may be charged per
	// minute (GitHub: 900 for a REST endpoint, 1 per read, 5 per write).
	PointsPerMinute int64
	// ContentPerMinute and ContentPerHour cap requests that create
	// content (GitHub: 80 and 500).
	ContentPerMinute, ContentPerHour int64
}

// spacesWrite reports whether a request of cost c moves the owner's write
// schedule (NextWrite).
func (s Secondary) spacesWrite(c Cost) bool { return c.Write && s.WriteSpacing > 0 }

// countsPoints reports whether a request of cost c spends from its
// endpoint's points budget (Points).
func (s Secondary) countsPoints(c Cost) bool { return s.PointsPerMinute > 0 && c.Points > 0 }

// countsContent reports whether a request of cost c spends from the
// content budgets (ContentMinute, ContentHour).
func (s Secondary) countsContent(c Cost) bool {
	return c.CreatesContent && (s.ContentPerMinute > 0 || s.ContentPerHour > 0)
}

// Cost is what one request spends against the secondary limits.
type Cost struct {
	Write          bool
	Points         int64
	Endpoint       string
	CreatesContent bool
}

// Owner is what is known about one credential owner's secondary limits:
// its penalty after a secondary refusal, the cap on requests in flight
// learnt from the server, its requests in flight, its last write, its
// points per endpoint and its content creation. Like Bucket, a value with
// exported fields; methods change the receiver.
type Owner struct {
	PenaltyUntil time.Time `json:"penalty_until,omitzero"`
	// PenaltyAt is when the episode of refusals under way began: the
	// first refusal heard of it (see Observe).
	PenaltyAt time.Time `json:"penalty_at,omitzero"`
	// Strikes counts episodes of secondary refusals in a row: one per
	// pause, however many requests it refused (see Observe).
	Strikes int `json:"strikes,omitempty"`
	// Cap, CapAt, Lowered, Raised, Hold, Run and Peak are the cap on
	// requests in flight learnt from the server (see ConcurrencyCap): Cap
	// is its value since CapAt (when it rose, or the end of the pause that
	// lowered it); Lowered says a fresh secondary refusal set it, else it
	// is still ramping up from RampStart; Raised says it rose since; Hold
	// is how long a lowered cap stays before it may rise (see lower); Run
	// counts the successes towards the next step; Peak is the most
	// requests in flight at once since the cap was last lowered (a block
	// taken ahead counts none: see Leases.sent).
	Cap     int64         `json:"cap,omitempty"`
	CapAt   time.Time     `json:"cap_at,omitzero"`
	Lowered bool          `json:"lowered,omitempty"`
	Raised  bool          `json:"raised,omitempty"`
	Hold    time.Duration `json:"hold,omitempty"`
	Run     int64         `json:"run,omitempty"`
	Peak    int64         `json:"peak,omitempty"`

	Leases    Leases    `json:"leases,omitempty"`
	NextWrite time.Time `json:"next_write,omitzero"`
	// Points is what each endpoint spent of its points per minute;
	// ContentMinute and ContentHour what the owner's content creation
	// spent of its budgets (see Spent).
	Points        map[string]Spent `json:"points_spent,omitempty"`
	ContentMinute Spent            `json:"content_minute,omitempty"`
	ContentHour   Spent            `json:"content_hour_spent,omitempty"`
}

func (o *Owner) refresh(now time.Time) {
	o.Leases = o.Leases.pruned(now)
	if len(o.Points) == 0 {
		return
	}
	// Points out of their window carry no information.
	for ep, sp := range o.Points {
		if len(sp.live(now, time.Minute)) == 0 {
			delete(o.Points, ep)
		}
	}
}

// Wait returns how long from now until the owner may send a request of
// cost c, without reserving. A wait for a concurrency slot is until the
// earliest lease of the owner lapses: the latest a slot can come back (an
// answer returns one sooner; see Decide).
func (o *Owner) Wait(s Secondary, c Cost, now time.Time) time.Duration {
	w, _ := o.wait(s, c, now)
	return w
}

// wait is Wait, and whether the wait is on the owner's requests in flight
// (a concurrency slot) rather than on a time the state knows.
func (o *Owner) wait(s Secondary, c Cost, now time.Time) (time.Duration, bool) {
	var w time.Duration
	if now.Before(o.PenaltyUntil) {
		w = o.PenaltyUntil.Sub(now)
	}
	var slot time.Duration
	if c := o.ConcurrencyCap(s, now); c > 0 && o.Leases.Live(now) >= c {
		slot = o.Leases.firstLapse(now)
	}
	if s.spacesWrite(c) && now.Before(o.NextWrite) {
		w = max(w, o.NextWrite.Sub(now))
	}
	if s.countsPoints(c) {
		w = max(w, o.Points[c.Endpoint].wait(now, c.Points, s.PointsPerMinute, time.Minute))
	}
	if c.CreatesContent {
		if s.ContentPerMinute > 0 {
			w = max(w, o.ContentMinute.wait(now, 1, s.ContentPerMinute, time.Minute))
		}
		if s.ContentPerHour > 0 {
			w = max(w, o.ContentHour.wait(now, 1, s.ContentPerHour, time.Hour))
		}
	}
	return max(w, slot), slot > w
}

// Reserve takes the owner's permission for one request of cost c at now
// under lease l, or returns how long to wait and changes nothing. It knows
// nothing of the request's bucket: a request reserves both at once with
// the package-level Reserve.
func (o *Owner) Reserve(s Secondary, c Cost, l Lease, now time.Time) time.Duration {
	if w, _ := o.wait(s, c, now); w > 0 {
		return w
	}
	o.take(s, c, l, now)
	return 0
}

// take commits a reservation the owner allows at now. The lease is held
// whether or not concurrency is capped: it is what counts the owner's
// requests in flight.
func (o *Owner) take(s Secondary, c Cost, l Lease, now time.Time) {
	o.refresh(now)
	if s.spacesWrite(c) {
		o.NextWrite = now.Add(s.WriteSpacing)
	}
	if s.countsPoints(c) {
		if o.Points == nil {
			o.Points = make(map[string]Spent, 1)
		}
		o.Points[c.Endpoint], l.PointsAt = o.Points[c.Endpoint].take(now, c.Points, time.Minute)
		l.Points, l.Endpoint = c.Points, c.Endpoint
	}
	o.Leases = append(o.Leases, l)
	if o.Peak < int64(len(o.Leases)) { // else no count of them can raise it
		o.Peak = max(o.Peak, o.Leases.sent(now))
	}
	if s.countsContent(c) {
		if s.ContentPerMinute > 0 {
			o.ContentMinute, _ = o.ContentMinute.take(now, 1, time.Minute)
		}
		if s.ContentPerHour > 0 {
			o.ContentHour, _ = o.ContentHour.take(now, 1, time.Hour)
		}
	}
}

// Release gives back the concurrency of lease id. Releasing a lease that
// lapsed, or twice, does nothing.
func (o *Owner) Release(id uint64) { o.Leases, _, _ = o.Leases.without(id) }

// refund releases lease id and gives back the points it charged: the
// server did not charge its answer.
func (o *Owner) refund(id uint64) {
	var l Lease
	var ok bool
	if o.Leases, l, ok = o.Leases.without(id); ok && l.Points > 0 {
		if sp, ok := o.Points[l.Endpoint]; ok {
			o.Points[l.Endpoint] = sp.give(l.PointsAt, l.Points)
		}
	}
}

// InFlight is the number of the owner's requests in flight at now.
func (o *Owner) InFlight(now time.Time) int64 { return o.Leases.Live(now) }

// Clone returns a copy of o that shares no memory with it.
func (o Owner) Clone() Owner {
	o.Leases = slices.Clone(o.Leases)
	o.Points = maps.Clone(o.Points) // a Spent is never changed in place
	o.ContentMinute, o.ContentHour = slices.Clone(o.ContentMinute), slices.Clone(o.ContentHour)
	return o
}
