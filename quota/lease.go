package quota

import (
	"slices"
	"time"
)

// Lease is one reservation's claim on a bucket's budget and its owner's
// concurrency: quota the request has spent but the server has not reported
// yet. Each reservation has its own lease, with its own expiry, so a
// process that crashed (or forgot a request) loses its claims one by one as
// they lapse, and no later reservation, by it or anyone, renews them.
type Lease struct {
	// ID identifies the reservation; the settle that ends it names it.
	// IDs are drawn at random by each process (see the transport), so
	// two processes sharing a bucket do not collide.
	ID uint64 `json:"id"`
	// Until is when the lease lapses if its request never reports back.
	Until time.Time `json:"until"`
	// Holder names the process that took it (see package
	// internal/holder), so that a process that starts can free at once
	// the leases of a holder proven gone instead of waiting for Until.
	// Empty: unknown (a lease of an older version), never freed early.
	Holder string `json:"holder,omitempty"`
	// Spacing is what taking it pushed the bucket's pacing (TAT) by, and
	// Points, PointsAt and Endpoint what it charged the owner's points
	// budget (Points in the endpoint's slot at PointsAt; see Spent): an
	// answer the server does not charge (a 304) gives them back with the
	// quota, or free repeats would be paced as if spent.
	Spacing  time.Duration `json:"spacing,omitempty"`
	Points   int64         `json:"points,omitempty"`
	PointsAt time.Time     `json:"points_at,omitzero"`
	Endpoint string        `json:"endpoint,omitempty"`
	// Units is how much of its bucket the reservation holds: a GraphQL
	// query's predicted points; 0 means 1, a request (see Ask.Units). An
	// owner counts each lease once, whatever its units.
	Units int64 `json:"units,omitempty"`
	// Conditional marks the lease of a request likely to be answered with
	// a free 304 (see Ask.Conditional): it holds a concurrency slot of
	// its owner but none of its bucket's quota, so it never makes a
	// counted request wait. Its answer says what it cost.
	Conditional bool `json:"conditional,omitempty"`
	// Requests is how many requests the lease stands for: several for a
	// block taken ahead in one decision and handed to requests one by
	// one (see store/quotastate), each of one unit; 0 means 1. It counts
	// that many in its owner's requests in flight, and each settle naming
	// it ends one of them (Answer.Returned: several never sent); the
	// lease goes with the last.
	Requests int64 `json:"requests,omitempty"`
}

// requests is how many requests the lease stands for: at least 1.
func (l Lease) requests() int64 { return max(l.Requests, 1) }

// units is what the lease holds of its bucket: at least 1, none for a
// conditional request.
func (l Lease) units() int64 {
	if l.Conditional {
		return 0
	}
	return max(l.Units, 1)
}

// Leases is a set of leases, small (requests in flight) and kept as a
// slice so that it serialises as a short JSON array.
type Leases []Lease

// Live counts the requests of the leases that have not lapsed at now.
func (ls Leases) Live(now time.Time) int64 {
	var n int64
	for i := range ls {
		if l := &ls[i]; now.Before(l.Until) {
			n += l.requests()
		}
	}
	return n
}

// sent counts the requests of the live leases at now that are sent: a
// lease standing for several requests is a block taken ahead (see
// Block), whose requests its holder sends later, one by one, and alone
// knows how many are out; it counts none of them. An owner's peak in
// flight, which its learnt cap is lowered from, counts these.
func (ls Leases) sent(now time.Time) int64 {
	var n int64
	for i := range ls {
		if l := &ls[i]; l.Requests <= 1 && now.Before(l.Until) {
			n++
		}
	}
	return n
}

// firstLapse is how long from now until the earliest live lease lapses
// (0 when none is live).
func (ls Leases) firstLapse(now time.Time) time.Duration {
	var first time.Time
	for _, l := range ls {
		if now.Before(l.Until) && (first.IsZero() || l.Until.Before(first)) {
			first = l.Until
		}
	}
	if first.IsZero() {
		return 0
	}
	return first.Sub(now)
}

