package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	msqlite "modernc.org/sqlite"
)

// CheckPath says what keeps path from holding a SQLite database, without
// opening or creating anything: a directory that does not exist or is not
// a directory, or a path that is itself a directory. Nil when the file
// exists or may be created (its directory's permissions are left to Open).
func CheckPath(path string) error {
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory; give a file path such as %s", path, filepath.Join(path, "ratekeeper.db"))
		}
		return nil
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("directory %s does not exist; create it (mkdir -p %s) or give a path in an existing directory", dir, dir)
	case err != nil:
		return fmt.Errorf("directory %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}

// DamagedError reports a SQLite file that fails SQLite's own check, or
// that SQLite cannot read as a database at all.
type DamagedError struct {
	Path string
	// Findings are what quick_check reported (the first few), or the
	// error that kept the file from being read.
	Findings []string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("%s is damaged (SQLite's quick_check: %s)", e.Path, strings.Join(e.Findings, "; "))
}

// maxFindings bounds what a DamagedError quotes of quick_check's report.
const maxFindings = 3

// Check runs PRAGMA quick_check on the SQLite database at path: the
// cheapest check SQLite has that reads every page (not the indexes'
// agreement with their tables, which integrity_check adds at several times
// the cost). A missing file passes: it will be created empty. A damaged
// file gives a *DamagedError; a file that cannot be opened, the error of
// opening it.
func Check(ctx context.Context, path string) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	db, err := OpenDB(ctx, path)
	if err != nil {
		if damaged(err) {
			return &DamagedError{Path: path, Findings: []string{err.Error()}}
		}
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "PRAGMA quick_check")
	if err != nil {
		if damaged(err) {
			return &DamagedError{Path: path, Findings: []string{err.Error()}}
		}
		return fmt.Errorf("sqlite %s: quick_check: %w", path, err)
	}
	defer rows.Close()
	var findings []string
	n := 0
	for rows.Next() {
		var report string
		if err := rows.Scan(&report); err != nil {
			return fmt.Errorf("sqlite %s: quick_check: %w", path, err)
		}
		for line := range strings.Lines(report) {
			if line = strings.TrimSpace(line); line == "ok" || line == "" || strings.HasPrefix(line, "*** in database") {
				continue
			}
			if n++; n <= maxFindings {
				findings = append(findings, line)
			}
		}
	}
	if err := rows.Err(); err != nil {
		if damaged(err) {
			return &DamagedError{Path: path, Findings: append(findings, err.Error())}
		}
		return fmt.Errorf("sqlite %s: quick_check: %w", path, err)
	}
	if n > maxFindings {
		findings = append(findings, fmt.Sprintf("and %d more", n-maxFindings))
	}
	if len(findings) > 0 {
		return &DamagedError{Path: path, Findings: findings}
	}
	return nil
}

// SQLite's primary result codes for a damaged file.
const (
	sqliteCorrupt  = 11 // SQLITE_CORRUPT: "database disk image is malformed"
	sqliteNotADB   = 26 // SQLITE_NOTADB: "file is not a database"
	sqliteFormatRC = 24 // SQLITE_FORMAT
)

// damaged reports whether err is SQLite saying that the file is damaged.
func damaged(err error) bool {
	var e *msqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code() & 0xff {
	case sqliteCorrupt, sqliteNotADB, sqliteFormatRC:
		return true
	}
	return false
}

// IsDamaged reports whether err's chain holds SQLite's report of a damaged
// file, from Check or from any query.
func IsDamaged(err error) bool {
	var d *DamagedError
	return errors.As(err, &d) || damaged(err)
}
