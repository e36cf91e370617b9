package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckPath(t *testing.T) {
	dir := t.TempDir()
	if err := CheckPath(filepath.Join(dir, "new.db")); err != nil {
		t.Errorf("a new file in an existing directory: %v", err)
	}
	err := CheckPath(filepath.Join(dir, "missing", "rk.db"))
	if err == nil || !strings.Contains(err.Error(), "directory "+filepath.Join(dir, "missing")+" does not exist; create it") {
		t.Errorf("missing directory: %v", err)
	}
	if err := CheckPath(dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("a directory: %v", err)
	}
	// OpenDB says the same instead of SQLite's "unable to open database file".
	_, err = OpenDB(context.Background(), filepath.Join(dir, "missing", "rk.db"))
	if err == nil || !strings.Contains(err.Error(), "does not exist; create it") {
		t.Errorf("OpenDB in a missing directory: %v", err)
	}
}

// Corrupt makes the database at path fail quick_check: pages in the middle
// of the file overwritten, as a bad disk or a stray write would.
func Corrupt(t testing.TB, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	junk := []byte(strings.Repeat("\xa5", 3000))
	for off := int64(2 * 4096); off+int64(len(junk)) < fi.Size(); off += 3 * 4096 {
		if _, err := f.WriteAt(junk, off+100); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheckFindsDamage(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rk.db")
	if err := Check(ctx, path); err != nil {
		t.Fatalf("a missing file: %v", err)
	}
	db, err := OpenDB(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT)"); err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		if _, err := db.Exec("INSERT INTO t VALUES (?, ?)", strings.Repeat("k", 10)+string(rune('a'+i%26))+strings.Repeat("x", i), strings.Repeat("v", 200)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	if err := Check(ctx, path); err != nil {
		t.Fatalf("a healthy file: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	Corrupt(t, path)
	err = Check(ctx, path)
	var d *DamagedError
	if !errors.As(err, &d) || d.Path != path || !IsDamaged(err) || !strings.Contains(err.Error(), path+" is damaged (SQLite's quick_check: ") {
		t.Fatalf("Check = %v, want a *DamagedError naming %s", err, path)
	}
	t.Log(err)
}

// BenchmarkCheck measures Check (PRAGMA quick_check) on a 20 MB database
// of 20,000 rows of 1 KB with an index: what `fetch` and `tasks worker`
// pay at start.
//
//	go test ./store/sqlite -run '^$' -bench Check
func BenchmarkCheck(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "rk.db")
	db, err := OpenDB(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT)"); err != nil {
		b.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	for i := range 20_000 {
		if _, err := tx.Exec("INSERT INTO t VALUES (?, ?)", fmt.Sprintf("https://api.github.com/repos/o/r%06d", i), strings.Repeat("v", 1000)); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	db.Close()
	for b.Loop() {
		if err := Check(ctx, path); err != nil {
			b.Fatal(err)
		}
	}
	fi, _ := os.Stat(path)
	b.ReportMetric(float64(fi.Size())/1e6, "MB")
}
