package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/internal/core"
)

// Blobs: the bounded table behind the conditional-request cache.

func wantBlob(t *testing.T, s store.Store, key, value string) {
	t.Helper()
	got, ok, err := s.GetBlob(t.Context(), key)
	if err != nil || !ok || string(got) != value {
		t.Fatalf("GetBlob(%q) = %q, %v, %v; want %q, true, nil", key, got, ok, err, value)
	}
}

func wantNoBlob(t *testing.T, s store.Store, key string) {
	t.Helper()
	got, ok, err := s.GetBlob(t.Context(), key)
	if err != nil || ok || got != nil {
		t.Fatalf("GetBlob(%q) = %q, %v, %v; want nil, false, nil", key, got, ok, err)
	}
}

func mustPutBlob(t *testing.T, s store.Store, key, value string) {
	t.Helper()
	if err := s.PutBlob(t.Context(), key, []byte(value)); err != nil {
		t.Fatalf("PutBlob(%q): %v", key, err)
	}
}

func testBlobs(t *testing.T, b Backend) {
	s := b.open(t, store.Options{})
	ctx := t.Context()
	wantNoBlob(t, s, "body/1")
	mustPutBlob(t, s, "body/1", "hello")
	wantBlob(t, s, "body/1", "hello")
	mustPutBlob(t, s, "body/1", "replaced")
	wantBlob(t, s, "body/1", "replaced")
	mustPutBlob(t, s, "body/empty", "")
	got, ok, err := s.GetBlob(ctx, "body/empty")
	if err != nil || !ok || got == nil || len(got) != 0 {
		t.Fatalf("GetBlob of an empty blob = %q (nil: %v), %v, %v; want a non-nil empty slice", got, got == nil, ok, err)
	}
	if err := s.DeleteBlob(ctx, "body/1"); err != nil {
		t.Fatal(err)
	}
	wantNoBlob(t, s, "body/1")
	if err := s.DeleteBlob(ctx, "body/1"); err != nil {
		t.Fatalf("DeleteBlob of an absent blob: %v", err)
	}
	// Blobs and records are separate namespaces.
	mustPutBlob(t, s, "same", "blob")
	wantAbsent(t, s, "same")
}

func testBlobEviction(t *testing.T, b Backend) {
	// Every blob below is 2-byte key + 38-byte value = 40 bytes. Each use
	// reads the clock once, which then moves past the granularity at which
	// the SQL stores record uses: the order is the exact LRU order.
	clk := newStepClock(store.BlobUseGranularity + time.Second)
	s := b.open(t, store.Options{BlobLimit: 100, Now: clk.Now})
	v := func(c byte) string { return strings.Repeat(string(c), 38) }
	mustPutBlob(t, s, "k1", v('1'))
	mustPutBlob(t, s, "k2", v('2'))
	wantBlob(t, s, "k1", v('1')) // k1 is now more recently used than k2
	mustPutBlob(t, s, "k3", v('3'))
	// 120 > 100: the least recently used (k2) went.
	wantNoBlob(t, s, "k2")
	wantBlob(t, s, "k1", v('1'))
	wantBlob(t, s, "k3", v('3'))

	// Replacing a blob counts only its new size: 40 + 10, then 90 fits.
	mustPutBlob(t, s, "k1", "12345678")
	mustPutBlob(t, s, "k4", v('4'))
	wantBlob(t, s, "k1", "12345678") // nothing went; LRU order now k1, k4, k3
	wantBlob(t, s, "k4", v('4'))
	wantBlob(t, s, "k3", v('3'))
	mustPutBlob(t, s, "k5", v('5')) // 130: k1 goes (120), then k4 (80)
	wantNoBlob(t, s, "k1")
	wantNoBlob(t, s, "k4")
	wantBlob(t, s, "k3", v('3'))
	wantBlob(t, s, "k5", v('5'))

	// Deleting frees its size; a total of exactly the limit is kept.
	if err := s.DeleteBlob(t.Context(), "k3"); err != nil {
		t.Fatal(err)
	}
	mustPutBlob(t, s, "k6", v('6'))
	mustPutBlob(t, s, "k7", strings.Repeat("7", 18)) // 40 + 40 + 20 = 100
	wantBlob(t, s, "k5", v('5'))
	wantBlob(t, s, "k6", v('6'))
	wantBlob(t, s, "k7", strings.Repeat("7", 18))
}

