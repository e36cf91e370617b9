package quotastate_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/transport"
)

// keysStore records the keys of every locking transaction, and runs
// before (once) ahead of the next one: another process writing between a
// snapshot and its lock.
type keysStore struct {
	store.Store
	locked [][]string
	before func()
	reads  int // snapshot reads
}

func (k *keysStore) GetMany(ctx context.Context, keys []string) ([]store.Record, error) {
	k.reads++
	return k.Store.(store.Snapshot).GetMany(ctx, keys)
}

func (k *keysStore) UpdateMany(ctx context.Context, keys []string, fn func([]*store.Record) error) error {
	if f := k.before; f != nil {
		k.before = nil
		f()
	}
	k.locked = append(k.locked, slices.Clone(keys))
	return k.Store.UpdateMany(ctx, keys, fn)
}

func pool(n int) []transport.Slot {
	slots := make([]transport.Slot, n)
	for i := range slots {
		o := fmt.Sprintf("owner%02d", i)
		slots[i] = transport.Slot{Owner: transport.OwnerID{Provider: "p", Owner: o}, Bucket: transport.BucketID{Provider: "p", Owner: o, Resource: "core"}}
	}
	return slots
}

func spend(t *testing.T, st *quotastate.State, sl transport.Slot, remaining int64, now time.Time) {
	t.Helper()
	if err := st.Settle(t.Context(), &transport.SettleParams{Slot: sl, Now: now, Answer: quota.Answer{Counted: true,
		Reading: &headers.Reading{Status: 200, Limit: 5000, Remaining: remaining, Used: 5000 - remaining, Reset: now.Add(time.Hour)}}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A reservation among 30 credentials locks the two rows it chose (owner
// and bucket), not the 60 of the pool; when another process spends the
// chosen bucket between the snapshot and the lock, it chooses again and
// takes the next credential, never the spent one.
func TestReserveLocksOnlyTheChosenSlot(t *testing.T) {
	ks, st, other, slots, now := twoProcesses(t, 30)

	reserve := func(id uint64) (int, time.Duration) {
		t.Helper()
		ks.locked = nil
		return reserveGreedy(t, st, slots, id, now)
	}
	if i, w := reserve(1); i != 0 || w != 0 {
		t.Fatalf("first reservation: slot %d, wait %v", i, w)
	}
	if len(ks.locked) != 1 || len(ks.locked[0]) != 2 {
		t.Fatalf("locked %v, want one transaction over the chosen owner and bucket", ks.locked)
	}

	// Slot 1 is next; another process spends it after the snapshot.
	ks.before = func() {
		d, err := other.Reserve(t.Context(), &transport.ReserveParams{Slots: slots[1:2], Ask: quota.Ask{Policy: quota.Policy{Kind: quota.Greedy}},
			Lease: quota.Lease{ID: 99, Until: now.Add(time.Minute)}, Now: now})
		if err != nil || d.Wait != 0 {
			t.Errorf("the other process could not reserve: %v %v", d.Wait, err)
		}
	}
	races := st.Races()
	if i, w := reserve(2); i != 2 || w != 0 {
		t.Fatalf("after a lost race: slot %d, wait %v; want slot 2 at once", i, w)
	}
	if st.Races() != races+1 {
		t.Fatalf("races %d → %d, want one more", races, st.Races())
	}
	b, err := st.Buckets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i, sl := range slots[:3] {
		if n := len(b[sl.Bucket].Leases); n != 1 {
			t.Fatalf("slot %d holds %d leases, want 1 (no bucket of one request is spent twice)", i, n)
		}
	}
}

// A reservation chooses on what its process last saw of the rows, when it
// saw them moments ago, and reads no snapshot; the choice is decided again
// under the lock. When what it saw says wait, it reads: another process
// may have freed quota since.
func TestReserveChoosesOnWhatItLastSaw(t *testing.T) {
	ks, st, other, slots, now := twoProcesses(t, 2)
	reserve := func(id uint64) (int, time.Duration) {
		t.Helper()
		return reserveGreedy(t, st, slots, id, now)
	}
	if i, w := reserve(1); i != 0 || w != 0 || ks.reads != 1 {
		t.Fatalf("first reservation: slot %d, wait %v, %d snapshot reads; want slot 0 at once after one read", i, w, ks.reads)
	}
	if i, w := reserve(2); i != 1 || w != 0 || ks.reads != 1 {
		t.Fatalf("second reservation: slot %d, wait %v, %d snapshot reads; want slot 1 on what it saw, no read", i, w, ks.reads)
	}
	// Both are spent as this process saw them; another process's answer
	// to request 1 refills slot 0.
	if err := other.Settle(t.Context(), &transport.SettleParams{Slot: slots[0], Lease: 1, Now: now, Answer: quota.Answer{Counted: true,
		Reading: &headers.Reading{Status: 200, Limit: 5000, Remaining: 5, Used: 4995, Reset: now.Add(time.Hour)}}}); err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if i, w := reserve(3); i != 0 || w != 0 || ks.reads != 2 {
		t.Fatalf("after another process freed slot 0: slot %d, wait %v, %d snapshot reads; want slot 0 at once after a read", i, w, ks.reads)
	}
}

// reserveGreedy reserves lease id among slots under the greedy policy.
func reserveGreedy(t *testing.T, st *quotastate.State, slots []transport.Slot, id uint64, now time.Time) (int, time.Duration) {
	t.Helper()
	d, err := st.Reserve(t.Context(), &transport.ReserveParams{Slots: slots, Ask: quota.Ask{Policy: quota.Policy{Kind: quota.Greedy}},
		Lease: quota.Lease{ID: id, Until: now.Add(time.Minute)}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return d.Index, d.Wait
}

// twoProcesses opens two States on one SQLite database (two processes),
// the first through a keysStore, with n slots of one request left each.
func twoProcesses(t *testing.T, n int) (ks *keysStore, st, other *quotastate.State, slots []transport.Slot, now time.Time) {
	t.Helper()
	ks = &keysStore{Store: openSQLite(t)}
	st = quotastate.New(ks, nil)
	t.Cleanup(func() { st.Close(context.Background()) })
	now = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	slots = pool(n)
	// Spent by a process that is gone: st has seen none of it.
	first := quotastate.New(ks.Store, nil)
	for _, sl := range slots {
		spend(t, first, sl, 1, now)
	}
	if err := first.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	other = quotastate.New(ks.Store, nil)
	t.Cleanup(func() { other.Close(context.Background()) })
	return ks, st, other, slots, now
}
