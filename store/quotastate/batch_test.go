package quotastate_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/transport"
)

// gateStore holds the first locking transaction at its gate until the
// test opens it, records the keys of every locking transaction, and
// panics in one that locks panicAt rows.
type gateStore struct {
	store.Store
	entered chan struct{} // closed when the first transaction reaches the gate
	gate    chan struct{}
	locked  chan []string
	panicAt int
}

// gatedState opens a State on a gateStore over SQLite, with three slots
// of one request left each; the store's next transaction waits at the
// gate.
func gatedState(t *testing.T) (*gateStore, *quotastate.State, []transport.Slot, time.Time) {
	g := &gateStore{Store: openSQLite(t), entered: make(chan struct{}), gate: make(chan struct{}), locked: make(chan []string, 100)}
	st := quotastate.New(g, nil)
	t.Cleanup(func() { st.Close(context.Background()) })
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	slots := pool(3)
	close(g.entered) // the settles below pass the gate
	for _, sl := range slots {
		spend(t, st, sl, 1, now)
	}
	g.entered = make(chan struct{})
	drain(g.locked)
	return g, st, slots, now
}

func (g *gateStore) UpdateMany(ctx context.Context, keys []string, fn func([]*store.Record) error) error {
	select {
	case <-g.entered:
	default:
		close(g.entered)
		<-g.gate
	}
	g.locked <- slices.Clone(keys)
	if g.panicAt > 0 && len(keys) == g.panicAt {
		panic("store failed")
	}
	return g.Store.UpdateMany(ctx, keys, fn)
}

type outcome struct {
	d   transport.Decision
	err error
	// panicked is what the reservation panicked with, if it did.
	panicked any
}

// reserveAsync starts a greedy reservation of lease id among slots; its
// outcome comes on the channel returned.
func reserveAsync(st *quotastate.State, slots []transport.Slot, id uint64, now time.Time) chan outcome {
	out := make(chan outcome, 1)
	go func() {
		var o outcome
		defer func() {
			o.panicked = recover()
			out <- o
		}()
		o.d, o.err = st.Reserve(context.Background(), &transport.ReserveParams{Slots: slots,
			Ask: quota.Ask{Policy: quota.Policy{Kind: quota.Greedy}}, Lease: quota.Lease{ID: id, Until: now.Add(time.Minute)}, Now: now})
	}()
	return out
}

