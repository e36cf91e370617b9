package sqlite

import (
	"errors"

	msqlite "modernc.org/sqlite"
)

// sqliteLocked is SQLITE_LOCKED, a conflict inside one connection's
// shared cache (a table another statement of it holds).
const sqliteLocked = 6

// IsTransient reports whether err is SQLite telling that another writer
// holds the database (SQLITE_BUSY, after the busy timeout) or a table
// (SQLITE_LOCKED): the same call succeeds once that writer is done. A
// damaged file (SQLITE_CORRUPT, a failed quick_check) is not transient.
func IsTransient(err error) bool {
	var e *msqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code() & 0xff {
	case sqliteBusy, sqliteLocked:
		return true
	}
	return false
}
