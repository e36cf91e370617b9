package transport

import (
	"context"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/holder"
)

// Who holds a reservation, and freeing those of holders that are gone.
//
// Every lease names its holder, this process (Options.Holder). A process
// that starts on a state shared with others frees, before its first
// reservation, the leases of every holder of its machine whose process has
// ended (a fetch, worker or gateway killed with requests in flight): they
// will never report back, and their quota and concurrency slots would
// otherwise stay taken for the whole lease. A holder of another machine
// cannot be looked up; with a State that keeps Heartbeats, it is gone once
// its beat is older than HolderTimeout, and every process sweeps for such
// holders every HolderTimeout.

// HeartbeatEvery is how often a process beats on a shared state, and
// HolderTimeout how old a beat of another machine's process may be before
// its leases are freed: three missed beats, so a pause of the process or
// a slow database does not free the leases of a live one.
const (
	HeartbeatEvery = 10 * time.Second
	HolderTimeout  = 3 * HeartbeatEvery
)

// holderGone reports whether holder h is gone, given the beats of the
// shared state (nil when it keeps none) at now.
func (t *Transport) holderGone(h string, beats map[string]time.Time, now time.Time) bool {
	switch {
	case h == t.holder:
		return false
	case holder.Local(h):
		return holder.Gone(h)
	}
	seen, ok := beats[h]
	return ok && now.Sub(seen) > HolderTimeout
}

// sweepHolders frees the reservations of holders that are gone.
func (t *Transport) sweepHolders(ctx context.Context) {
	ctx, cancel := t.background(ctx)
	defer cancel()
	var beats map[string]time.Time
	if hb, ok := t.state.(Heartbeats); ok {
		var err error
		if beats, err = hb.Beats(ctx); err != nil {
			t.log.Warn("reading the holders' heartbeats", "err", err)
		}
	}
	now := t.opts.Now()
	n, err := t.state.FreeHolders(ctx, func(h string) bool { return t.holderGone(h, beats, now) })
	if err != nil {
		t.log.Warn("freeing the reservations of processes that are gone", "err", err)
		return
	}
	if n > 0 {
		t.log.Info("freed the reservations of processes that are gone", "reservations", n)
		t.emit(Event{Kind: EventHoldersFreed, Attempt: n})
		t.waiters.wake()
	}
}

// background is the context of a beat or sweep: ctx's values, not its
// cancellation (a request that started the first one may end before it),
// 10 s at most, and ended by Close.
func (t *Transport) background(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	stop := context.AfterFunc(t.stopping, cancel)
	return ctx, func() { stop(); cancel() }
}

// startHolding runs once, before the transport's first reservation: it
// frees what processes that are gone held, and on a state with heartbeats
// starts beating (and sweeping for other machines' silent holders).
func (t *Transport) startHolding(ctx context.Context) {
	t.holding.do(func() {
		hb, beating := t.state.(Heartbeats)
		if beating {
			t.beat(ctx, hb)
		}
		t.sweepHolders(ctx)
		if beating {
			t.mu.Lock()
			if !t.closed {
				t.beatTimer = time.AfterFunc(HeartbeatEvery, t.beatLoop)
			}
			t.mu.Unlock()
		}
	})
}

func (t *Transport) beat(ctx context.Context, hb Heartbeats) {
	ctx, cancel := t.background(ctx)
	defer cancel()
	if err := hb.Beat(ctx, t.holder, t.opts.Now()); err != nil && t.stopping.Err() == nil {
		t.log.Warn("writing this process's heartbeat", "err", err)
	}
}

// beatLoop beats, sweeps every HolderTimeout, and arms itself again until
// the transport is closed. Close cancels a beat or sweep under way (it
// may be waiting out a database outage) and waits for it to end.
func (t *Transport) beatLoop() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.beating.Add(1)
	t.mu.Unlock()
	defer t.beating.Done()
	hb := t.state.(Heartbeats)
	t.beat(t.stopping, hb)
	t.mu.Lock()
	t.beats++
	sweep := t.beats%int(HolderTimeout/HeartbeatEvery) == 0
	t.mu.Unlock()
	if sweep {
		t.sweepHolders(t.stopping)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.beatTimer.Reset(HeartbeatEvery)
	}
}

// once runs a function once, and makes every other caller wait until it
// has run. Unlike sync.Once it waits on channels, not on a lock: the
// function may wait out a database outage on a timer, and a wait on a
// channel is one testing/synctest sees blocked, so a simulated clock goes
// on meanwhile (a goroutine blocked on a lock would stop it).
type once struct {
	mu   sync.Mutex
	sem  chan struct{} // held by the caller running fn
	done chan struct{} // closed once fn has run
}

func (o *once) do(fn func()) {
	o.mu.Lock()
	if o.done == nil {
		o.sem, o.done = make(chan struct{}, 1), make(chan struct{})
	}
	sem, done := o.sem, o.done
	o.mu.Unlock()
	select {
	case <-done:
		return
	case sem <- struct{}{}:
	}
	defer func() { <-sem }()
	select {
	case <-done:
		return
	default:
	}
	defer close(done)
	fn()
}
