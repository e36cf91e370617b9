package quotastate_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/transport"
)

// TestSettleWakesOtherProcesses: a settle written by one process (its own
// store and State) wakes the waiters of another listening on the same
// database, through PostgreSQL's NOTIFY or SQLite's data_version — the
// waiters of each transport sharing that State — when it frees what a
// wait on answers waits for: the answer of a bucket's first probe, or of
// a bucket spent only by its requests in flight (10 left, 8 sent, the 5th
// to arrive answering first with 5 left: the first's answer, and each
// after it, may show units left before the refill).
func TestSettleWakesOtherProcesses(t *testing.T) {
	backends := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "wake.db") },
		"postgres": func(t *testing.T) string { return storetest.NewPostgresSchema(t, storetest.PostgresBase(t)) },
	}
	cases := map[string]func(t *testing.T, a *quotastate.State, sl transport.Slot, id *uint64){
		"first-probe": func(t *testing.T, a *quotastate.State, sl transport.Slot, id *uint64) {
			reserveN(t, a, sl, id, 1)
			settle(t, a, sl, *id, nil)
		},
		"spent-in-flight": func(t *testing.T, a *quotastate.State, sl transport.Slot, id *uint64) {
			reset := time.Now().Add(10 * time.Second)
			settle(t, a, sl, 0, &headers.Reading{Status: 200, Limit: 10, Remaining: 10, Used: quota.UnknownCount, Reset: reset})
			first := *id + 1
			reserveN(t, a, sl, id, 8)
			settle(t, a, sl, first+4, &headers.Reading{Status: 200, Limit: 10, Remaining: 5, Used: quota.UnknownCount, Reset: reset})
			settle(t, a, sl, first, &headers.Reading{Status: 200, Limit: 10, Remaining: 9, Used: quota.UnknownCount, Reset: reset})
		},
	}
	for _, name := range []string{"sqlite", "postgres"} {
		for _, c := range []string{"first-probe", "spent-in-flight"} {
			t.Run(name+"/"+c, func(t *testing.T) {
				dsn := backends[name](t)
				open := func() *quotastate.State {
					s, err := store.Open(t.Context(), dsn, store.Options{})
					if err != nil {
						t.Fatal(err)
					}
					st := quotastate.New(s, nil)
					t.Cleanup(func() { st.Close(context.Background()); s.Close() })
					return st
				}
				a, b := open(), open()
				woken, second := make(chan struct{}, 100), make(chan struct{}, 100)
				b.OnWake(func() { woken <- struct{}{} }, func() bool { return true })
				b.OnWake(func() { second <- struct{}{} }, func() bool { return false })
				if name == "sqlite" {
					<-woken // a wait's start looks once: a commit may precede it
					<-second
				}
				// Again, on a new bucket each time, until one wakes b:
				// PostgreSQL's LISTEN may still be connecting when the
				// first is sent.
				deadline := time.After(10 * time.Second)
				var id uint64
				for k := 0; ; k++ {
					sl := transport.Slot{Owner: transport.OwnerID{Provider: "p", Owner: "o"},
						Bucket: transport.BucketID{Provider: "p", Owner: "o", Resource: fmt.Sprintf("core%d", k)}}
					cases[c](t, a, sl, &id)
					if err := a.Flush(t.Context()); err != nil {
						t.Fatal(err)
					}
					select {
					case <-woken:
						<-second // the other transport on b, at the same wake
						return
					case <-deadline:
						t.Fatal("no wake in 10 s")
					case <-time.After(50 * time.Millisecond):
					}
				}
			})
		}
	}
}

// reserveN reserves n requests on sl, with the lease IDs after *id.
func reserveN(t *testing.T, st *quotastate.State, sl transport.Slot, id *uint64, n int) {
	t.Helper()
	for range n {
		*id++
		now := time.Now()
		if d, err := st.Reserve(t.Context(), &transport.ReserveParams{Slots: []transport.Slot{sl}, Ask: quota.Ask{Policy: quota.Policy{Kind: quota.Greedy}},
			Lease: quota.Lease{ID: *id, Until: now.Add(time.Minute)}, Now: now}); err != nil || d.Wait != 0 {
			t.Fatalf("reserve: %v %v", d.Wait, err)
		}
	}
}

// settle settles lease id on sl with reading r (nil: a release).
func settle(t *testing.T, st *quotastate.State, sl transport.Slot, id uint64, r *headers.Reading) {
	t.Helper()
	if err := st.Settle(t.Context(), &transport.SettleParams{Slot: sl, Lease: id, Now: time.Now(), Answer: quota.Answer{Reading: r, Counted: r != nil}}); err != nil {
		t.Fatal(err)
	}
}
