package postgres_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/postgres"
	"github.com/ratekeeper/ratekeeper/store/storetest"
)

// queryInt runs a query of one integer on the database at dsn.
func queryInt(t *testing.T, dsn, query string) int64 {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int64
	if err := conn.QueryRow(t.Context(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// A cache hit writes no row, so hits take no row lock and leave no dead
// tuple for vacuum. Every UPDATE gives the row a new version, whose xmin
// (the transaction that wrote it) changes.
func TestBlobHitWritesNothing(t *testing.T) {
	dsn := backend(t).NewDSN(t)
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	s, err := postgres.Open(t.Context(), dsn, store.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.HitsWriteNothing(t, s, &now, "the row's xmin", func() int64 {
		return queryInt(t, dsn, "SELECT xmin::text::bigint FROM ratekeeper_blobs WHERE key = 'body'")
	})
}

// The usage rows stay exact whatever deletes blobs and from whichever
// connection: an operator's DELETE naming the schema from a connection whose
// search_path does not, and a TRUNCATE, which fires no row trigger.
func TestBlobUsageKeptByTheDatabase(t *testing.T) {
	base := storetest.PostgresBase(t)
	dsn := storetest.NewPostgresSchema(t, base)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	s, err := postgres.Open(t.Context(), dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, key := range []string{"a", "b", "c"} {
		if err := s.PutBlob(t.Context(), key, []byte("value")); err != nil {
			t.Fatal(err)
		}
	}
	usage := func() int64 { return queryInt(t, dsn, "SELECT sum(total) FROM ratekeeper_blob_usage") }
	if got := usage(); got != 18 {
		t.Fatalf("three 6-byte blobs count %d; want 18", got)
	}
	conn, err := pgx.Connect(t.Context(), base) // search_path: the server's default
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "DELETE FROM "+schema+".ratekeeper_blobs WHERE key = 'a'"); err != nil {
		t.Fatal(err)
	}
	if got := usage(); got != 12 {
		t.Fatalf("after an operator's DELETE of one, the blobs count %d; want 12", got)
	}
	if _, err := conn.Exec(t.Context(), "TRUNCATE "+schema+".ratekeeper_blobs"); err != nil {
		t.Fatal(err)
	}
	if got := usage(); got != 0 {
		t.Fatalf("after TRUNCATE the blobs count %d; want 0", got)
	}
}

func BenchmarkBlobs(b *testing.B) {
	storetest.BenchmarkBlobs(b, backend(b).NewDSN)
}
