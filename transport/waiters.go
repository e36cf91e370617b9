package transport

import (
	"slices"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/quota"
)

// waiters lets requests waiting for quota sleep until an answer may have
// freed what they wait for, without every answer waking every waiter: with
// shared state each wake costs a transaction, and a herd of them at every
// answer is what made a waiting request expensive.
//
// An answer wakes one waiter, the one waiting longest. A woken waiter that
// still cannot go passes the wake on to the next one that was already
// waiting when the answer came (its "baton" says up to which), so one answer
// that freed one slot costs one retry, a waiter that cannot use it does not
// stop the one that can, and the chain ends after each earlier waiter has
// tried once. Waits also end at their own deadline, which covers what the
// chain misses (a window that refilled). On a State shared with other
// processes that notifies (Waker), their answers wake the oldest waiter
// here too (across is set).
//
// A waiter that cannot go because it waits on answers (a concurrency slot,
// a first probe) passes the wake on over every waiter that waits on answers
// for the same thing (the same owner, bucket and scope, asking as much, see
// waitKey), for the rest of the wake's chain: they would decide as it did
// and wait again. Without that, a
// wake that freed one slot, used by the first waiter, had every waiter
// behind it decide again, and a queue of N waiters cost N decisions per
// answer (the fleet simulation's most expensive schedules, at a
// concurrency cap, spent most of their decisions so). The waiters passed
// over still end their waits at their own deadlines.
//
// A request that decided to wait while a wake happened — before it joined,
// so the wake and its chain could not reach it — tries again at once when
// it joins; it would otherwise sleep past the answer that freed its slot.
// That covers a wake that found no one waiting, and one whose chain ended
// among the requests already waiting while this one was still deciding.
type waiters struct {
	mu     sync.Mutex
	seq    uint64
	queue  []*waiter // oldest first
	wakes  uint64    // wake calls so far
	across bool      // a Waker wakes them for answers of other processes too
	// lines are the keys waited for now, each with its line's number and
	// how many wait in it: comparing numbers, not keys, keeps a wake's
	// walk along a long queue cheap.
	lines  map[waitKey]*line
	lineNo uint64
}

type line struct {
	no uint64
	n  int
}

type waiter struct {
	seq   uint64
	woken chan relay // receives the wake's baton
	key   waitKey    // what it waits for; zero: nothing it shares
	line  uint64     // its line's number; 0 for a zero key
}

// relay is a wake's baton: the last seq the wake may reach (0: no wake),
// and the keys of the waiters it has found unable to go, which it passes
// over.
type relay struct {
	upTo uint64
	over []uint64 // line numbers
	// line, when not zero, is the one line the wake goes through: the
	// first of a line that woke at its own time and went wakes the next
	// (wakeLine), and the wake ends at the first that cannot go.
	line uint64
}

// skips reports whether r passes over a waiter of line n.
func (r relay) skips(n uint64) bool {
	if r.line != 0 {
		return n != r.line
	}
	return n != 0 && slices.Contains(r.over, n)
}

// waitKey is what a request waits on answers for: the slot that decided
// the wait and what the request asks of it. Two waiters with the same
// nonzero key decide alike until an answer frees that slot again.
type waitKey struct {
	owner         OwnerID
	bucket, scope BucketID
	units         int64
	conditional   bool
	free          bool
	// until is the end of a wait until a known time (a scope's pause),
	// in Unix nanoseconds; zero for a wait on answers.
	until int64
}

// waitKeyOf is the key of a request asking ask that waits on slot s for
// the decision d taken at now: zero when the slot has other buckets
// (Also, Draws), which the key does not tell apart.
func waitKeyOf(s Slot, ask *quota.Ask, d Decision, now time.Time) waitKey {
	if d.Wait <= 0 || !d.OnAnswer && !d.Scoped || len(s.Also) > 0 || len(s.Draws) > 0 {
		return waitKey{}
	}
	k := waitKey{owner: s.Owner, bucket: s.Bucket, scope: s.Scope, units: ask.Units, conditional: ask.Conditional, free: ask.Free}
	if !d.OnAnswer {
		k.until = now.Add(d.Wait).UnixNano()
	}
	return k
}

