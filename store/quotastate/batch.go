package quotastate

import (
	"context"
	"time"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/transport"
)

// Deciding together. Every decision that goes writes the rows it spends
// from, holding their locks from its locking read until its commit: two
// round trips and the process's own turn on a core in between. When the
// machine is busy that turn is long, and every other process deciding on
// the same owner waits behind it — the hot rows of a fleet are its
// owners', and a fleet of 16 processes on 10 owners spent most of its time
// queued on them. So a process runs at most maxTransactions reservations
// at a time; the requests that arrive meanwhile queue, and the next
// transaction decides for all of them at once, in the order they came:
// one read (or the view), one locking read of the rows they chose, one
// commit. The busier the process, the more decisions a lock carries; an
// idle process decides each request at once, as before. The timer's write
// of answers (State.Settle) takes the same turn, or, finding it taken,
// leaves them to it (see flushDue): within a process, answers and
// reservations are written one after the other, so a reservation never
// decides while the answers of its own process's requests are being
// written beside it (it would count them still in flight).

// maxTransactions is how many reservation transactions one State runs at
// a time before requests queue to be decided together. One: measured with
// 16 processes on 10 owners, two transactions at a time decided fewer a
// second than one (BENCHMARKS.md, "A fleet on one database").
const maxTransactions = 1

// batches is a State's queue of reservations waiting to be decided
// together (under State.mu).
type batches struct {
	running int
	queue   []*call
	// flushDue: the timer found the turn taken and left the answers
	// waiting to whoever holds it; passTurn sets the timer again if the
	// turn is given back with answers still waiting.
	flushDue bool
}

// call is one reservation in a batch.
type call struct {
	p *transport.ReserveParams
	// fresh moves p's times on to the time the batch decides (see
	// reserveOnDBClock).
	fresh func()
	// limit is the request's limit on waiting out a database outage
	// (store.WithWaitLimit), if it has one: a batch waits no longer than
	// the earliest of its calls'.
	limit    time.Time
	hasLimit bool
	// turn receives nil when the call is decided (i, wait, err), or the
	// batch this call's goroutine is to decide next.
	turn    chan []*call
	decided bool
	d       transport.Decision
	err     error
}

// reserveTogether is Reserve for a request that has not waited: it is
// decided at once, alone, when fewer than maxTransactions run, else it
// queues and is decided with the others queued meanwhile. A request the
// batch could not send (it waits, errs or lost its slot to another
// process) is then decided alone, the way every request used to be.
func (st *State) reserveTogether(ctx context.Context, p *transport.ReserveParams) (transport.Decision, error) {
	c := &call{p: p, turn: make(chan []*call, 1)}
	c.limit, c.hasLimit = store.WaitLimit(ctx)
	var batch []*call
	st.mu.Lock()
	if st.batch.running < maxTransactions {
		st.batch.running++
		batch = []*call{c}
	} else {
		st.batch.queue = append(st.batch.queue, c)
	}
	st.mu.Unlock()
	if batch == nil {
		batch = <-c.turn
	}
	if batch != nil {
		st.lead(ctx, batch)
	}
	if !c.decided {
		return st.reserveAlone(ctx, p)
	}
	return c.d, c.err
}

// lead decides batch, whose first call is the caller's own, then hands
// the turn over to the first of the calls queued meanwhile, with all of
// them as its batch, or gives it back. Whatever happens (a panic
// included), every other call of batch is answered and the turn is handed
// on or given back.
func (st *State) lead(ctx context.Context, batch []*call) {
	defer func() {
		for _, c := range batch[1:] {
			c.turn <- nil
		}
		st.passTurn()
	}()
	if len(batch) == 1 {
		c := batch[0]
		c.d, c.err = st.reserveAlone(ctx, c.p)
		c.decided = true
		return
	}
	st.decideTogether(batch)
}

// passTurn hands the transaction turn (taken by reserveTogether or the
// answers' timer) over to the first of the reservations queued, with all
// of them as its batch, or gives it back.
func (st *State) passTurn() {
	st.mu.Lock()
	next := st.batch.queue
	st.batch.queue = nil
	if len(next) == 0 {
		st.batch.running--
		if st.batch.flushDue && len(st.pending) > 0 {
			st.armLocked(st.FlushDelay)
		}
		st.batch.flushDue = false
	}
	st.mu.Unlock()
	if len(next) > 0 {
		next[0].turn <- next
	}
}

// decideTogether decides the calls of batch in one transaction when they
// can go: it looks at every call's rows (the view, else a snapshot read),
// decides them in order on what it saw, each seeing the ones before it,
// then locks the rows the sending ones chose and decides them again there
// (see commitChosen). Calls that wait, err, or lost their slot are left
// undecided.
func (st *State) decideTogether(batch []*call) {
	ctx, cancel := context.WithTimeout(context.Background(), st.txTimeout(settleTimeout))
	defer cancel()
	for _, c := range batch {
		if c.hasLimit {
			ctx = store.WithWaitLimit(ctx, c.limit)
		}
	}
	off, err := st.offset(ctx)
	if err != nil {
		return // each call is decided alone, which measures again
	}
	for _, c := range batch {
		restore, fresh := reserveOnDBClock(c.p, off)
		defer restore()
		c.fresh = fresh
	}
	defer st.writing.begin()()
	settles := st.takePending()
	l := newLoaded(2 * len(batch))
	keys := make([]slotRows, len(batch))
	for k, c := range batch {
		keys[k] = l.addSlots(c.p.Slots)
	}
	for _, sp := range settles {
		l.addSettle(sp)
	}
	snap, _, err := st.look(ctx, l, true)
	if err != nil {
		st.requeue(settles)
		return
	}
	applySettles(l, settles)
	var chosen []choice
	for k, c := range batch {
		c.fresh()
		d := l.decide(keys[k], c.p)
		if d.Wait == 0 && d.Err == nil && d.Index >= 0 {
			chosen = append(chosen, choice{p: c.p, i: d.Index, c: c, fresh: c.fresh})
		}
	}
	if len(chosen) == 0 {
		st.requeue(settles) // written by the calls decided alone
		return
	}
	won, err := st.commitChosen(ctx, chosen, snap, settles)
	if err != nil {
		st.requeue(settles) // the calls decided alone try again
		return
	}
	for k, ch := range chosen {
		if won[k] {
			ch.c.decided, ch.c.d = true, transport.Decision{Index: ch.i}
		}
	}
}

// choice is a reservation and the slot it chose.
type choice struct {
	p *transport.ReserveParams
	i int
	c *call // its call in a batch; nil alone
	// fresh moves p's times on to the time of the decision under the
	// lock (see reserveOnDBClock).
	fresh func()
}

// slotRows is each slot's owner and bucket key.
type slotRows struct{ owners, buckets []string }
