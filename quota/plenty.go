package quota

import "time"

// PlentyFloor is the least budget Plenty leaves: below it a bucket is
// never plentiful, however large its limit.
const PlentyFloor = 1000

// Plenty is how many units requests asking a may take from owner o,
// bucket b and scope (nil for none; see Option.Scope) at now with so much to spare that taking them ahead of time
// can make no other request wait, 0 for none: after them, at least half
// of b's limit and PlentyFloor units stay unspent, unreserved and beyond
// the policy's reserve, and nothing can hold them back: no penalty, no
// pause, no scope anything is known of, no pacing of writes, content or points, and no cap on the
// owner's requests in flight — where one applies, its slots are what the
// processes share most tightly, and one holding them ahead would make
// the others wait. Only a greedy ask of one unit qualifies: a paced one
// must go at its own time.
//
// A State shared by several processes uses it to take a block of units in
// one transaction and hand them to its next requests without a round trip
// (see store/quotastate): a block holds quota the way requests in flight
// do, so it is safe everywhere, and Plenty says where it is also free.
func Plenty(o *Owner, b, scope *Bucket, a *Ask, now time.Time) int64 {
	switch {
	case a.Policy.Kind != Greedy, a.Free, a.Conditional, a.Units > 1,
		a.Cost.Write, a.Cost.CreatesContent, a.Cost.Points > 0 && a.Secondary.PointsPerMinute > 0:
		return 0
	case o == nil || b == nil:
		return 0
	case now.Before(o.PenaltyUntil), o.ConcurrencyCap(a.Secondary, now) > 0:
		return 0
	case !b.Known(), b.Silent, b.Learnt, b.Configured, now.Before(b.BlockedUntil):
		return 0
	}
	if scope != nil {
		// Only a scope nothing is known of — no limit written down or
		// learnt, no pause — costs nothing and holds nothing back.
		v := *scope
		v.seedScope(a.Scope, now)
		if v.scopeActive(now) {
			return 0
		}
	}
	budget, _ := b.Budget(a.Policy.reserveFor(b), now)
	return max(0, budget-max(PlentyFloor, b.Limit/2))
}
