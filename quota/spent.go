package quota

import "time"

// Spent is what one secondary budget (a count per window, such as GitHub's
// 900 points a minute per REST endpoint or 80 content creations a minute)
// spent during its last window: the units taken, summed per slot of
// window ÷ spentSlots, oldest slot first.
//
// A budget counted this way holds in every sliding window, however the
// server counts: a unit taken at t counts on the server until t+window,
// and the units of a slot, all taken before its end, are counted here until
// the slot's end plus the window. Yet it spends the whole budget: a batch
// may take all of it at once, and a steady client takes it again a window
// (and at most a slot) later. A GCRA, a single arrival time, cannot do
// both: with a whole window's burst it lets nearly twice the budget into
// the window after a burst, and made safe it must halve either the burst
// or the rate.
//
// A Spent is never changed in place: its methods return a new value, so
// copies of an Owner may share one.
type Spent []SpentSlot

// SpentSlot is the units taken from At, a multiple of the slot length,
// until the next slot.
type SpentSlot struct {
	At time.Time `json:"at"`
	N  int64     `json:"n"`
}

// spentSlots is how many slots a window is cut into: the longest a unit
// is counted past its window is one slot (2 s of a minute, 2 min of an
// hour), and a Spent holds at most spentSlots+1 slots.
const spentSlots = 30

// live is s without the slots whose every unit has left the window by now.
func (s Spent) live(now time.Time, window time.Duration) Spent {
	slot := window / spentSlots
	for i, sl := range s {
		if sl.At.Add(slot + window).After(now) {
			return s[i:]
		}
	}
	return nil
}

// wait is how long from now until n more units fit in a budget of limit
// per window; 0 when they fit now or the budget is off (limit ≤ 0). A
// request costing more than the whole budget goes once nothing is
// counted.
func (s Spent) wait(now time.Time, n, limit int64, window time.Duration) time.Duration {
	if limit <= 0 {
		return 0
	}
	s = s.live(now, window)
	over := n - limit
	for _, sl := range s {
		over += sl.N
	}
	if over <= 0 {
		return 0
	}
	slot := window / spentSlots
	for i, sl := range s {
		over -= sl.N
		if over <= 0 || i == len(s)-1 {
			return sl.At.Add(slot + window).Sub(now)
		}
	}
	return 0
}

// take returns s with n units taken at now, and the slot they were
// counted in. A time before the newest slot (another process's clock, an
// answer settled late) counts in the newest slot, which lasts longer.
func (s Spent) take(now time.Time, n int64, window time.Duration) (Spent, time.Time) {
	s = s.live(now, window)
	at := now.Truncate(window / spentSlots)
	if k := len(s); k > 0 && !s[k-1].At.Before(at) {
		out := append(Spent(nil), s...)
		out[k-1].N += n
		return out, s[k-1].At
	}
	out := make(Spent, len(s), len(s)+1)
	copy(out, s)
	return append(out, SpentSlot{At: at, N: n}), at
}

// give returns s with n units taken in the slot at given back, as for an
// answer the server did not charge. Units whose slot has gone are no
// longer counted anyway.
func (s Spent) give(at time.Time, n int64) Spent {
	for i, sl := range s {
		if sl.At.Equal(at) {
			out := append(Spent(nil), s...)
			out[i].N = max(sl.N-n, 0)
			return out
		}
	}
	return s
}

// Shifted returns s with its times moved by d (from one clock to
// another).
func (s Spent) Shifted(d time.Duration) Spent {
	if s == nil {
		return nil
	}
	out := make(Spent, len(s))
	for i, sl := range s {
		out[i] = SpentSlot{At: sl.At.Add(d), N: sl.N}
	}
	return out
}
