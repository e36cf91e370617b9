package sqlite

import (
	"context"
	"path/filepath"
	"testing"
)

func TestOpenUsesWAL(t *testing.T) {
	db, err := OpenDB(context.Background(), filepath.Join(t.TempDir(), "x.db"))
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
