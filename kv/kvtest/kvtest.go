// Package kvtest is the one test suite every kv.Store implementation
// must pass. A store's tests call Run with a Backend that opens fresh stores;
// stores shared between processes also give the suite a way to name and
// reach their databases, which enables the multi-process, crash, migration
// and corruption tests.
//
// The multi-process tests re-execute the test binary as worker processes, so
// the package running the suite must route its TestMain through Main:
//
//	func TestMain(m *testing.M) { kvtest.Main(m) }
//
// Layer 2 of docs/architecture.md: it owns the one suite every kv.Store
// passes.
package kvtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ratekeeper/ratekeeper/kv"
)

// Backend describes the implementation under test.
type Backend struct {
	// Open returns a new store over a fresh, empty database, configured
	// with opts; the suite closes it. When nil, the suite opens NewDSN's
	// database with kv.Open.
	Open func(t *testing.T, opts kv.Options) kv.Store

	// The fields below are for stores shared between processes. Leave
	// them nil for a store that lives in one process; set all three to
	// run the shared-database tests.

	// NewDSN returns the DSN (as kv.Open takes it) of a fresh, empty
	// database that lives until the test ends.
	NewDSN func(t testing.TB) string
	// Exec runs one SQL statement on the database at dsn, bypassing the
	// store, to damage rows and forge schema versions. The suite uses
	// only SQL that SQLite and PostgreSQL both accept.
	Exec func(t *testing.T, dsn, query string)
	// OpenAtVersion opens the database at dsn after creating or migrating
	// its schema only up to version (older than kv.SchemaVersion).
	OpenAtVersion func(ctx context.Context, dsn string, opts kv.Options, version int) (kv.Store, error)
}

func (b Backend) shared() bool { return b.NewDSN != nil && b.Exec != nil && b.OpenAtVersion != nil }

// open returns a new store for one test and closes it when the test ends.
func (b Backend) open(t *testing.T, opts kv.Options) kv.Store {
	t.Helper()
	if b.Open != nil {
		s := b.Open(t, opts)
		t.Cleanup(func() { s.Close() })
		return s
	}
	return openDSN(t, b.NewDSN(t), opts)
}

