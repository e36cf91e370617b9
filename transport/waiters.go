package transport

import "sync"

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
}

type waiter struct {
	seq   uint64
	woken chan uint64 // receives the baton: the last seq the wake may reach
}

// gen returns the count of wakes so far, to be passed to join by a
// request about to decide.
func (q *waiters) gen() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wakes
}

// join registers a new waiter, the youngest, whose decision began when
// the wakes count was gen; it is woken at once if a wake came since.
func (q *waiters) join(gen uint64) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	w := &waiter{seq: q.seq, woken: make(chan uint64, 1)}
	if q.wakes > gen {
		// Tries again at once. Its baton is 0: the wake's own chain
		// already went through those waiting before it.
		w.woken <- 0
		return w
	}
	q.queue = append(q.queue, w)
	return w
}

// waiting reports whether any request waits.
func (q *waiters) waiting() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue) > 0
}

// leave removes w if no wake has taken it out yet. It reports whether w was
// still waiting; if not, a wake is in its channel (or on its way), and its
// baton must be passed on by the caller.
func (q *waiters) leave(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, x := range q.queue {
		if x == w {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
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
	q.wakeLocked(q.seq)
}

// pass wakes the oldest waiter that joined no later than baton: a woken
// waiter that could not go hands the wake on. A zero baton passes nothing.
func (q *waiters) pass(baton uint64) {
	if baton == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.wakeLocked(baton)
}

func (q *waiters) wakeLocked(baton uint64) {
	if len(q.queue) == 0 || q.queue[0].seq > baton {
		return
	}
	w := q.queue[0]
	q.queue = q.queue[1:]
	if len(q.queue) == 0 {
		q.queue = nil
	}
	w.woken <- baton
}
