package kv_test

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
	"github.com/ratekeeper/ratekeeper/kv"
	"github.com/ratekeeper/ratekeeper/kv/kvtest"
)

func TestMain(m *testing.M) { kvtest.Main(m) }

func TestMemory(t *testing.T) {
	kvtest.Run(t, memoryBackend())
}

func TestSQLite(t *testing.T) {
	kvtest.Run(t, sqliteBackend())
}

func TestPostgres(t *testing.T) {
	kvtest.Run(t, postgresBackend(t))
}

func memoryBackend() kvtest.Backend {
	return kvtest.Backend{Open: func(t *testing.T, opts kv.Options) kv.Store {
		s, err := kv.NewMemory(opts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}}
}

func sqliteBackend() kvtest.Backend {
	return kvtest.Backend{
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
		OpenAtVersion: kv.OpenAtVersion,
	}
}

// postgresBackend gives every test a schema of its own in the database
// named by RATEKEEPER_TEST_POSTGRES, so parallel test runs cannot collide.
func postgresBackend(t testing.TB) kvtest.Backend {
	base := os.Getenv("RATEKEEPER_TEST_POSTGRES")
	if base == "" {
		t.Skip("RATEKEEPER_TEST_POSTGRES is unset; set it to a PostgreSQL URL (e.g. from .ci/pg-start) to run the PostgreSQL store tests")
	}
	return kvtest.Backend{
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
		OpenAtVersion: kv.OpenAtVersion,
	}
}

// newPostgresSchema creates a fresh schema, dropped when the test ends, and
// returns a DSN whose search_path selects it.
func newPostgresSchema(t testing.TB, base string) string {
	return kvtest.NewPostgresSchema(t, base)
}

func TestOpenPicksTheImplementation(t *testing.T) {
	ctx := t.Context()
	for _, dsn := range []string{"", "memory"} {
		s, err := kv.Open(ctx, dsn, kv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.(*kv.Memory); !ok {
			t.Errorf("Open(%q) = %T; want *kv.Memory", dsn, s)
		}
		s.Close()
	}
	dir := t.TempDir()
	for _, dsn := range []string{filepath.Join(dir, "a.db"), "sqlite://" + filepath.Join(dir, "b.db"), "file:" + filepath.Join(dir, "c.db")} {
		s, err := kv.Open(ctx, dsn, kv.Options{})
		if err != nil {
			t.Fatalf("Open(%q): %v", dsn, err)
		}
		if _, ok := s.(*kv.SQLite); !ok {
			t.Errorf("Open(%q) = %T; want *kv.SQLite", dsn, s)
		}
		s.Close()
	}
}

func TestOpenRefusesBadInput(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		dsn  string
		opts kv.Options
		want string
	}{
		{"mysql://u@h/db", kv.Options{}, `unsupported database URL scheme "mysql"`},
		{":memory:", kv.Options{}, `use "memory" for an in-memory store`},
		{"sqlite://:memory:", kv.Options{}, `use "memory" for an in-memory store`},
		{"memory", kv.Options{BlobLimit: -1}, "blob limit -1 is negative"},
		{filepath.Join(t.TempDir(), "x.db"), kv.Options{BlobLimit: -5}, "blob limit -5 is negative"},
		{"postgres://u:hunter2-secret@127.0.0.1:1/db?connect_timeout=x", kv.Options{}, "PostgreSQL DSN"},
	} {
		s, err := kv.Open(ctx, tc.dsn, tc.opts)
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
	s, err := kv.Open(t.Context(), dsn, kv.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"a", "b", "c"} {
		if err := s.Update(t.Context(), k, func(r *kv.Record) error { r.Value = []byte(k); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	b.Exec(t, dsn, "UPDATE ratekeeper_records SET version = 'seven' WHERE key = 'a'")
	b.Exec(t, dsn, "UPDATE ratekeeper_records SET updated_at = 1.5 WHERE key = 'b'")
	b.Exec(t, dsn, "UPDATE ratekeeper_records SET value = 42 WHERE key = 'c'")
	for _, k := range []string{"a", "b", "c"} {
		if _, err := s.Get(t.Context(), k); !errors.Is(err, kv.ErrNotFound) {
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
		s, err := kv.NewMemory(kv.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		kvtest.BenchmarkUpdate(b, s)
	})
	b.Run("sqlite", func(b *testing.B) {
		s, err := kv.OpenSQLite(b.Context(), filepath.Join(b.TempDir(), "bench.db"), kv.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		kvtest.BenchmarkUpdate(b, s)
	})
	b.Run("postgres", func(b *testing.B) {
		backend := postgresBackend(b)
		s, err := kv.OpenPostgres(b.Context(), backend.NewDSN(b), kv.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		kvtest.BenchmarkUpdate(b, s)
	})
}
