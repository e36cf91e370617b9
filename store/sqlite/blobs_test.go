package sqlite_test

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/sqlite"
	"github.com/ratekeeper/ratekeeper/store/storetest"
)

// queryInt runs a query of one integer on the SQLite file at dsn.
func queryInt(t *testing.T, dsn, query string) int64 {
	t.Helper()
	db, err := sqlite.OpenDB(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	if err := db.QueryRowContext(t.Context(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// A cache hit commits nothing to the file, so processes reading one
// cache never wait for each other's write lock. PRAGMA data_version,
// asked on one connection, changes when any other connection commits.
func TestBlobHitCommitsNothing(t *testing.T) {
	dsn := backend().NewDSN(t)
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	s, err := sqlite.Open(t.Context(), dsn, store.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sqlite.OpenDB(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	storetest.HitsWriteNothing(t, s, &now, "data_version", func() (v int64) {
		if err := conn.QueryRowContext(t.Context(), "PRAGMA data_version").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	})
}

func BenchmarkBlobs(b *testing.B) {
	storetest.BenchmarkBlobs(b, backend().NewDSN)
}