func openDSN(t *testing.T, dsn string, opts kv.Options) kv.Store {
	t.Helper()
	s, err := kv.Open(t.Context(), dsn, opts)
	if err != nil {
		t.Fatalf("kv.Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Run runs the suite against b. Without b's shared-database fields it runs
// only the tests that hold for every store.
func Run(t *testing.T, b Backend) {
	if b.Open == nil && b.NewDSN == nil {
		t.Fatal("kvtest: Backend needs Open or NewDSN")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Backend)
	}{
		{"CreateReadUpdateDelete", testCRUD},
		{"EmptyValueIsPresent", testEmptyValue},
		{"ValuesAreCopied", testValuesAreCopied},
		{"FnErrorWritesNothing", testFnError},
		{"OnlyValueIsWritten", testOnlyValueIsWritten},
		{"ListByPrefix", testList},
		{"InvalidKeys", testInvalidKeys},
		{"CanceledContext", testCanceledContext},
		{"ConcurrentIncrements", testConcurrentIncrements},
		{"UpdateMany", testUpdateMany},
		{"ConcurrentUpdateMany", testConcurrentUpdateMany},
		{"Blobs", testBlobs},
		{"BlobEvictionLRU", testBlobEviction},
		{"BlobTooLarge", testBlobTooLarge},
		{"ConcurrentBlobPuts", testConcurrentBlobPuts},
		{"Close", testClose},
	}
	if b.shared() {
		tests = append(tests, []struct {
			name string
			fn   func(*testing.T, Backend)
		}{
			{"SurvivesReopen", testReopen},
			{"StoresSharingOneDatabase", testSharedDatabase},
			{"ConcurrentOpenMigratesOnce", testConcurrentOpen},
			{"MigratesOlderSchema", testMigration},
			{"RefusesNewerSchema", testNewerSchema},
			{"RefusesDamagedSchemaVersion", testDamagedSchemaVersion},
			{"CorruptedRecordIsAbsent", testCorruptedRecord},
			{"CorruptedBlobIsAbsent", testCorruptedBlob},
			{"ProcessesIncrementOneCounter", testProcesses},
			{"ProcessesUpdateManyKeys", testProcessesUpdateMany},
			{"ProcessKilledInsideUpdate", testKilledInsideUpdate},
		}...)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}

// clock is an injected clock that moves one second per reading, so every
// write gets a distinct, predictable time.
type clock struct {
	mu   sync.Mutex
	last time.Time
}

func newClock() *clock { return &clock{last: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = c.last.Add(time.Second)
	return c.last
}

func (c *clock) Last() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func set(value string) func(*kv.Record) error {
	return func(rec *kv.Record) error { rec.Value = []byte(value); return nil }
}

func del(rec *kv.Record) error { rec.Value = nil; return nil }

// increment adds one to a decimal counter (absent counts as 0).
func increment(rec *kv.Record) error {
	n := 0
	if rec.Value != nil {
		var err error
		if n, err = strconv.Atoi(string(rec.Value)); err != nil {
			return fmt.Errorf("counter %q holds %q: %w", rec.Key, rec.Value, err)
		}
	}
	rec.Value = strconv.AppendInt(nil, int64(n+1), 10)
	return nil
}

func mustUpdate(t *testing.T, s kv.Store, key string, fn func(*kv.Record) error) {
	t.Helper()
	if err := s.Update(t.Context(), key, fn); err != nil {
		t.Fatalf("Update(%q): %v", key, err)
	}
}

func mustGet(t *testing.T, s kv.Store, key string) kv.Record {
	t.Helper()
	rec, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return rec
}

func wantAbsent(t *testing.T, s kv.Store, key string) {
	t.Helper()
	rec, err := s.Get(t.Context(), key)
	if !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("Get(%q) = %+v, %v; want ErrNotFound", key, rec, err)
	}
}

func wantRecord(t *testing.T, s kv.Store, key, value string, version int64) kv.Record {
	t.Helper()
	rec := mustGet(t, s, key)
	if rec.Key != key || string(rec.Value) != value || rec.Version != version {
		t.Fatalf("Get(%q) = {Key:%q Value:%q Version:%d}; want {Key:%q Value:%q Version:%d}",
			key, rec.Key, rec.Value, rec.Version, key, value, version)
	}
	return rec
}

func testCRUD(t *testing.T, b Backend) {
	clk := newClock()
	s := b.open(t, kv.Options{Now: clk.Now})
	wantAbsent(t, s, "bucket/a")

	var seen kv.Record
	mustUpdate(t, s, "bucket/a", func(rec *kv.Record) error {
		seen = *rec
		rec.Value = []byte("one")
		return nil
	})
	if seen.Key != "bucket/a" || seen.Value != nil || seen.Version != 0 {
		t.Fatalf("fn saw %+v for an absent key; want Key set, nil Value, Version 0", seen)
	}
	rec := wantRecord(t, s, "bucket/a", "one", 1)
	if !rec.UpdatedAt.Equal(clk.Last()) {
		t.Fatalf("UpdatedAt = %v, want the clock's %v", rec.UpdatedAt, clk.Last())
	}

	mustUpdate(t, s, "bucket/a", func(rec *kv.Record) error {
		seen = *rec
		rec.Value = append(rec.Value, "+two"...)
		return nil
	})
	if string(seen.Value) != "one" || seen.Version != 1 {
		t.Fatalf("fn saw Value %q Version %d; want \"one\" 1", seen.Value, seen.Version)
	}
	rec = wantRecord(t, s, "bucket/a", "one+two", 2)
	if !rec.UpdatedAt.Equal(clk.Last()) {
		t.Fatalf("UpdatedAt = %v, want the clock's %v", rec.UpdatedAt, clk.Last())
	}

	mustUpdate(t, s, "bucket/a", del)
	wantAbsent(t, s, "bucket/a")
	mustUpdate(t, s, "bucket/a", del) // deleting an absent key is fine
	wantAbsent(t, s, "bucket/a")

	mustUpdate(t, s, "bucket/a", set("again"))
	wantRecord(t, s, "bucket/a", "again", 1)
}

func testEmptyValue(t *testing.T, b Backend) {
	s := b.open(t, kv.Options{})
	mustUpdate(t, s, "empty", set(""))
	rec := wantRecord(t, s, "empty", "", 1)
	if rec.Value == nil {
		t.Fatal("Get returned a nil Value for a key holding an empty value; want a non-nil empty slice")
	}
	mustUpdate(t, s, "empty", func(rec *kv.Record) error {
		if rec.Value == nil {
			return errors.New("fn got a nil Value for a present key holding an empty value")
		}
		return nil
	})
	wantRecord(t, s, "empty", "", 2)
}

func testValuesAreCopied(t *testing.T, b Backend) {
	s := b.open(t, kv.Options{})
	buf := []byte("original")
	mustUpdate(t, s, "k", func(rec *kv.Record) error { rec.Value = buf; return nil })
	buf[0] = 'X'
	rec := wantRecord(t, s, "k", "original", 1)
	rec.Value[0] = 'Y'
	wantRecord(t, s, "k", "original", 1)
	if err := s.Update(t.Context(), "k", func(rec *kv.Record) error {
		rec.Value[0] = 'Z' // then fail: the scribble must not be kept
		return errors.New("no")
	}); err == nil {
		t.Fatal("Update returned nil for a failing fn")
	}
	wantRecord(t, s, "k", "original", 1)
}

func testFnError(t *testing.T, b Backend) {
	s := b.open(t, kv.Options{})
	errNo := errors.New("fn refuses")
	err := s.Update(t.Context(), "absent", func(rec *kv.Record) error {
		rec.Value = []byte("should not be written")
		return errNo
	})
	if err != errNo {
		t.Fatalf("Update returned %v; want fn's error unchanged", err)
	}
	wantAbsent(t, s, "absent")

	mustUpdate(t, s, "present", set("v1"))
	err = s.Update(t.Context(), "present", func(rec *kv.Record) error {
		rec.Value = nil // would delete
		return errNo
	})
	if err != errNo {
		t.Fatalf("Update returned %v; want fn's error unchanged", err)
	}
	wantRecord(t, s, "present", "v1", 1)
}

func testOnlyValueIsWritten(t *testing.T, b Backend) {
	s := b.open(t, kv.Options{})
	mustUpdate(t, s, "k", func(rec *kv.Record) error {
		rec.Key, rec.Version, rec.UpdatedAt = "other", 99, time.Unix(1, 0)
		rec.Value = []byte("v")
		return nil
	})
	rec := wantRecord(t, s, "k", "v", 1)
	if rec.UpdatedAt.Equal(time.Unix(1, 0)) {
		t.Fatal("UpdatedAt was taken from fn's record; want the store's clock")
	}
	wantAbsent(t, s, "other")
}

func testList(t *testing.T, b Backend) {
	s := b.open(t, kv.Options{})
	keys := []string{"b", "a/2", "a/1", "ab", "a", "é/x", "a/\U0010FFFF", "a/\U0010FFFF/z", "a0", "\U0010FFFF"}
	for _, k := range keys {
		mustUpdate(t, s, k, set("v:"+k))
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a", "a/1", "a/2", "a/\U0010FFFF", "a/\U0010FFFF/z", "a0", "ab", "b", "é/x", "\U0010FFFF"}},
		{"a/", []string{"a/1", "a/2", "a/\U0010FFFF", "a/\U0010FFFF/z"}},
		{"a/\U0010FFFF", []string{"a/\U0010FFFF", "a/\U0010FFFF/z"}},
		{"a", []string{"a", "a/1", "a/2", "a/\U0010FFFF", "a/\U0010FFFF/z", "a0", "ab"}},
		{"é", []string{"é/x"}},
		{"\U0010FFFF", []string{"\U0010FFFF"}},
		{"zz", nil},
		{"a/1", []string{"a/1"}},
	} {
		recs, err := s.List(t.Context(), tc.prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", tc.prefix, err)
		}
		var got []string
		for _, rec := range recs {
			got = append(got, rec.Key)
			if string(rec.Value) != "v:"+rec.Key || rec.Version != 1 {
				t.Errorf("List(%q) returned %q = %q version %d; want %q version 1", tc.prefix, rec.Key, rec.Value, rec.Version, "v:"+rec.Key)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) keys = %q; want %q", tc.prefix, got, tc.want)
		}
	}
}

func testInvalidKeys(t *testing.T, b Backend) {
	s := b.open(t, kv.Options{})
	ctx := t.Context()
	for _, key := range []string{"", "bad\xffutf8", "nul\x00byte", strings.Repeat("k", kv.MaxKeyLen+1)} {
		calls := 0
		err := s.Update(ctx, key, func(*kv.Record) error { calls++; return nil })
		if !errors.Is(err, kv.ErrInvalidKey) || calls != 0 {
			t.Errorf("Update(%.20q) = %v after %d fn calls; want ErrInvalidKey and no call", key, err, calls)
		}
		if _, err := s.Get(ctx, key); !errors.Is(err, kv.ErrInvalidKey) {
			t.Errorf("Get(%.20q) = %v; want ErrInvalidKey", key, err)
		}
		if err := s.PutBlob(ctx, key, []byte("x")); !errors.Is(err, kv.ErrInvalidKey) {
			t.Errorf("PutBlob(%.20q) = %v; want ErrInvalidKey", key, err)
		}
		if _, _, err := s.GetBlob(ctx, key); !errors.Is(err, kv.ErrInvalidKey) {
			t.Errorf("GetBlob(%.20q) = %v; want ErrInvalidKey", key, err)
		}
		if key != "" {
			if _, err := s.List(ctx, key); !errors.Is(err, kv.ErrInvalidKey) {
				t.Errorf("List(%.20q) = %v; want ErrInvalidKey", key, err)
			}
		}
	}
	mustUpdate(t, s, strings.Repeat("k", kv.MaxKeyLen), set("longest key"))
}

func testCanceledContext(t *testing.T, b Backend) {
	s := b.open(t, kv.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := s.Update(ctx, "k", set("v"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Update with a canceled context = %v; want context.Canceled", err)
	}
	wantAbsent(t, s, "k")
}

func testConcurrentIncrements(t *testing.T, b Backend) {
	s := b.open(t, kv.Options{})
	const goroutines, each = 8, 25
	var g errgroup.Group
	for i := range goroutines {
		g.Go(func() error {
			own := fmt.Sprintf("own/%d", i)
			for range each {
				for _, key := range []string{"shared", own} {
					if err := s.Update(t.Context(), key, increment); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	wantRecord(t, s, "shared", strconv.Itoa(goroutines*each), goroutines*each)
	for i := range goroutines {
		wantRecord(t, s, fmt.Sprintf("own/%d", i), strconv.Itoa(each), each)
	}
}

func wantBlob(t *testing.T, s kv.Store, key, value string) {
	t.Helper()
	got, ok, err := s.GetBlob(t.Context(), key)
	if err != nil || !ok || string(got) != value {
		t.Fatalf("GetBlob(%q) = %q, %v, %v; want %q, true, nil", key, got, ok, err, value)
	}
}

func wantNoBlob(t *testing.T, s kv.Store, key string) {
	t.Helper()
	got, ok, err := s.GetBlob(t.Context(), key)
	if err != nil || ok || got != nil {
		t.Fatalf("GetBlob(%q) = %q, %v, %v; want nil, false, nil", key, got, ok, err)
	}
}

func mustPutBlob(t *testing.T, s kv.Store, key, value string) {
	t.Helper()
	if err := s.PutBlob(t.Context(), key, []byte(value)); err != nil {
		t.Fatalf("PutBlob(%q): %v", key, err)
	}
}

func testBlobs(t *testing.T, b Backend) {
	s := b.open(t, kv.Options{})
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
	// Every blob below is 2-byte key + 38-byte value = 40 bytes.
	s := b.open(t, kv.Options{BlobLimit: 100})
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

func testBlobTooLarge(t *testing.T, b Backend) {
	s := b.open(t, kv.Options{BlobLimit: 50})
	mustPutBlob(t, s, "other", "kept")
	mustPutBlob(t, s, "big", "small for now")
	err := s.PutBlob(t.Context(), "big", bytes.Repeat([]byte("x"), 48)) // 3 + 48 > 50
	if !errors.Is(err, kv.ErrBlobTooLarge) || !strings.Contains(err.Error(), "51 bytes") || !strings.Contains(err.Error(), "50 bytes") {
		t.Fatalf("PutBlob of 51 bytes with a 50-byte limit = %v; want ErrBlobTooLarge naming both sizes", err)
	}
	wantNoBlob(t, s, "big") // the stale older blob is gone
	wantBlob(t, s, "other", "kept")
	mustPutBlob(t, s, "big", strings.Repeat("x", 40)) // 43 fits, but not beside "other" (9)
	wantNoBlob(t, s, "other")
	wantBlob(t, s, "big", strings.Repeat("x", 40))
}

func testConcurrentBlobPuts(t *testing.T, b Backend) {
	// 40 blobs of 40 bytes each into room for 400 bytes: whatever the
	// interleaving, eviction keeps exactly the 10 most recent.
	s := b.open(t, kv.Options{BlobLimit: 400})
	const goroutines, each = 4, 10
	var eg errgroup.Group
	for g := range goroutines {
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
	present := 0
	for g := range goroutines {
		for i := range each {
			_, ok, err := s.GetBlob(t.Context(), fmt.Sprintf("b%d/%d", g, i))
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				present++
			}
		}
	}
	if present != 400/40 {
		t.Fatalf("%d blobs of 40 bytes survived under a 400-byte limit; want exactly 10", present)
	}
}

func testClose(t *testing.T, b Backend) {
	s := b.open(t, kv.Options{})
	mustUpdate(t, s, "k", set("v"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	checks := map[string]error{
		"Update":     s.Update(ctx, "k", set("w")),
		"PutBlob":    s.PutBlob(ctx, "k", nil),
		"DeleteBlob": s.DeleteBlob(ctx, "k"),
	}
	_, checks["Get"] = s.Get(ctx, "k")
	_, checks["List"] = s.List(ctx, "")
	_, _, checks["GetBlob"] = s.GetBlob(ctx, "k")
	for name, err := range checks {
		if !errors.Is(err, kv.ErrClosed) {
			t.Errorf("%s after Close = %v; want ErrClosed", name, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v; want nil", err)
	}
}

// --- Shared-database tests ---

func testReopen(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	s, err := kv.Open(t.Context(), dsn, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, s, "bucket/x", set("state"))
	mustPutBlob(t, s, "body", "cached")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDSN(t, dsn, kv.Options{})
	wantRecord(t, s, "bucket/x", "state", 1)
	wantBlob(t, s, "body", "cached")
}

func testSharedDatabase(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	stores := []kv.Store{openDSN(t, dsn, kv.Options{}), openDSN(t, dsn, kv.Options{}), openDSN(t, dsn, kv.Options{})}
	const each = 30
	var g errgroup.Group
	for _, s := range stores {
		g.Go(func() error {
			for range each {
				if err := s.Update(t.Context(), "counter", increment); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		wantRecord(t, s, "counter", strconv.Itoa(len(stores)*each), int64(len(stores)*each))
	}
}

func testConcurrentOpen(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	const openers = 4
	stores := make([]kv.Store, openers)
	errs := make([]error, openers)
	var wg sync.WaitGroup
	for i := range openers {
		wg.Go(func() { stores[i], errs[i] = kv.Open(t.Context(), dsn, kv.Options{}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("opener %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	for i, s := range stores {
		mustUpdate(t, s, "counter", increment)
		mustPutBlob(t, s, fmt.Sprintf("blob/%d", i), "x")
	}
	wantRecord(t, stores[0], "counter", strconv.Itoa(openers), openers)
}

func testMigration(t *testing.T, b Backend) {
	if kv.SchemaVersion < 2 {
		t.Fatalf("SchemaVersion is %d; this test needs an older version to start from", kv.SchemaVersion)
	}
	dsn := b.NewDSN(t)
	old, err := b.OpenAtVersion(t.Context(), dsn, kv.Options{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, old, "bucket/kept", set("from version 1"))
	if err := old.PutBlob(t.Context(), "body", []byte("x")); err == nil {
		t.Fatal("PutBlob worked on a version 1 schema, which has no blob table; the test cannot tell a migration happened")
	}
	old.Close()

	s := openDSN(t, dsn, kv.Options{})
	wantRecord(t, s, "bucket/kept", "from version 1", 1)
	mustPutBlob(t, s, "body", "after migration")
	wantBlob(t, s, "body", "after migration")

	// Opening a current database again changes nothing.
	again := openDSN(t, dsn, kv.Options{})
	wantRecord(t, again, "bucket/kept", "from version 1", 1)
	wantBlob(t, again, "body", "after migration")
}

func testNewerSchema(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	s, err := kv.Open(t.Context(), dsn, kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, s, "k", set("v"))
	s.Close()
	newer := kv.SchemaVersion + 1
	b.Exec(t, dsn, fmt.Sprintf("UPDATE ratekeeper_schema SET version = %d", newer))

	s, err = kv.Open(t.Context(), dsn, kv.Options{})
	if err == nil {
		s.Close()
		t.Fatalf("kv.Open of a version %d database succeeded; want it refused", newer)
	}
	var tooNew *kv.SchemaTooNewError
	if !errors.As(err, &tooNew) || tooNew.Found != newer || tooNew.Supported != kv.SchemaVersion {
		t.Fatalf("kv.Open = %v; want a *SchemaTooNewError{%d, %d}", err, newer, kv.SchemaVersion)
	}
	want := fmt.Sprintf("database schema version %d is newer than this ratekeeper supports (%d); upgrade ratekeeper", newer, kv.SchemaVersion)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

func testDamagedSchemaVersion(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	openDSN(t, dsn, kv.Options{}).Close()
	b.Exec(t, dsn, "UPDATE ratekeeper_schema SET version = -1")
	s, err := kv.Open(t.Context(), dsn, kv.Options{})
	if err == nil {
		s.Close()
		t.Fatal("kv.Open of a database at schema version -1 succeeded; want it refused")
	}
	if !strings.Contains(err.Error(), "holds version -1") {
		t.Fatalf("kv.Open = %v; want it to say the version table holds -1", err)
	}
}

// logCapture collects a store's log lines.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *logCapture) count(substr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Count(c.buf.String(), substr)
}

func (c *logCapture) logger() *slog.Logger { return slog.New(slog.NewTextHandler(c, nil)) }

func testCorruptedRecord(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	var logs logCapture
	s := openDSN(t, dsn, kv.Options{Logger: logs.logger()})
	mustUpdate(t, s, "bucket/bad", set("good value"))
	mustUpdate(t, s, "bucket/fine", set("untouched"))
	b.Exec(t, dsn, "UPDATE ratekeeper_records SET checksum = checksum + 1 WHERE key = 'bucket/bad'")

	wantAbsent(t, s, "bucket/bad")
	wantAbsent(t, s, "bucket/bad")
	recs, err := s.List(t.Context(), "bucket/")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Key != "bucket/fine" {
		t.Fatalf("List returned %+v; want only bucket/fine", recs)
	}
	if n := logs.count("key=bucket/bad"); n != 1 {
		t.Fatalf("the corrupted key was logged %d times; want once:\n%s", n, logs.buf.String())
	}

	// The next update sees it absent and rebuilds it.
	mustUpdate(t, s, "bucket/bad", func(rec *kv.Record) error {
		if rec.Value != nil || rec.Version != 0 {
			return fmt.Errorf("fn saw a corrupted record as %q version %d; want absent", rec.Value, rec.Version)
		}
		rec.Value = []byte("rebuilt")
		return nil
	})
	wantRecord(t, s, "bucket/bad", "rebuilt", 1)
	wantRecord(t, s, "bucket/fine", "untouched", 1)

	// A key damaged again after a good write is logged again.
	b.Exec(t, dsn, "UPDATE ratekeeper_records SET value = value || value WHERE key = 'bucket/bad'")
	wantAbsent(t, s, "bucket/bad")
	if n := logs.count("key=bucket/bad"); n != 2 {
		t.Fatalf("the key damaged a second time was logged %d times in all; want 2", n)
	}
	// A corrupted row can be deleted too.
	mustUpdate(t, s, "bucket/bad", del)
	wantAbsent(t, s, "bucket/bad")
}

func testCorruptedBlob(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	var logs logCapture
	s := openDSN(t, dsn, kv.Options{Logger: logs.logger()})
	mustPutBlob(t, s, "body/bad", "cached body")
	b.Exec(t, dsn, "UPDATE ratekeeper_blobs SET checksum = checksum + 1 WHERE key = 'body/bad'")
	wantNoBlob(t, s, "body/bad")
	wantNoBlob(t, s, "body/bad")
	if n := logs.count("key=body/bad"); n != 1 {
		t.Fatalf("the corrupted blob was logged %d times; want once:\n%s", n, logs.buf.String())
	}
	mustPutBlob(t, s, "body/bad", "fresh body")
	wantBlob(t, s, "body/bad", "fresh body")
}

// --- Worker processes ---

const (
	envWorker = "RATEKEEPER_STORETEST_WORKER" // "increment" or "hold"
	envDSN    = "RATEKEEPER_STORETEST_DSN"
	envKey    = "RATEKEEPER_STORETEST_KEY"
	envCount  = "RATEKEEPER_STORETEST_COUNT"
	// insideMarker is what a "hold" worker prints once it is inside fn.
	insideMarker = "inside update"
)

// Main is for the TestMain of a package that runs the suite: in a worker
// process started by the suite it does the worker's job and exits;
// otherwise it runs the tests.
func Main(m *testing.M) {
	if job := os.Getenv(envWorker); job != "" {
		if err := work(job); err != nil {
			fmt.Fprintf(os.Stderr, "kvtest worker %s: %v\n", job, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// work does one worker process's job.
func work(job string) error {
	ctx := context.Background()
	s, err := kv.Open(ctx, os.Getenv(envDSN), kv.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	key := os.Getenv(envKey)
	switch job {
	case "increment":
		n, err := strconv.Atoi(os.Getenv(envCount))
		if err != nil {
			return fmt.Errorf("%s: %w", envCount, err)
		}
		for range n {
			if err := s.Update(ctx, key, increment); err != nil {
				return err
			}
		}
		return nil
	case "increment-many":
		n, err := strconv.Atoi(os.Getenv(envCount))
		if err != nil {
			return fmt.Errorf("%s: %w", envCount, err)
		}
		keys := strings.Split(key, ",")
		for range n {
			if err := s.UpdateMany(ctx, keys, incrementAll); err != nil {
				return err
			}
		}
		return nil
	case "hold":
		// Read, modify, and then never get to write: the parent kills
		// this process with SIGKILL while fn is running.
		return s.Update(ctx, key, func(rec *kv.Record) error {
			rec.Value = []byte("half-done write that must never land")
			fmt.Println(insideMarker)
			select {}
		})
	}
	return fmt.Errorf("unknown job %q", job)
}

// startWorker starts the test binary as a worker process.
func startWorker(t *testing.T, job, dsn, key string, count int) (*exec.Cmd, *bytes.Buffer, *bufio.Reader) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorker+"="+job, envDSN+"="+dsn, envKey+"="+key, envCount+"="+strconv.Itoa(count))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, &stderr, bufio.NewReader(stdout)
}

func testProcesses(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	s := openDSN(t, dsn, kv.Options{}) // creates the schema, and joins in
	const workers, each = 3, 40
	type worker struct {
		cmd    *exec.Cmd
		stderr *bytes.Buffer
		stdout *bufio.Reader
	}
	var ws []worker
	for range workers {
		cmd, stderr, stdout := startWorker(t, "increment", dsn, "counter", each)
		ws = append(ws, worker{cmd, stderr, stdout})
	}
	for range each {
		mustUpdate(t, s, "counter", increment)
	}
	for i, w := range ws {
		w.stdout.WriteTo(&bytes.Buffer{}) // drain, so Wait can finish
		if err := w.cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v\n%s", i, err, w.stderr)
		}
	}
	total := (workers + 1) * each
	wantRecord(t, s, "counter", strconv.Itoa(total), int64(total))
}

func testKilledInsideUpdate(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	s := openDSN(t, dsn, kv.Options{})
	for range 41 {
		mustUpdate(t, s, "counter", increment)
	}

	cmd, stderr, stdout := startWorker(t, "hold", dsn, "counter", 0)
	line, err := stdout.ReadString('\n')
	if strings.TrimSpace(line) != insideMarker {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("worker did not get inside its update (read %q, %v):\n%s", line, err, stderr)
	}

	// The worker now holds the key's lock. An update queued behind it must
	// go through once the worker dies; the timeout only bounds a failure.
	waiter := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		waiter <- s.Update(ctx, "counter", increment)
	}()
	wantRecord(t, s, "counter", "41", 41) // readers are not blocked by the lock

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("worker ended with %v, not by SIGKILL:\n%s", err, stderr)
	}
	if err := <-waiter; err != nil {
		t.Fatalf("an update waiting on the killed worker's lock failed: %v", err)
	}
	wantRecord(t, s, "counter", "42", 42)
}

// BenchmarkUpdate measures single-key read-modify-writes on s and reports
// their latency percentiles as p50-µs and p99-µs.
func BenchmarkUpdate(b *testing.B, s kv.Store) {
	ctx := b.Context()
	if err := s.Update(ctx, "bench/counter", increment); err != nil { // create it outside the timing
		b.Fatal(err)
	}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := s.Update(ctx, "bench/counter", increment); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	at := func(q float64) float64 {
		return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Microsecond)
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}
