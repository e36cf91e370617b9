package store_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/memory"
	"github.com/ratekeeper/ratekeeper/store/sqlite"
)

func TestOpenPicksTheImplementation(t *testing.T) {
	ctx := t.Context()
	for _, dsn := range []string{"", "memory"} {
		s, err := store.Open(ctx, dsn, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.(*memory.Store); !ok {
			t.Errorf("Open(%q) = %T; want *memory.Store", dsn, s)
		}
		s.Close()
	}
	dir := t.TempDir()
	for _, dsn := range []string{filepath.Join(dir, "a.db"), "sqlite://" + filepath.Join(dir, "b.db"), "file:" + filepath.Join(dir, "c.db"), filepath.Join(dir, "d.db") + "?mode=rwc"} {
		s, err := store.Open(ctx, dsn, store.Options{})
		if err != nil {
			t.Fatalf("Open(%q): %v", dsn, err)
		}
		if _, ok := s.(*sqlite.Store); !ok {
			t.Errorf("Open(%q) = %T; want *sqlite.Store", dsn, s)
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
		{"file::memory:?cache=shared", store.Options{}, `use "memory" for an in-memory store`},
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

// KindOf is the one reader of --db strings: each kind, and what a file
// path looks like.
func TestKindOf(t *testing.T) {
	for dsn, want := range map[string]store.Kind{
		"":                     store.Memory,
		"memory":               store.Memory,
		"postgres://u@h/db":    store.Postgres,
		"postgresql://h/db":    store.Postgres,
		"./ratekeeper.db":      store.SQLite,
		"sqlite://x.db":        store.SQLite,
		"file:x.db":            store.SQLite,
		"memory.db":            store.SQLite,
		"/var/lib/postgres.db": store.SQLite,
	} {
		if got := store.KindOf(dsn); got != want {
			t.Errorf("KindOf(%q) = %v; want %v", dsn, got, want)
		}
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[store.Kind]string{store.Memory: "memory", store.SQLite: "SQLite", store.Postgres: "PostgreSQL", 7: "Kind(7)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind %d = %q; want %q", int(k), got, want)
		}
	}
}

func TestSQLitePath(t *testing.T) {
	for dsn, want := range map[string]string{
		"./ratekeeper.db":           "./ratekeeper.db",
		"sqlite:///tmp/r.db":        "/tmp/r.db",
		"file:r.db":                 "r.db",
		"sqlite://r.db?mode=rwc":    "r.db",
		"dir/with space/r.db":       "dir/with space/r.db",
		"file:/abs/r.db?_pragma=xx": "/abs/r.db",
	} {
		if got := store.SQLitePath(dsn); got != want {
			t.Errorf("SQLitePath(%q) = %q; want %q", dsn, got, want)
		}
	}
}

func TestRedact(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://u:hunter2@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgresql://u@h/db":                            "postgresql://u@h/db",
		"postgres://u:hunter2@h:bad port/db":             "postgres://…",
		"./u:hunter2@x.db":                               "./u:hunter2@x.db", // a file path, shown as given
		"memory":                                         "memory",
	} {
		if got := store.Redact(dsn); got != want {
			t.Errorf("Redact(%q) = %q; want %q", dsn, got, want)
		}
	}
}
