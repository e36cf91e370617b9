package quotastate_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/transport"
)

// lockCountingStore counts the locking transactions a State opens.
type lockCountingStore struct {
	store.Store
	locks int
}

func (c *lockCountingStore) UpdateMany(ctx context.Context, keys []string, fn func([]*store.Record) error) error {
	c.locks++
	return c.Store.UpdateMany(ctx, keys, fn)
}

// A request that already waited and still has to wait opens no write
// transaction: on SQLite it would hold every process's one write lock.
func TestWaitingRequestTakesNoLock(t *testing.T) {
	cs := &lockCountingStore{Store: openSQLite(t)}
	st := quotastate.New(cs, nil)
	defer st.Close(context.Background())
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	sl := transport.Slot{Owner: transport.OwnerID{Provider: "p", Owner: "a"}, Bucket: transport.BucketID{Provider: "p", Owner: "a", Resource: "core"}}
	// A spent bucket: remaining 0 until the reset, in ten minutes.
	if err := st.Settle(context.Background(), &transport.SettleParams{Slot: sl, Now: now, Answer: quota.Answer{
		Reading: &headers.Reading{Status: 200, Limit: 5000, Remaining: 0, Used: 5000, Reset: now.Add(10 * time.Minute)}, Counted: true}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := cs.locks
	for i := range 5 {
		p := &transport.ReserveParams{Slots: []transport.Slot{sl}, Ask: quota.Ask{Policy: quota.Policy{Kind: quota.Greedy}},
			Lease: quota.Lease{ID: uint64(i + 1), Until: now.Add(time.Minute)}, Now: now, Waited: true}
		if d, err := st.Reserve(context.Background(), p); err != nil || d.Wait < 9*time.Minute {
			t.Fatalf("reserve %d: wait %v, %v; want until the reset", i, d.Wait, err)
		}
	}
	if cs.locks != before {
		t.Fatalf("%d locking transactions for requests that only waited, want 0", cs.locks-before)
	}
}