func testTouchBlob(t *testing.T, b Backend) {
	// As in testBlobEviction, each use is more than the granularity after
	// the one before.
	clk := newStepClock(store.BlobUseGranularity + time.Second)
	s := b.open(t, store.Options{BlobLimit: 100, Now: clk.Now})
	v := strings.Repeat("t", 38)
	mustPutBlob(t, s, "k1", v)
	mustPutBlob(t, s, "k2", v)
	for _, key := range []string{"k1", "absent"} {
		if err := s.TouchBlob(t.Context(), key); err != nil {
			t.Fatalf("TouchBlob(%q): %v", key, err)
		}
	}
	mustPutBlob(t, s, "k3", v)
	wantNoBlob(t, s, "k2") // k1 was used after it
	wantBlob(t, s, "k1", v)
	wantBlob(t, s, "k3", v)
}

func testBlobTooLarge(t *testing.T, b Backend) {
	s := b.open(t, store.Options{BlobLimit: 50})
	mustPutBlob(t, s, "other", "kept")
	mustPutBlob(t, s, "big", "small for now")
	err := s.PutBlob(t.Context(), "big", bytes.Repeat([]byte("x"), 48)) // 3 + 48 > 50
	if !errors.Is(err, store.ErrBlobTooLarge) || !strings.Contains(err.Error(), "51 bytes") || !strings.Contains(err.Error(), "50 bytes") {
		t.Fatalf("PutBlob of 51 bytes with a 50-byte limit = %v; want ErrBlobTooLarge naming both sizes", err)
	}
	wantNoBlob(t, s, "big") // the stale older blob is gone
	wantBlob(t, s, "other", "kept")
	mustPutBlob(t, s, "big", strings.Repeat("x", 40)) // 43 fits, but not beside "other" (9)
	wantNoBlob(t, s, "other")
	wantBlob(t, s, "big", strings.Repeat("x", 40))
}

