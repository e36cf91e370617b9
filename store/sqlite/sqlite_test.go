package sqlite_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/sqlite"
	"github.com/ratekeeper/ratekeeper/store/storetest"
)

var _ store.Store = (*sqlite.Store)(nil)

func TestMain(m *testing.M) { storetest.Main(m) }

func TestSQLite(t *testing.T) {
	storetest.Run(t, backend())
}

func backend() storetest.Backend {
	return storetest.Backend{
		NewDSN: func(t testing.TB) string { return filepath.Join(t.TempDir(), "ratekeeper.db") },
		Exec: func(t *testing.T, dsn, query string) {
			t.Helper()
			db, err := sqlite.OpenDB(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.ExecContext(t.Context(), query); err != nil {
				t.Fatalf("%s: %v", query, err)
			}
		},
		OpenAtVersion: func(ctx context.Context, dsn string, opts store.Options, version int) (store.Store, error) {
			s, err := sqlite.OpenAtVersion(ctx, dsn, opts, version)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		Query: queryInt,
	}
}

func TestMigrationsMatchTheSchemaVersion(t *testing.T) {
	storetest.MigrationsMatch(t, "SQLite", sqlite.Migrations)
}

// SQLite lets a damaged column hold any type; such rows are absent too.
func TestRowWithWrongTypesIsAbsent(t *testing.T) {
	b := backend()
	dsn := b.NewDSN(t)
	var logs strings.Builder
	s, err := store.Open(t.Context(), dsn, store.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"a", "b", "c"} {
		if err := s.Update(t.Context(), k, func(r *store.Record) error { r.Value = []byte(k); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	b.Exec(t, dsn, "UPDATE ratekeeper_records SET version = 'seven' WHERE key = 'a'")
	b.Exec(t, dsn, "UPDATE ratekeeper_records SET updated_at = 1.5 WHERE key = 'b'")
	b.Exec(t, dsn, "UPDATE ratekeeper_records SET value = 42 WHERE key = 'c'")
	for _, k := range []string{"a", "b", "c"} {
		if _, err := s.Get(t.Context(), k); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get(%q) of a row with a wrong column type = %v; want ErrNotFound", k, err)
		}
	}
	recs, err := s.List(t.Context(), "")
	if err != nil || len(recs) != 0 {
		t.Fatalf("List = %+v, %v; want no records", recs, err)
	}
	for _, want := range []string{
		`key=a reason="version is string seven, want a positive integer"`,
		`key=b reason="updated_at is float64 1.5, want Unix nanoseconds"`,
		`key=c reason="value is int64, want bytes"`,
	} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("log has %d lines with %s; want 1:\n%s", n, want, logs.String())
		}
	}
}

func BenchmarkUpdate(b *testing.B) {
	s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchmarkUpdate(b, s)
}
