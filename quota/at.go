package quota

import "time"

// At returns the bucket as it stands at now, for reports: a window whose
// refill time has passed is rolled over, as Reserve would see it —
// remaining back at the limit and marked Assumed, the reset moved to the
// next window when the window's length is known, else unknown. b itself
// is not changed.
func (b Bucket) At(now time.Time) Bucket {
	b.roll(now)
	return b
}
