package quotastate_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/transport"
)

// fakeClock is a transport.Clock that only the test moves (advance): its
// timers fire then, whatever the system's time.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	clk            *fakeClock
	c              chan time.Time
	at             time.Time
	fired, stopped bool
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) transport.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clk: c, c: make(chan time.Time, 1), at: c.now.Add(d)}
	c.timers = append(c.timers, t)
	c.fireLocked()
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	was := !t.fired && !t.stopped
	t.stopped = true
	return was
}

// advance moves the clock by d and fires the timers due.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fireLocked()
}

func (c *fakeClock) fireLocked() {
	for _, t := range c.timers {
		if !t.fired && !t.stopped && !t.at.After(c.now) {
			t.fired = true
			t.c <- c.now
		}
	}
}

// pending lists in how long each timer set, neither fired nor stopped,
// fires.
func (c *fakeClock) pending() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	for _, t := range c.timers {
		if !t.fired && !t.stopped {
			out = append(out, t.at.Sub(c.now))
		}
	}
	slices.Sort(out)
	return out
}

// countingDB counts a store's transactions and snapshot reads; it has no
// clock of its own (store.Clock), so the State's offset to it is 0.
type countingDB struct {
	store.Store
	writes, reads atomic.Int64
}

func (c *countingDB) UpdateMany(ctx context.Context, keys []string, fn func([]*store.Record) error) error {
	c.writes.Add(1)
	return c.Store.UpdateMany(ctx, keys, fn)
}

func (c *countingDB) Update(ctx context.Context, key string, fn func(*store.Record) error) error {
	c.writes.Add(1)
	return c.Store.Update(ctx, key, fn)
}

func (c *countingDB) GetMany(ctx context.Context, keys []string) ([]store.Record, error) {
	c.reads.Add(1)
	return c.Store.(store.Snapshot).GetMany(ctx, keys)
}

// eventually waits, up to 10 s of the system's time, for cond: what a
// timer of the State runs happens on a goroutine of its own.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
	}
}

// A State given the transport's clock (transport.Clocked) reads the time
// and sets its timers on it, not on the system's: an answer waiting to be
// written is written when that clock reaches FlushDelay, the view of the
// rows ages on it, a block expires when it reaches BlockMaxAge (and what
// it did not hand out is written after blockFlushDelay on it), and Close
// leaves no timer set. FlushDelay is 30 s: on the system's clock the
// answer would not be written within the 10 s the test waits.
func TestTimersRunOnTheInjectedClock(t *testing.T) {
	db := &countingDB{Store: openSQLite(t)}
	clk := &fakeClock{now: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	st := quotastate.New(db, nil)
	st.UseClock(clk)
	st.FlushDelay = 30 * time.Second
	closed := false
	t.Cleanup(func() {
		if !closed {
			st.Close(context.Background())
		}
	})
	slots := pool(2) // two to choose from: a decision looks at the view first
	slot := slots[0]
	for _, sl := range slots {
		spend(t, st, sl, 4000, clk.Now())
	}

	// An answer that pauses nothing waits FlushDelay on the clock.
	before := db.writes.Load()
	settleAt(t, st, slot, 0, ok200(3999, clk.Now()), clk.Now())
	if p := clk.pending(); !slices.Equal(p, []time.Duration{30 * time.Second}) {
		t.Fatalf("timers set on the injected clock: %v, want one of 30s (FlushDelay)", p)
	}
	clk.advance(29 * time.Second)
	if n := db.writes.Load(); n != before {
		t.Fatalf("%d transactions before the injected clock reached FlushDelay, want 0", n-before)
	}
	clk.advance(time.Second)
	eventually(t, "the answer written once the injected clock reached FlushDelay", func() bool { return db.writes.Load() > before })

	reserveGreedy(t, st, slots, 1, clk.Now()) // takes a block
	if quotastate.OpenBlocks(st) != 1 {
		t.Fatal("no block was taken")
	}

	// The block expires when the clock reaches BlockMaxAge.
	if p := clk.pending(); !slices.Equal(p, []time.Duration{quotastate.BlockMaxAge}) {
		t.Fatalf("timers set on the injected clock: %v, want one of %v (BlockMaxAge)", p, quotastate.BlockMaxAge)
	}
	before = db.writes.Load()
	clk.advance(quotastate.BlockMaxAge)
	eventually(t, "the block expired once the injected clock reached BlockMaxAge", func() bool { return quotastate.OpenBlocks(st) == 0 })
	// What it did not hand out waits blockFlushDelay on the clock.
	eventually(t, "a timer set for what the block did not hand out", func() bool { return len(clk.pending()) == 1 })
	if n := db.writes.Load(); n != before {
		t.Fatalf("%d transactions before the injected clock reached blockFlushDelay, want 0", n-before)
	}
	clk.advance(clk.pending()[0])
	eventually(t, "the units given back once the injected clock reached blockFlushDelay", func() bool { return db.writes.Load() > before })

	// The view of the rows ages on the clock: a decision more than
	// viewMaxAge after the last read or write reads them again.
	reads := db.reads.Load()
	clk.advance(time.Second)
	reserveGreedy(t, st, slots, 2, clk.Now())
	if db.reads.Load() == reads {
		t.Fatal("a decision a second after the last read, on the injected clock, chose on the view")
	}

	// Close stops every timer: none is left set, and no goroutine waits.
	settleAt(t, st, slot, 2, ok200(3990, clk.Now()), clk.Now())
	if len(clk.pending()) == 0 {
		t.Fatal("no timer set for the answer")
	}
	closed = true
	if err := st.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := clk.pending(); len(p) != 0 {
		t.Fatalf("timers left set after Close: %v", p)
	}
}
