package quotastate_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/memory"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/transport"
)

// TestRefusalSentIntoAnUnheardPause: process A is refused (a secondary
// refusal naming no time: a minute). Process B, which had not heard of it
// (the database was away while A's refusal waited to be written), sends
// during A's pause and is refused too: the server's minute for B counts
// from B's refusal, so the shared pause lengthens to it. A refusal of a
// request already in flight when A was refused lengthens nothing (one
// episode, one strike). In the fleet simulation (memory seed 4177) B's
// refusal was taken as one of A's episode, and the fleet went again 2 s
// before B's minute was over.
func TestRefusalSentIntoAnUnheardPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, err := memory.New(store.Options{Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		a, b := quotastate.New(db, nil), quotastate.New(db, nil)
		defer a.Close(context.Background())
		defer b.Close(context.Background())
		owner := transport.OwnerID{Provider: "api", Owner: "alice"}
		slot := transport.Slot{Owner: owner, Bucket: transport.BucketID{Provider: "api", Owner: "alice", Resource: "core"}}
		refuse := func(st *quotastate.State, sent, at time.Time) {
			t.Helper()
			r := &headers.Reading{Status: 403, Limited: headers.Secondary, Limit: 5000, Remaining: 4000, Reset: at.Add(time.Hour), Used: quota.UnknownCount}
			if err := st.Settle(t.Context(), &transport.SettleParams{Slot: slot, Now: at,
				Answer: quota.Answer{Reading: r, Counted: true, Sent: sent, Jitter: 0.5}}); err != nil {
				t.Fatal(err)
			}
		}
		penalty := func() quota.Owner {
			t.Helper()
			owners, err := a.Owners(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			return owners[owner]
		}
		t0 := time.Now()
		refuse(a, t0.Add(-300*time.Millisecond), t0)
		if o := penalty(); !o.PenaltyUntil.Equal(t0.Add(time.Minute)) {
			t.Fatalf("A's refusal: paused until +%v, want a minute", o.PenaltyUntil.Sub(t0))
		}
		time.Sleep(time.Second)
		refuse(b, t0.Add(500*time.Millisecond), t0.Add(900*time.Millisecond))
		want := t0.Add(900*time.Millisecond + time.Minute)
		if o := penalty(); !o.PenaltyUntil.Equal(want) || o.Strikes != 1 {
			t.Fatalf("B's refusal, of a request sent into the pause: paused until +%v with %d strikes, want +%v (a minute after it) and 1",
				o.PenaltyUntil.Sub(t0), o.Strikes, want.Sub(t0))
		}
		refuse(a, t0.Add(-100*time.Millisecond), t0.Add(1200*time.Millisecond))
		if o := penalty(); !o.PenaltyUntil.Equal(want) || o.Strikes != 1 {
			t.Fatalf("a refusal of a request in flight when A was refused: paused until +%v with %d strikes, want +%v and 1",
				o.PenaltyUntil.Sub(t0), o.Strikes, want.Sub(t0))
		}
	})
}

// blinkingClock is a database whose clock runs ahead by skew and whose
// first reads of it fail, as in a blink.
type blinkingClock struct {
	store.Store
	skew  time.Duration
	fails int
}

func (c *blinkingClock) DatabaseNow(context.Context) (time.Time, error) {
	if c.fails > 0 {
		c.fails--
		return time.Time{}, errors.New("the database is away")
	}
	return time.Now().Add(c.skew), nil
}

// TestFailedClockMeasurementIsNoOffset: the first measurement of the
// offset to the database's clock fails (a blink). The heartbeat that
// needed it fails too, rather than writing this process's time as the
// database's (an offset of 0, 2.5 s off in the fleet simulation's
// schedules); the next call measures again and finds the real offset,
// rather than keeping 0 until the next ClockCheck, a minute later.
func TestFailedClockMeasurementIsNoOffset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, err := memory.New(store.Options{Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		db := &blinkingClock{Store: mem, skew: 2500 * time.Millisecond, fails: 1}
		st := quotastate.New(db, nil)
		defer st.Close(context.Background())
		if err := st.Beat(t.Context(), "p1", time.Now()); err == nil {
			t.Error("a heartbeat was written while the offset to the database's clock was unknown")
		}
		if off := st.ClockOffset(t.Context()); off != db.skew {
			t.Fatalf("after a failed first measurement the offset is %v, want %v (measured again)", off, db.skew)
		}
		if err := st.Beat(t.Context(), "p1", time.Now()); err != nil {
			t.Fatal(err)
		}
	})
}
