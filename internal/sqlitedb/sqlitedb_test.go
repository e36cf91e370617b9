package sqlitedb

import (
	"context"
	"path/filepath"
	"testing"
)

func TestOpenUsesWAL(t *testing.T) {
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Fatalf("journal_mode = %q, want wal", mode)
	}
	var timeout int
	if err := db.QueryRow("PRAGMA busy_timeout").Scan(&timeout); err != nil {
		t.Fatal(err)
	}
	if timeout != BusyTimeoutMillis {
		t.Fatalf("busy_timeout = %d, want %d", timeout, BusyTimeoutMillis)
	}
}

func TestIsPostgres(t *testing.T) {
	for dsn, want := range map[string]bool{
		"postgres://u@h/db": true, "postgresql://h/db": true,
		"./ratekeeper.db": false, "sqlite://x.db": false,
	} {
		if got := IsPostgres(dsn); got != want {
			t.Errorf("IsPostgres(%q) = %v", dsn, got)
		}
	}
}
