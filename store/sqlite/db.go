package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"time"

	msqlite "modernc.org/sqlite" // also registers the "sqlite" driver
)

// BusyTimeoutMillis is how long a connection waits for another writer
// before giving up with SQLITE_BUSY.
const BusyTimeoutMillis = 10000

// driverDSN returns the database/sql data source name for the SQLite file
// at path (a plain path: store.SQLitePath reads the CLI's --db).
func driverDSN(path string) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeoutMillis))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	return "file:" + path + "?" + q.Encode()
}

// OpenDB opens (creating if needed) the SQLite database at path, the one
// way every ratekeeper package uses SQLite (the store, River's tasks): WAL
// journal (readers never block the writer), a busy timeout (several
// processes share one file), and immediate write transactions (a
// read-modify-write takes the write lock up front instead of failing with
// SQLITE_BUSY when it tries to upgrade). It checks that the database is
// usable.
//
// Several processes opening a brand-new file at once race to switch it to
// WAL mode, and SQLite reports that race as SQLITE_BUSY at once instead of
// waiting out the busy timeout; Open tries again, for up to the busy
// timeout. Once the file is in WAL mode, opening it no longer races.
func OpenDB(ctx context.Context, path string) (*sql.DB, error) {
	if path == "" {
		return nil, fmt.Errorf("sqlite: empty database path")
	}
	deadline := time.Now().Add(BusyTimeoutMillis * time.Millisecond)
	for {
		db, err := openDB(ctx, path)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return db, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func openDB(ctx context.Context, path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", driverDSN(path))
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		if perr := CheckPath(path); perr != nil {
			// SQLite says "unable to open database file (14)"; say why.
			return nil, fmt.Errorf("sqlite %s: %w", path, perr)
		}
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	return db, nil
}

// sqliteBusy is SQLITE_BUSY, the primary result code of "database is
// locked".
const sqliteBusy = 5

// isBusy reports whether err is SQLite's "database is locked".
func isBusy(err error) bool {
	var e *msqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqliteBusy
}
