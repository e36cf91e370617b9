// Package storetest is the one test suite every store.Store
// implementation must pass. A store's tests call Run with a Backend that
// opens fresh stores; stores shared between processes also give the suite
// a way to name and reach their databases, which enables the
// multi-process, crash, migration and corruption tests.
//
// The cases are filed by area: records.go (one key at a time), many.go
// (UpdateMany), blobs.go, shared.go (a database shared between stores:
// reopening, schema versions, damaged rows), process.go (processes sharing
// one), bench.go; postgres.go gives tests a PostgreSQL schema or database
// of their own.
//
// The multi-process tests re-execute the test binary as worker processes, so
// the package running the suite must route its TestMain through Main:
//
//	func TestMain(m *testing.M) { storetest.Main(m) }
//
// Layer 4 of docs/architecture.md: it owns the one suite every store.Store
// passes.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/store"
)

// Backend describes the implementation under test.
type Backend struct {
	// Open returns a new store over a fresh, empty database, configured
	// with opts; the suite closes it. When nil, the suite opens NewDSN's
	// database with store.Open.
	Open func(t *testing.T, opts store.Options) store.Store

	// The fields below are for stores shared between processes. Leave
	// them nil for a store that lives in one process; set all three to
	// run the shared-database tests.

	// NewDSN returns the DSN (as store.Open takes it) of a fresh, empty
	// database that lives until the test ends.
	NewDSN func(t testing.TB) string
	// Exec runs one SQL statement on the database at dsn, bypassing the
	// store, to damage rows and forge schema versions. The suite uses
	// only SQL that SQLite and PostgreSQL both accept.
	Exec func(t *testing.T, dsn, query string)
	// OpenAtVersion opens the database at dsn after creating or migrating
	// its schema only up to version (older than store.SchemaVersion).
	OpenAtVersion func(ctx context.Context, dsn string, opts store.Options, version int) (store.Store, error)
	// Query, optional, runs a query of one integer on the database at
	// dsn, bypassing the store, to check what the store keeps (the blob
	// table's total).
	Query func(t *testing.T, dsn, query string) int64
}

func (b Backend) shared() bool { return b.NewDSN != nil && b.Exec != nil && b.OpenAtVersion != nil }

// open returns a new store for one test and closes it when the test ends.
func (b Backend) open(t *testing.T, opts store.Options) store.Store {
	t.Helper()
	if b.Open != nil {
		s := b.Open(t, opts)
		t.Cleanup(func() { s.Close() })
		return s
	}
	return openDSN(t, b.NewDSN(t), opts)
}

func openDSN(t *testing.T, dsn string, opts store.Options) store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), dsn, opts)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Run runs the suite against b. Without b's shared-database fields it runs
// only the tests that hold for every store.
func Run(t *testing.T, b Backend) {
	if b.Open == nil && b.NewDSN == nil {
		t.Fatal("storetest: Backend needs Open or NewDSN")
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
		{"GetMany", testGetMany},
		{"DatabaseNow", testDatabaseNow},
		{"Blobs", testBlobs},
		{"BlobEvictionLRU", testBlobEviction},
		{"TouchBlob", testTouchBlob},
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
			{"BlobHitsWithinGranularity", testBlobHitsWithinGranularity},
			{"BlobsMigrateFromVersion2", testBlobsMigrateFromVersion2},
			{"ProcessesIncrementOneCounter", testProcesses},
			{"ProcessesUpdateManyKeys", testProcessesUpdateMany},
			{"ProcessKilledInsideUpdate", testKilledInsideUpdate},
			{"ProcessesPutBlobs", testProcessesPutBlobs},
		}...)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}

// clock is an injected clock that moves one second per reading, so every
// write gets a distinct, predictable time (or step, or only when Add moves
// it).
type clock struct {
	mu   sync.Mutex
	last time.Time
	step time.Duration
}

func newClock() *clock { return newStepClock(time.Second) }

func newStepClock(step time.Duration) *clock {
	return &clock{last: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), step: step}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = c.last.Add(c.step)
	return c.last
}

// Add moves the clock on by d.
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = c.last.Add(d)
}

func (c *clock) Last() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func set(value string) func(*store.Record) error {
	return func(rec *store.Record) error { rec.Value = []byte(value); return nil }
}

func del(rec *store.Record) error { rec.Value = nil; return nil }

// increment adds one to a decimal counter (absent counts as 0).
func increment(rec *store.Record) error {
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

func mustUpdate(t *testing.T, s store.Store, key string, fn func(*store.Record) error) {
	t.Helper()
	if err := s.Update(t.Context(), key, fn); err != nil {
		t.Fatalf("Update(%q): %v", key, err)
	}
}

func mustGet(t *testing.T, s store.Store, key string) store.Record {
	t.Helper()
	rec, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return rec
}

func wantAbsent(t *testing.T, s store.Store, key string) {
	t.Helper()
	rec, err := s.Get(t.Context(), key)
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get(%q) = %+v, %v; want ErrNotFound", key, rec, err)
	}
}

func wantRecord(t *testing.T, s store.Store, key, value string, version int64) store.Record {
	t.Helper()
	rec := mustGet(t, s, key)
	if rec.Key != key || string(rec.Value) != value || rec.Version != version {
		t.Fatalf("Get(%q) = {Key:%q Value:%q Version:%d}; want {Key:%q Value:%q Version:%d}",
			key, rec.Key, rec.Value, rec.Version, key, value, version)
	}
	return rec
}

// MigrationsMatch checks a store's schema history (one list of statements
// per version) against store.SchemaVersion: one migration per version,
// none empty.
func MigrationsMatch(t *testing.T, name string, migrations [][]string) {
	t.Helper()
	if n := len(migrations); n != store.SchemaVersion {
		t.Fatalf("%d %s migrations but SchemaVersion is %d", n, name, store.SchemaVersion)
	}
	for v, m := range migrations {
		if len(m) == 0 {
			t.Errorf("the migration to version %d has no statements", v+1)
		}
	}
}