// gen returns the count of wakes so far, to be passed to join by a
// request about to decide.
func (q *waiters) gen() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wakes
}

// join registers a new waiter, the youngest, whose decision began when
// the wakes count was gen, waiting on answers for key (zero: for
// anything else); it is woken at once if a wake came since.
func (q *waiters) join(gen uint64, key waitKey) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	w := &waiter{seq: q.seq, woken: make(chan relay, 1), key: key}
	if q.wakes > gen {
		// Tries again at once. Its baton is none: the wake's own chain
		// already went through those waiting before it.
		w.woken <- relay{}
		return w
	}
	if key != (waitKey{}) {
		l := q.lines[key]
		if l == nil {
			if q.lines == nil {
				q.lines = make(map[waitKey]*line)
			}
			q.lineNo++
			l = &line{no: q.lineNo}
			q.lines[key] = l
		}
		l.n++
		w.line = l.no
	}
	q.queue = append(q.queue, w)
	return w
}

// removeLocked takes the i-th waiter out of the queue and its line.
func (q *waiters) removeLocked(i int) *waiter {
	w := q.queue[i]
	q.queue = append(q.queue[:i], q.queue[i+1:]...)
	if len(q.queue) == 0 {
		q.queue = nil
	}
	if w.line != 0 {
		if l := q.lines[w.key]; l != nil {
			if l.n--; l.n <= 0 {
				delete(q.lines, w.key)
			}
		}
	}
	return w
}

// lineOf returns the number of key's line, 0 when nobody waits in it.
func (q *waiters) lineOf(key waitKey) uint64 {
	if key == (waitKey{}) {
		return 0
	}
	if l := q.lines[key]; l != nil {
		return l.no
	}
	return 0
}

// waiting reports whether any request waits.
func (q *waiters) waiting() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue) > 0
}

// ahead returns how many waiters wait for key (none for a zero key).
func (q *waiters) ahead(key waitKey) int {
	if key == (waitKey{}) {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.lines[key]; l != nil {
		return l.n
	}
	return 0
}

// leave removes w if no wake has taken it out yet. It reports whether w was
// still waiting; if not, a wake is in its channel (or on its way), and its
// baton must be passed on by the caller.
func (q *waiters) leave(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, x := range q.queue {
		if x == w {
			q.removeLocked(i)
			return true
		}
	}
	return false
}

// wake wakes the oldest waiter, with a baton covering everyone waiting now.
func (q *waiters) wake() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.wakes++
	q.wakeLocked(relay{upTo: q.seq})
}

// pass wakes the oldest waiter that joined no later than baton: a woken
// waiter that could not go hands the wake on. A zero baton passes nothing.
func (q *waiters) pass(baton relay) {
	q.passOver(baton, waitKey{})
}

// passOver passes baton, which a waiter could not use, on as pass does,
// adding keys (those not zero: the line it waited in, the one it waits in
// now) to the keys it passes over (see waiters). A wake of one line ends
// there.
func (q *waiters) passOver(baton relay, keys ...waitKey) {
	if baton.upTo == 0 || baton.line != 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, k := range keys {
		// A line nobody waits in has no one to pass over: those who
		// join it later are beyond the baton.
		if n := q.lineOf(k); n != 0 && !slices.Contains(baton.over, n) {
			baton.over = append(slices.Clip(baton.over), n)
		}
	}
	q.wakeLocked(baton)
}

// wakeLine wakes the oldest waiter of line key, for a waiter of that line
// that woke at its own time and went: the others of the line sleep longer
// (see nextWait), and try one after the other from there.
func (q *waiters) wakeLine(key waitKey) {
	if key == (waitKey{}) {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := q.lineOf(key); n != 0 {
		q.wakeLocked(relay{upTo: q.seq, line: n})
	}
}

// wakeLocked wakes the oldest waiter that joined no later than baton and
// that it does not pass over.
func (q *waiters) wakeLocked(baton relay) {
	for i, w := range q.queue {
		if w.seq > baton.upTo {
			return
		}
		if baton.skips(w.line) {
			continue
		}
		q.removeLocked(i).woken <- baton
		return
	}
}
