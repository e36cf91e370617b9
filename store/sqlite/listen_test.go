package sqlite_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/sqlite"
)

// Listeners of several States on one Store each hold a connection while
// someone waits. They must not take the connections reads need: with more
// listeners than readers, a read waited until a listener let go, and the
// fleet simulation's processes decided on rows that lacked answers others
// had received long before (seed 3 on SQLite).
func TestListenersLeaveReadsTheirConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ratekeeper.db"), store.Options{Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.Update(ctx, "k", func(r *store.Record) error { r.Value = []byte("v"); return nil }); err != nil {
			t.Fatal(err)
		}
		const listeners = 8 // more than the Store's readers
		var stopped sync.WaitGroup
		for range listeners {
			stopped.Add(1)
			go func() {
				defer stopped.Done()
				st.Listen(ctx, "quota", func(string) {}, func() bool { return true })
			}()
		}
		// Every listener that can holds its connection now.
		time.Sleep(2 * sqlite.DataVersionPoll)
		synctest.Wait()
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		if _, err := st.Get(rctx, "k"); err != nil {
			t.Fatalf("a read beside %d listeners: %v", listeners, err)
		}
		recs, err := st.GetMany(rctx, []string{"k"})
		if err != nil || len(recs) != 1 {
			t.Fatalf("GetMany beside %d listeners: %v %v", listeners, recs, err)
		}
		cancel()
		stopped.Wait()
	})
}
