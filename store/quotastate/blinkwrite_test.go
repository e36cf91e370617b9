package quotastate_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/memory"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/transport"
)

// TestWritesThatWaitedOutABlinkAreSpaced: two processes ask for a write
// of one owner while the database is away (at +0.2 s and +1.4 s of a
// 3 s blink), and both reservations wait the outage out. A decision is
// taken when it is taken, after the blink: the first write's spacing runs
// from then, and the second waits it out. Each was decided at the time
// it was asked for, so the first spaced the next write from +0.2 s, the
// second (asked at +1.4 s, past that) went at once beside it, and the
// server saw two writes at one instant (memory seeds 1050 and 2172 of the
// fleet simulation, where the second was refused by the secondary limit).
func TestWritesThatWaitedOutABlinkAreSpaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, err := memory.New(store.Options{Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		blink := storetest.NewFaulty(db)
		process := func() *quotastate.State {
			outage := store.NewOutage(store.OutageOptions{Timeout: time.Minute, Logger: slog.New(slog.DiscardHandler)})
			return quotastate.New(store.WaitOutages(storetest.NewFaulty(blink), outage), nil)
		}
		a, b := process(), process()
		defer a.Close(context.Background())
		defer b.Close(context.Background())
		owner := transport.OwnerID{Provider: "api", Owner: "alice"}
		slot := transport.Slot{Owner: owner, Bucket: transport.BucketID{Provider: "api", Owner: "alice", Resource: "core"}}
		t0 := time.Now()
		r := &headers.Reading{Status: 200, Limit: 5000, Remaining: 4000, Reset: t0.Add(time.Hour), Used: quota.UnknownCount}
		if err := a.Settle(t.Context(), &transport.SettleParams{Slot: slot, Now: t0, Answer: quota.Answer{Reading: r, Counted: true}}); err != nil {
			t.Fatal(err)
		}
		if err := a.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, st := range []*quotastate.State{a, b} {
			st.ClockOffset(t.Context()) // measured before the blink
		}
		const spacing = time.Second
		write := quota.Ask{Policy: quota.Policy{Kind: quota.Greedy}, Secondary: quota.Secondary{WriteSpacing: spacing}, Cost: quota.Cost{Write: true}}

		blink.Fail(&pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}, -1)
		var wg sync.WaitGroup
		var went [2]time.Time
		var waits [2]time.Duration
		for i, st := range []*quotastate.State{a, b} {
			asked := t0.Add(200*time.Millisecond + time.Duration(i)*1200*time.Millisecond)
			wg.Go(func() {
				time.Sleep(asked.Sub(t0))
				for {
					now := time.Now()
					d, err := st.Reserve(t.Context(), &transport.ReserveParams{Slots: []transport.Slot{slot}, Ask: write, Clock: time.Now,
						Lease: quota.Lease{ID: uint64(i + 1), Until: now.Add(time.Minute), Holder: "p"}, Now: now})
					if err != nil {
						t.Errorf("process %d: %v", i, err)
						return
					}
					if d.Wait == 0 {
						went[i] = time.Now()
						return
					}
					waits[i] += d.Wait
					time.Sleep(d.Wait)
				}
			})
		}
		time.Sleep(3 * time.Second)
		blink.Heal()
		wg.Wait()
		if went[0].IsZero() || went[1].IsZero() {
			t.Fatal("a write did not go")
		}
		gap := went[1].Sub(went[0]).Abs()
		if gap < spacing {
			t.Fatalf("the writes that waited out the blink went %v apart (at +%v and +%v), want at least the spacing %v",
				gap, went[0].Sub(t0), went[1].Sub(t0), spacing)
		}
	})
}
