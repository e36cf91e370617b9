package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/ratekeeper/ratekeeper/store"
)

// A database shared between stores: reopening, schema versions, damaged
// rows. Processes sharing one are in process.go.

func testReopen(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	s, err := store.Open(t.Context(), dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, s, "bucket/x", set("state"))
	mustPutBlob(t, s, "body", "cached")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDSN(t, dsn, store.Options{})
	wantRecord(t, s, "bucket/x", "state", 1)
	wantBlob(t, s, "body", "cached")
}

func testSharedDatabase(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	stores := []store.Store{openDSN(t, dsn, store.Options{}), openDSN(t, dsn, store.Options{}), openDSN(t, dsn, store.Options{})}
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
	stores := make([]store.Store, openers)
	errs := make([]error, openers)
	var wg sync.WaitGroup
	for i := range openers {
		wg.Go(func() { stores[i], errs[i] = store.Open(t.Context(), dsn, store.Options{}) })
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
	if store.SchemaVersion < 2 {
		t.Fatalf("SchemaVersion is %d; this test needs an older version to start from", store.SchemaVersion)
	}
	dsn := b.NewDSN(t)
	old, err := b.OpenAtVersion(t.Context(), dsn, store.Options{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, old, "bucket/kept", set("from version 1"))
	if err := old.PutBlob(t.Context(), "body", []byte("x")); err == nil {
		t.Fatal("PutBlob worked on a version 1 schema, which has no blob table; the test cannot tell a migration happened")
	}
	old.Close()

	s := openDSN(t, dsn, store.Options{})
	wantRecord(t, s, "bucket/kept", "from version 1", 1)
	mustPutBlob(t, s, "body", "after migration")
	wantBlob(t, s, "body", "after migration")

	// Opening a current database again changes nothing.
	again := openDSN(t, dsn, store.Options{})
	wantRecord(t, again, "bucket/kept", "from version 1", 1)
	wantBlob(t, again, "body", "after migration")
}

func testNewerSchema(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	s, err := store.Open(t.Context(), dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, s, "k", set("v"))
	s.Close()
	newer := store.SchemaVersion + 1
	b.Exec(t, dsn, fmt.Sprintf("UPDATE ratekeeper_schema SET version = %d", newer))

	s, err = store.Open(t.Context(), dsn, store.Options{})
	if err == nil {
		s.Close()
		t.Fatalf("store.Open of a version %d database succeeded; want it refused", newer)
	}
	var tooNew *store.SchemaTooNewError
	if !errors.As(err, &tooNew) || tooNew.Found != newer || tooNew.Supported != store.SchemaVersion {
		t.Fatalf("store.Open = %v; want a *SchemaTooNewError{%d, %d}", err, newer, store.SchemaVersion)
	}
	want := fmt.Sprintf("database schema version %d is newer than this ratekeeper supports (%d); upgrade ratekeeper", newer, store.SchemaVersion)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

func testDamagedSchemaVersion(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	openDSN(t, dsn, store.Options{}).Close()
	b.Exec(t, dsn, "UPDATE ratekeeper_schema SET version = -1")
	s, err := store.Open(t.Context(), dsn, store.Options{})
	if err == nil {
		s.Close()
		t.Fatal("store.Open of a database at schema version -1 succeeded; want it refused")
	}
	if !strings.Contains(err.Error(), "holds version -1") {
		t.Fatalf("store.Open = %v; want it to say the version table holds -1", err)
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
	s := openDSN(t, dsn, store.Options{Logger: logs.logger()})
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
	mustUpdate(t, s, "bucket/bad", func(rec *store.Record) error {
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
	s := openDSN(t, dsn, store.Options{Logger: logs.logger()})
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
