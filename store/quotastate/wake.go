package quotastate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"

	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/transport"
)

// Waking other processes, and telling their blocks. A request waiting
// for a concurrency slot or a first probe's answer in one process waits on
// requests in flight in any process; their settles free what it waits for. Each transaction that
// writes settles sends a notification (store.WithNotification) on
// WakeChannel, in the same transaction, carrying the sending State's id;
// every other State listening (OnWake) wakes its transport's oldest
// waiter, which passes the wake on (see transport's waiters). So a waiter
// sleeps until the time its last decision gave, not a fixed poll.

// WakeChannel is the notification channel of settles.
const WakeChannel = "ratekeeper_quota"

var _ transport.Waker = (*State)(nil)

type wakes struct {
	once   sync.Once
	id     string // this State's payload: its own notifications are skipped
	cancel context.CancelFunc
	done   chan struct{}
	// stopped: Close ended the listening, and none starts again.
	stopped bool
	// The transports registered (several may share one State), under
	// State.mu.
	fns      []func()
	waitings []func() bool
}

// wakeID returns the payload of this State's notifications.
func (st *State) wakeID() string {
	st.wake.once.Do(func() {
		var b [8]byte
		_, _ = rand.Read(b[:])
		st.wake.id = hex.EncodeToString(b[:])
	})
	return st.wake.id
}

// notifying returns ctx carrying the notification that settles were
// written, sent if t.frees once the transaction's fn ran, and counted as
// news if t.news (see applySettles: a settle that frees a waiter's slot or
// is news to blocks), when there are settles.
func (st *State) notifying(ctx context.Context, settles []*transport.SettleParams, t *told) context.Context {
	if len(settles) == 0 {
		return ctx
	}
	return store.WithNotification(ctx, store.Notification{Channel: WakeChannel, Payload: st.wakeID(),
		When: func() bool { return t.frees }, News: func() bool { return t.news }})
}

// freesForWaiters reports whether settling p, on owner o and bucket b as
// they are before it, frees what a request may be waiting for on answers
// (quota.Decision.OnAnswer): a concurrency slot of an owner at its cap, a
// bucket whose first probe is out, or one spent only by its requests in
// flight (quota.Bucket.AnswersMayFree). Other settles wake nobody: waits
// on known times end by themselves. A nil o or b frees nothing of its own.
func freesForWaiters(o *quota.Owner, b *quota.Bucket, p *transport.SettleParams) bool {
	if p.Lease == 0 {
		return false
	}
	if o != nil {
		if c := o.ConcurrencyCap(p.Answer.Secondary, p.Now); c > 0 && o.InFlight(p.Now) >= c {
			return true
		}
	}
	return b != nil && (!b.Known() || b.AnswersMayFree(p.Now))
}

// OnWake implements transport.Waker: on a store that notifies
// (store.Notifier), fn is called at each settle another process writes
// that frees a slot or a probe, until Close. Every transport sharing the
// State registers; the store is asked to watch while any of them has a
// request waiting, or a block is open (see store.Notifier).
func (st *State) OnWake(fn func(), waiting func() bool) {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	st.wake.fns = append(st.wake.fns, fn)
	st.wake.waitings = append(st.wake.waitings, waiting)
	st.mu.Unlock()
	st.listen()
}

// listen starts listening for other processes' notifications, once, on a
// store that sends them: each wakes the registered transports' waiters
// (OnWake) and has the open blocks hear the rows again (hear).
func (st *State) listen() {
	n, ok := st.s.(store.Notifier)
	if !ok {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed || st.wake.stopped || st.wake.cancel != nil {
		return
	}
	id := st.wakeID()
	ctx, cancel := context.WithCancel(context.Background())
	st.wake.cancel, st.wake.done = cancel, make(chan struct{})
	go func() {
		defer close(st.wake.done)
		_ = n.Listen(ctx, WakeChannel, func(payload string) {
			if payload != id {
				st.wakeAll()
				st.hear()
			}
		}, st.anyWaiting)
	}()
}

// wakeAll wakes every registered transport's oldest waiter.
func (st *State) wakeAll() {
	st.mu.Lock()
	fns := st.wake.fns
	st.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// anyWaiting reports whether a registered transport has a request
// waiting, or a block is open: someone waits for news.
func (st *State) anyWaiting() bool {
	if st.blocksOpen() {
		return true
	}
	st.mu.Lock()
	ws := st.wake.waitings
	st.mu.Unlock()
	for _, w := range ws {
		if w() {
			return true
		}
	}
	return false
}

// stopListening ends what OnWake started and waits for it.
func (st *State) stopListening() {
	st.mu.Lock()
	cancel, done := st.wake.cancel, st.wake.done
	st.wake.stopped = true
	st.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
