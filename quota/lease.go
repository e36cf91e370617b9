package quota

import "time"

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
	// Units is how much of its bucket the reservation holds: a GraphQL
	// query's predicted points; 0 means 1, a request (see Ask.Units). An
	// owner counts each lease once, whatever its units.
	Units int64 `json:"units,omitempty"`
}

// units is what the lease holds of its bucket: at least 1.
func (l Lease) units() int64 { return max(l.Units, 1) }

// Leases is a set of leases, small (requests in flight) and kept as a
// slice so that it serialises as a short JSON array.
type Leases []Lease

// Live counts the leases that have not lapsed at now.
func (ls Leases) Live(now time.Time) int64 {
	var n int64
	for _, l := range ls {
		if now.Before(l.Until) {
			n++
		}
	}
	return n
}

// LiveUnits sums the units of the leases that have not lapsed at now.
func (ls Leases) LiveUnits(now time.Time) int64 {
	var n int64
	for _, l := range ls {
		if now.Before(l.Until) {
			n += l.units()
		}
	}
	return n
}

// without returns ls less the lease id, and whether it was there. A lease
// that already lapsed (and was pruned) is simply not found: releasing it
// late is harmless.
func (ls Leases) without(id uint64) (Leases, bool) {
	if id == 0 {
		return ls, false
	}
	for i, l := range ls {
		if l.ID == id {
			// Kept with its capacity, even empty: the next
			// reservation appends without allocating.
			ls[i] = ls[len(ls)-1]
			return ls[:len(ls)-1], true
		}
	}
	return ls, false
}

// pruned returns ls less the leases lapsed at now.
func (ls Leases) pruned(now time.Time) Leases {
	k := 0
	for _, l := range ls {
		if now.Before(l.Until) {
			ls[k] = l
			k++
		}
	}
	return ls[:k]
}