// queueBehindGate starts the reservation of lease 1 among slots, which
// holds the store's first transaction at the gate, then n more, each
// queued behind it before the next starts; it returns their outcomes in
// that order, once the test opens the gate.
func queueBehindGate(t *testing.T, g *gateStore, st *quotastate.State, slots []transport.Slot, now time.Time, n int) []chan outcome {
	t.Helper()
	t.Cleanup(func() { openGate(g) }) // before the State closes, if the test failed first
	outs := make([]chan outcome, n+1)
	for k := range outs {
		outs[k] = reserveAsync(st, slots, uint64(k+1), now)
		if k == 0 {
			<-g.entered
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		for quotastate.QueuedReservations(st) < k {
			if time.Now().After(deadline) {
				t.Fatalf("reservation %d did not queue", k+1)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return outs
}

// Reservations that arrive while the process's transaction is under way
// queue, and the next transaction decides them together: one locking
// transaction over the rows they chose, in the order they came. Those it
// cannot send (here: no quota left) are decided alone, and wait.
func TestQueuedReservationsAreDecidedTogether(t *testing.T) {
	g, st, slots, now := gatedState(t)

	outs := queueBehindGate(t, g, st, slots, now, 4)
	openGate(g)
	got := collect(t, outs)
	for k, o := range got[:3] {
		if o.err != nil || o.d.Wait != 0 || o.d.Index != k {
			t.Errorf("reservation %d: slot %d, wait %v, %v; want slot %d at once", k+1, o.d.Index, o.d.Wait, o.err, k)
		}
	}
	for k, o := range got[3:] {
		if o.err != nil || o.d.Wait < 59*time.Minute {
			t.Errorf("reservation %d: slot %d, wait %v, %v; want a wait for the reset", k+4, o.d.Index, o.d.Wait, o.err)
		}
	}
	locked := drain(g.locked)
	if len(locked) != 2 || len(locked[1]) != 4 {
		t.Fatalf("locking transactions %v, want the first and one over the two rows of each of the two others that went", locked)
	}
}

// A transaction deciding a batch that panics still answers every queued
// reservation — they are decided alone — and gives the turn back: the
// panic reaches the goroutine that led the batch, and nothing waits
// forever.
func TestBatchThatPanicsAnswersEveryCall(t *testing.T) {
	g, st, slots, now := gatedState(t)
	g.panicAt = 4 // the batch's transaction: the rows of slots 1 and 2

	outs := queueBehindGate(t, g, st, slots, now, 3)
	openGate(g)
	got := collect(t, outs)
	if got[0].d.Index != 0 || got[0].d.Wait != 0 || got[0].err != nil {
		t.Errorf("first reservation: %+v, want slot 0 at once", got[0])
	}
	if got[1].panicked == nil {
		t.Errorf("the batch's leader did not see the panic: %+v", got[1])
	}
	g.panicAt = 0
	// Decided alone, side by side: in either order.
	if got[2].d.Wait != 0 || got[3].d.Wait != 0 || got[2].d.Index+got[3].d.Index != 3 || got[2].d.Index == got[3].d.Index {
		t.Errorf("after the panic: %+v and %+v, want slots 1 and 2 at once, decided alone", got[2], got[3])
	}
	// The turn was given back: a new reservation is decided, and waits.
	later := collect(t, []chan outcome{reserveAsync(st, slots, 9, now)})
	if later[0].d.Wait == 0 || later[0].err != nil {
		t.Errorf("a reservation after the panic: %+v, want a wait", later[0])
	}
}

// collect receives every outcome, failing the test if one takes over 10 s
// (a call nobody answered).
func collect(t *testing.T, outs []chan outcome) []outcome {
	t.Helper()
	var got []outcome
	for k, o := range outs {
		select {
		case v := <-o:
			got = append(got, v)
		case <-time.After(10 * time.Second):
			t.Fatalf("reservation %d was never answered", k+1)
		}
	}
	return got
}

func openGate(g *gateStore) {
	select {
	case <-g.gate:
	default:
		close(g.gate)
	}
}

func drain(c chan []string) [][]string {
	var out [][]string
	for {
		select {
		case k := <-c:
			out = append(out, k)
		default:
			return out
		}
	}
}

// Answers whose timer fired while a reservation held the transaction turn
// are written once the turn is given back, within FlushDelay: the timer
// does not poll while transactions follow one another, and an answer is
// not left waiting when none follows.
func TestAnswersWaitingForTheTurnAreWritten(t *testing.T) {
	g, st, slots, now := gatedState(t)
	outs := queueBehindGate(t, g, st, slots, now, 0) // holds the turn at the gate
	// The answer of another request, read by nobody until written.
	r := &headers.Reading{Status: 200, Limit: 5000, Remaining: 0, Used: 5000, Reset: now.Add(time.Hour)}
	if err := st.Settle(t.Context(), &transport.SettleParams{Slot: slots[2], Now: now, Answer: quota.Answer{Counted: true, Reading: r}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !quotastate.FlushDue(st) {
		if time.Now().After(deadline) {
			t.Fatal("the timer never found the turn taken")
		}
		time.Sleep(time.Millisecond)
	}
	openGate(g)
	collect(t, outs)
	other := quotastate.New(g.Store, nil) // another process, reading the store
	t.Cleanup(func() { other.Close(context.Background()) })
	for {
		bs, err := other.Buckets(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if bs[slots[2].Bucket].Remaining == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the answer was never written: %+v", bs[slots[2].Bucket])
		}
		time.Sleep(time.Millisecond)
	}
}