func testConcurrentBlobPuts(t *testing.T, b Backend) {
	// 40 blobs of 40 bytes each into room for 400 bytes, by 4 goroutines
	// on each store handle of one database (two for a shared one, as two
	// processes would be).
	opts := store.Options{BlobLimit: 400, Now: newClock().Now}
	stores := []store.Store{b.open(t, opts)}
	var dsn string
	if b.shared() {
		dsn = b.NewDSN(t)
		stores = []store.Store{openDSN(t, dsn, opts), openDSN(t, dsn, opts)}
	}
	const each = 5
	writers := 4 * len(stores)
	var eg errgroup.Group
	for g := range writers {
		s := stores[g%len(stores)]
		eg.Go(func() error {
			for i := range each {
				if err := s.PutBlob(t.Context(), fmt.Sprintf("b%d/%d", g, i), bytes.Repeat([]byte{'x'}, 36)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		t.Fatal(err)
	}
	// Once the writers are done the limit holds. A writer that lost the
	// race for a victim stops, so rarely more than the excess goes: at
	// most one blob per other concurrent writer.
	present := 0
	for g := range writers {
		for i := range each {
			present += countBlob(t, stores[0], fmt.Sprintf("b%d/%d", g, i))
		}
	}
	if present > 10 || present < 10-(writers-1) {
		t.Fatalf("%d blobs of 40 bytes survived %d concurrent writers under a 400-byte limit; want 10 (at least %d)", present, writers, 10-(writers-1))
	}
	// The total is still exact: 10 new blobs, one at a time, leave exactly
	// them.
	for i := range 10 {
		mustPutBlob(t, stores[i%len(stores)], fmt.Sprintf("after/%d", i), strings.Repeat("y", 33))
	}
	present, after := 0, 0
	for g := range writers {
		for i := range each {
			present += countBlob(t, stores[0], fmt.Sprintf("b%d/%d", g, i))
		}
	}
	for i := range 10 {
		after += countBlob(t, stores[1%len(stores)], fmt.Sprintf("after/%d", i))
	}
	if present != 0 || after != 10 {
		t.Fatalf("after 10 more puts of 40 bytes, %d older blobs and %d of the 10 new ones are there; want 0 and 10", present, after)
	}
	if b.shared() && b.Query != nil {
		wantBlobUsage(t, b, dsn, 400)
	}
}

// wantBlobUsage checks the usage shards of the database at dsn against
// the blobs there, whose sizes sum to total.
func wantBlobUsage(t *testing.T, b Backend, dsn string, total int64) {
	t.Helper()
	shards := b.Query(t, dsn, "SELECT count(*) FROM ratekeeper_blob_usage")
	sizes := b.Query(t, dsn, "SELECT coalesce(sum(size), 0) FROM ratekeeper_blobs")
	usage := b.Query(t, dsn, "SELECT coalesce(sum(total), 0) FROM ratekeeper_blob_usage")
	wrong := b.Query(t, dsn, `SELECT count(*) FROM ratekeeper_blob_usage u
WHERE total <> (SELECT coalesce(sum(size), 0) FROM ratekeeper_blobs b WHERE b.shard = u.shard)`)
	if shards != core.BlobShards || sizes != total || usage != total || wrong != 0 {
		t.Fatalf("%d usage shards sum to %d and the blobs' sizes to %d, %d shards miscounted; want %d shards, both %d, none miscounted",
			shards, usage, sizes, wrong, core.BlobShards, total)
	}
}

// countBlob is 1 if key has a blob, else 0.
func countBlob(t *testing.T, s store.Store, key string) int {
	t.Helper()
	_, ok, err := s.GetBlob(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		return 1
	}
	return 0
}

// A SQL store records a hit only when the recorded use is older than the
// granularity: a hit within it is a read alone, and later ones count.
func testBlobHitsWithinGranularity(t *testing.T, b Backend) {
	clk := newStepClock(0)
	s := b.open(t, store.Options{BlobLimit: 100, Now: clk.Now})
	v := strings.Repeat("v", 38) // 40-byte blobs: two fit
	mustPutBlob(t, s, "k1", v)
	clk.Add(time.Second)
	mustPutBlob(t, s, "k2", v)
	clk.Add(store.BlobUseGranularity - 2*time.Second) // k1's use is as old as the granularity
	for range 10 {
		wantBlob(t, s, "k1", v)
	}
	clk.Add(time.Second)
	mustPutBlob(t, s, "k3", v)
	wantNoBlob(t, s, "k1") // the hits within the granularity recorded nothing
	wantBlob(t, s, "k2", v)

	clk.Add(store.BlobUseGranularity + time.Second)
	wantBlob(t, s, "k2", v) // stale: recorded
	clk.Add(time.Second)
	mustPutBlob(t, s, "k4", v)
	wantNoBlob(t, s, "k3")
	wantBlob(t, s, "k2", v)
	wantBlob(t, s, "k4", v)
}

// A database at schema version 2 (one usage row, a counter for LRU clock)
// keeps its blobs, their total and their order.
func testBlobsMigrateFromVersion2(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	old, err := b.OpenAtVersion(t.Context(), dsn, store.Options{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	old.Close()
	value := func(i int) string { return strings.Repeat(strconv.Itoa(i), 35) }
	for i := 1; i <= 3; i++ { // 5-byte keys, 35-byte values: 40 bytes each
		key := "old/" + strconv.Itoa(i)
		b.Exec(t, dsn, fmt.Sprintf("INSERT INTO ratekeeper_blobs (key, value, size, last_used, checksum) VALUES ('%s', %s, 40, %d, %d)",
			key, bytesLiteral(dsn, value(i)), i, core.Checksum(key, []byte(value(i)))))
	}
	b.Exec(t, dsn, "UPDATE ratekeeper_blob_usage SET total = 120")

	s := openDSN(t, dsn, store.Options{BlobLimit: 160, Now: newClock().Now})
	wantBlob(t, s, "old/3", value(3)) // now the most recent
	mustPutBlob(t, s, "new/1", strings.Repeat("n", 35))
	mustPutBlob(t, s, "new/2", strings.Repeat("n", 35)) // 200 > 160: one goes
	wantNoBlob(t, s, "old/1")
	wantBlob(t, s, "old/2", value(2))
	wantBlob(t, s, "old/3", value(3))
	mustPutBlob(t, s, "old/2", "shorter") // moves to its own shard, 12 bytes
	if b.Query != nil {
		wantBlobUsage(t, b, dsn, 132)
	}
}

// bytesLiteral is SQL for the bytes of v in dsn's database.
func bytesLiteral(dsn, v string) string {
	if store.KindOf(dsn) == store.Postgres {
		return fmt.Sprintf("decode('%x', 'hex')", v)
	}
	return fmt.Sprintf("X'%x'", v)
}

// putBlobs puts n blobs of blobSize bytes under prefix + "/0", "/1", …
func putBlobs(ctx context.Context, s store.Store, prefix string, n int) error {
	for i := range n {
		key := fmt.Sprintf("%s/%d", prefix, i)
		if err := s.PutBlob(ctx, key, bytes.Repeat([]byte{'x'}, blobSize-len(key))); err != nil {
			return err
		}
	}
	return nil
}

// blobSize is the size of every blob putBlobs writes.
const blobSize = 40

// Processes writing one blob table at once: the limit holds once they are
// done, and the total is exact.
func testProcessesPutBlobs(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	const limit, workers, each = 10 * blobSize, 3, 200
	s := openDSN(t, dsn, store.Options{BlobLimit: limit})
	t.Setenv(envLimit, strconv.Itoa(limit))
	var cmds []*exec.Cmd
	var stderrs []*bytes.Buffer
	for w := range workers {
		cmd, stderr, stdout := startWorker(t, "put-blobs", dsn, fmt.Sprintf("w%d", w), each)
		go stdout.WriteTo(io.Discard) // drain, so Wait can finish
		cmds, stderrs = append(cmds, cmd), append(stderrs, stderr)
	}
	if err := putBlobs(t.Context(), s, "parent", each); err != nil {
		t.Fatal(err)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v\n%s", i, err, stderrs[i])
		}
	}
	present := 0
	for _, prefix := range []string{"w0", "w1", "w2", "parent"} {
		for i := range each {
			present += countBlob(t, s, fmt.Sprintf("%s/%d", prefix, i))
		}
	}
	writers := workers + 1
	if present > 10 || present < 10-(writers-1) {
		t.Fatalf("%d blobs of %d bytes survived %d writing processes under a %d-byte limit; want 10 (at least %d)", present, blobSize, writers, limit, 10-(writers-1))
	}
	if b.Query != nil {
		wantBlobUsage(t, b, dsn, int64(present*blobSize))
	}
}

// HitsWriteNothing checks, on a store s whose Options.Now returns *now,
// that 100 hits within store.BlobUseGranularity of a blob's write change
// nothing in the database — changes reads a counter that moves with every
// write the database sees (SQLite's data_version, a PostgreSQL row's
// xmin), named what — and that a hit past the granularity does record the
// use (so the counter is seen to move).
func HitsWriteNothing(t *testing.T, s store.Blobs, now *time.Time, what string, changes func() int64) {
	t.Helper()
	if err := s.PutBlob(t.Context(), "body", []byte("cached")); err != nil {
		t.Fatal(err)
	}
	hit := func() {
		if _, ok, err := s.GetBlob(t.Context(), "body"); err != nil || !ok {
			t.Fatalf("GetBlob = %v, %v; want a hit", ok, err)
		}
	}
	before := changes()
	for range 100 {
		hit()
	}
	if c := changes(); c != before {
		t.Fatalf("100 hits within %v of the blob's write changed %s from %d to %d; want no write", store.BlobUseGranularity, what, before, c)
	}
	*now = now.Add(store.BlobUseGranularity + time.Second)
	hit()
	if c := changes(); c == before {
		t.Fatalf("a hit past the granularity left %s at %d; it must record the use (and this test sees writes)", what, c)
	}
}
