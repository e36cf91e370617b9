package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/ratekeeper/ratekeeper/store"
)

// incrementAll adds one to every counter of an UpdateMany.
func incrementAll(recs []*store.Record) error {
	for _, r := range recs {
		if err := increment(r); err != nil {
			return err
		}
	}
	return nil
}

func mustUpdateMany(t *testing.T, s store.Store, keys []string, fn func([]*store.Record) error) {
	t.Helper()
	if err := s.UpdateMany(t.Context(), keys, fn); err != nil {
		t.Fatalf("UpdateMany(%q): %v", keys, err)
	}
}

func testUpdateMany(t *testing.T, b Backend) {
	s := b.open(t, store.Options{})
	mustUpdate(t, s, "many/a", set("1"))
	mustUpdate(t, s, "many/b", set("2"))

	// fn sees every record in the order of the keys, absent ones too.
	mustUpdateMany(t, s, []string{"many/b", "many/c", "many/a"}, func(recs []*store.Record) error {
		if string(recs[0].Value) != "2" || recs[1].Value != nil || recs[1].Version != 0 || string(recs[2].Value) != "1" {
			return fmt.Errorf("fn saw %q %q %q", recs[0].Value, recs[1].Value, recs[2].Value)
		}
		recs[0].Value, recs[2].Value = recs[2].Value, recs[0].Value // swap a and b
		recs[1].Value = []byte("3")
		return nil
	})
	wantRecord(t, s, "many/a", "2", 2)
	wantRecord(t, s, "many/b", "1", 2)
	wantRecord(t, s, "many/c", "3", 1)

	// What fn leaves as it was is not written.
	mustUpdateMany(t, s, []string{"many/a", "many/b"}, func(recs []*store.Record) error {
		recs[1].Value = []byte("9")
		return nil
	})
	wantRecord(t, s, "many/a", "2", 2)
	wantRecord(t, s, "many/b", "9", 3)
	mustUpdateMany(t, s, []string{"many/a", "many/b"}, func([]*store.Record) error { return nil })
	wantRecord(t, s, "many/a", "2", 2)

	// fn's error writes nothing at all.
	boom := errors.New("boom")
	err := s.UpdateMany(t.Context(), []string{"many/a", "many/d"}, func(recs []*store.Record) error {
		recs[0].Value, recs[1].Value = []byte("x"), []byte("y")
		return boom
	})
	if err != boom {
		t.Fatalf("UpdateMany returned %v; want fn's error unchanged", err)
	}
	wantRecord(t, s, "many/a", "2", 2)
	wantAbsent(t, s, "many/d")

	// A nil value deletes; deleting what is absent is nothing.
	mustUpdateMany(t, s, []string{"many/c", "many/e"}, func(recs []*store.Record) error {
		recs[0].Value, recs[1].Value = nil, nil
		return nil
	})
	wantAbsent(t, s, "many/c")
	wantAbsent(t, s, "many/e")

	for _, keys := range [][]string{nil, {"many/a", "many/a"}, {"many/a", ""}} {
		if err := s.UpdateMany(t.Context(), keys, incrementAll); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("UpdateMany(%q) = %v; want ErrInvalidKey", keys, err)
		}
	}
	wantRecord(t, s, "many/a", "2", 2)

	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.UpdateMany(canceled, []string{"many/a"}, incrementAll); !errors.Is(err, context.Canceled) {
		t.Fatalf("UpdateMany with a canceled context = %v; want context.Canceled", err)
	}
	wantRecord(t, s, "many/a", "2", 2)
}

// testConcurrentUpdateMany runs goroutines that each increment pairs of
// counters, taking the keys in both orders and creating new keys in a race:
// no update is lost and none deadlocks.
func testConcurrentUpdateMany(t *testing.T, b Backend) {
	s := b.open(t, store.Options{})
	const goroutines, each = 8, 20
	var g errgroup.Group
	for i := range goroutines {
		g.Go(func() error {
			for j := range each {
				keys := []string{"pair/x", "pair/y", "fresh/" + strconv.Itoa(j)}
				if (i+j)%2 == 1 {
					keys[0], keys[1] = keys[1], keys[0]
				}
				if err := s.UpdateMany(t.Context(), keys, incrementAll); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	n := strconv.Itoa(goroutines * each)
	wantRecord(t, s, "pair/x", n, goroutines*each)
	wantRecord(t, s, "pair/y", n, goroutines*each)
	for j := range each {
		wantRecord(t, s, "fresh/"+strconv.Itoa(j), strconv.Itoa(goroutines), goroutines)
	}
}

// testProcessesUpdateMany: worker processes and this one increment two
// counters together through UpdateMany, in opposite key orders.
func testProcessesUpdateMany(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	s := openDSN(t, dsn, store.Options{})
	const workers, each = 3, 30
	type worker struct {
		wait   func() error
		stderr fmt.Stringer
	}
	var ws []worker
	for range workers {
		cmd, stderr, stdout := startWorker(t, "increment-many", dsn, "multi/b,multi/a", each)
		ws = append(ws, worker{func() error { stdout.WriteTo(discard{}); return cmd.Wait() }, stderr})
	}
	for range each {
		mustUpdateMany(t, s, []string{"multi/a", "multi/b"}, incrementAll)
	}
	for i, w := range ws {
		if err := w.wait(); err != nil {
			t.Fatalf("worker %d: %v\n%s", i, err, w.stderr)
		}
	}
	total := (workers + 1) * each
	wantRecord(t, s, "multi/a", strconv.Itoa(total), int64(total))
	wantRecord(t, s, "multi/b", strconv.Itoa(total), int64(total))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// testGetMany: a store that reads snapshots (store.Snapshot) returns every
// key's record in the order asked, absent ones with a nil Value.
func testGetMany(t *testing.T, b Backend) {
	s := b.open(t, store.Options{})
	sn, ok := s.(store.Snapshot)
	if !ok {
		t.Fatalf("%T does not implement store.Snapshot", s)
	}
	mustUpdate(t, s, "snap/a", set("1"))
	mustUpdate(t, s, "snap/b", set("2"))
	mustUpdate(t, s, "snap/b", set("3"))
	recs, err := sn.GetMany(t.Context(), []string{"snap/b", "snap/none", "snap/a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || string(recs[0].Value) != "3" || recs[0].Version != 2 || recs[1].Value != nil ||
		recs[1].Version != 0 || recs[1].Key != "snap/none" || string(recs[2].Value) != "1" || recs[2].Version != 1 {
		t.Fatalf("GetMany = %+v", recs)
	}
	if _, err := sn.GetMany(t.Context(), []string{"snap/a", "snap/a"}); !errors.Is(err, store.ErrInvalidKey) {
		t.Fatalf("repeated key: %v, want ErrInvalidKey", err)
	}
}
