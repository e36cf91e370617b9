package store_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ratekeeper/ratekeeper/internal/sqlitedb"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func TestMemory(t *testing.T) {
	storetest.Run(t, memoryBackend())
}

func TestSQLite(t *testing.T) {
	storetest.Run(t, sqliteBackend())
}

func TestPostgres(t *testing.T) {
	storetest.Run(t, postgresBackend(t))
}

func memoryBackend() storetest.Backend {
	return storetest.Backend{Open: func(t *testing.T, opts store.Options) store.Store {
		s, err := store.NewMemory(opts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}}
}

func sqliteBackend() storetest.Backend {
	return storetest.Backend{
		NewDSN: func(t testing.TB) string { return filepath.Join(t.TempDir(), "ratekeeper.db") },
		Exec: func(t *testing.T, dsn, query string) {
			t.Helper()
			db, err := sqlitedb.Open(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.ExecContext(t.Context(), query); err != nil {
				t.Fatalf("%s: %v", query, err)
			}
		},
		OpenAtVersion: store.OpenAtVersion,
	}
}

// postgresBackend gives every test a schema of its own in the database
// named by RATEKEEPER_TEST_POSTGRES, so parallel test runs cannot collide.
func postgresBackend(t testing.TB) storetest.Backend {
	base := os.Getenv("RATEKEEPER_TEST_POSTGRES")
	if base == "" {
		t.Skip("RATEKEEPER_TEST_POSTGRES is unset; set it to a PostgreSQL URL (e.g. from .ci/pg-start) to run the PostgreSQL store tests")
	}
	return storetest.Backend{
		NewDSN: func(t testing.TB) string { return newPostgresSchema(t, base) },
		Exec: func(t *testing.T, dsn, query string) {
			t.Helper()
			conn, err := pgx.Connect(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(t.Context(), query); err != nil {
				t.Fatalf("%s: %v", query, err)
			}
		},
		OpenAtVersion: store.OpenAtVersion,
	}
}

// newPostgresSchema creates a fresh schema, dropped when the test ends, and
// returns a DSN whose search_path selects it.
func newPostgresSchema(t testing.TB, base string) string {
	return storetest.NewPostgresSchema(t, base)
}

func TestOpenPicksTheImplementation(t *testing.T) {
	ctx := t.Context()
	for _, dsn := range []string{"", "memory"} {
		s, err := store.Open(ctx, dsn, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.(*store.Memory); !ok {
			t.Errorf("Open(%q) = %T; want *store.Memory", dsn, s)
		}
		s.Close()
	}
	dir := t.TempDir()
	for _, dsn := range []string{filepath.Join(dir, "a.db"), "sqlite://" + filepath.Join(dir, "b.db"), "file:" + filepath.Join(dir, "c.db")} {
		s, err := store.Open(ctx, dsn, store.Options{})
		if err != nil {
			t.Fatalf("Open(%q): %v", dsn, err)
		}
		if _, ok := s.(*store.SQLite); !ok {
			t.Errorf("Open(%q) = %T; want *store.SQLite", dsn, s)
		}
		s.Close()
	}
}

func TestOpenRefusesBadInput(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		dsn  string
		opts store.Options
		want string
	}{
		{"mysql://u@h/db", store.Options{}, `unsupported database URL scheme "mysql"`},
		{":memory:", store.Options{}, `use "memory" for an in-memory store`},
		{"sqlite://:memory:", store.Options{}, `use "memory" for an in-memory store`},
		{"memory", store.Options{BlobLimit: -1}, "blob limit -1 is negative"},
		{filepath.Join(t.TempDir(), "x.db"), store.Options{BlobLimit: -5}, "blob limit -5 is negative"},
		{"postgres://u:hunter2-secret@127.0.0.1:1/db?connect_timeout=x", store.Options{}, "PostgreSQL DSN"},
	} {
		s, err := store.Open(ctx, tc.dsn, tc.opts)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q, %+v) succeeded; want an error saying %q", tc.dsn, tc.opts, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %q; want it to say %q", tc.dsn, err, tc.want)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q) error shows the password: %q", tc.dsn, err)
		}
	}
}

// SQLite lets a damaged column hold any type; such rows are absent too.
func TestSQLiteRowWithWrongTypesIsAbsent(t *testing.T) {
	b := sqliteBackend()
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
	b.Run("memory", func(b *testing.B) {
		s, err := store.NewMemory(store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		storetest.BenchmarkUpdate(b, s)
	})
	b.Run("sqlite", func(b *testing.B) {
		s, err := store.OpenSQLite(b.Context(), filepath.Join(b.TempDir(), "bench.db"), store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		storetest.BenchmarkUpdate(b, s)
	})
	b.Run("postgres", func(b *testing.B) {
		backend := postgresBackend(b)
		s, err := store.OpenPostgres(b.Context(), backend.NewDSN(b), store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		storetest.BenchmarkUpdate(b, s)
	})
}
