package quotastate_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/transport"
)

// TestSettleWakesOtherProcesses: a settle written by one process (its own
// store and State) wakes the waiters of another listening on the same
// database, through PostgreSQL's NOTIFY or SQLite's data_version — the
// waiters of each transport sharing that State.
func TestSettleWakesOtherProcesses(t *testing.T) {
	backends := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "wake.db") },
		"postgres": func(t *testing.T) string { return storetest.NewPostgresSchema(t, storetest.PostgresBase(t)) },
	}
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
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
			sl := transport.Slot{Owner: transport.OwnerID{Provider: "p", Owner: "o"}, Bucket: transport.BucketID{Provider: "p", Owner: "o", Resource: "core"}}
			// Settles until one wakes b: PostgreSQL's LISTEN may still be
			// connecting when the first is sent.
			deadline := time.After(10 * time.Second)
			for id := uint64(1); ; id++ {
				now := time.Now()
				if _, w, err := a.Reserve(t.Context(), &transport.ReserveParams{Slots: []transport.Slot{sl}, Ask: quota.Ask{Policy: quota.Policy{Kind: quota.Greedy}},
					Lease: quota.Lease{ID: id, Until: now.Add(time.Minute)}, Now: now}); err != nil || w != 0 {
					t.Fatalf("reserve: %v %v", w, err)
				}
				if err := a.Settle(t.Context(), &transport.SettleParams{Slot: sl, Lease: id, Now: now}); err != nil {
					t.Fatal(err)
				}
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