// LiveUnits sums the units of the leases that have not lapsed at now.
func (ls Leases) LiveUnits(now time.Time) int64 {
	var n int64
	for i := range ls {
		if l := &ls[i]; now.Before(l.Until) {
			n += l.units()
		}
	}
	return n
}

// find returns the lease id of ls.
func (ls Leases) find(id uint64) (Lease, bool) {
	for i := range ls {
		if id != 0 && ls[i].ID == id {
			return ls[i], true
		}
	}
	return Lease{}, false
}

// without returns ls less one request of the lease id — the lease, unless
// it stands for more (see Lease.Requests) — what was taken out, and
// whether the lease was there. A lease that already lapsed (and was
// pruned) is simply not found: releasing it late is harmless.
func (ls Leases) without(id uint64) (Leases, Lease, bool) {
	return ls.less(id, 1)
}

// less is without for n requests of the lease.
func (ls Leases) less(id uint64, n int64) (Leases, Lease, bool) {
	if id == 0 {
		return ls, Lease{}, false
	}
	for i := range ls {
		if ls[i].ID != id {
			continue
		}
		if l := &ls[i]; l.requests() > n {
			// A block's requests are of one unit each, and spaced
			// nothing (greedy): what goes is n units and nothing
			// to give back to pacing or points.
			l.Requests, l.Units = l.requests()-n, l.units()-n
			return ls, Lease{ID: id, Until: l.Until, Holder: l.Holder, Units: n, Requests: n}, true
		}
		l, last := ls[i], len(ls)-1
		// Kept with its capacity, even empty: the next reservation
		// appends without allocating.
		if i != last {
			ls[i] = ls[last]
		}
		return ls[:last], l, true
	}
	return ls, Lease{}, false
}

// freed returns ls less the leases whose holder gone reports as gone, and
// how many it removed.
func (ls Leases) freed(gone func(holder string) bool) (Leases, int) {
	k := 0
	for _, l := range ls {
		if l.Holder == "" || !gone(l.Holder) {
			ls[k] = l
			k++
		}
	}
	return ls[:k], len(ls) - k
}

// FreeHolders releases the reservations of every holder gone reports as
// gone (its process ended: its requests will never report back), and
// returns how many it released.
func (o *Owner) FreeHolders(gone func(holder string) bool) int {
	var n int
	o.Leases, n = o.Leases.freed(gone)
	return n
}

// FreeHolders releases the reservations of every holder gone reports as
// gone, and returns how many it released.
func (b *Bucket) FreeHolders(gone func(holder string) bool) int {
	if len(b.Uncounted) > 0 {
		for _, l := range b.Leases {
			if l.Holder != "" && gone(l.Holder) {
				b.uncountedLost(l.ID)
			}
		}
	}
	var n int
	b.Leases, n = b.Leases.freed(gone)
	return n
}

// holderOf is the holder of lease id, "" when ls has none.
func (ls Leases) holderOf(id uint64) string {
	for _, l := range ls {
		if l.ID == id {
			return l.Holder
		}
	}
	return ""
}

// Holders lists the holders of ls, each once.
func (ls Leases) Holders() []string {
	var out []string
	for _, l := range ls {
		if l.Holder != "" && !slices.Contains(out, l.Holder) {
			out = append(out, l.Holder)
		}
	}
	return out
}

// pruned returns ls less the leases lapsed at now.
func (ls Leases) pruned(now time.Time) Leases {
	k := 0
	for k < len(ls) && now.Before(ls[k].Until) {
		k++ // nothing lapsed so far: nothing to move
	}
	for i := k; i < len(ls); i++ {
		if now.Before(ls[i].Until) {
			ls[k] = ls[i]
			k++
		}
	}
	return ls[:k]
}
