package sqlite

import (
	"database/sql"
	"strings"

	"github.com/ratekeeper/ratekeeper/store/internal/core"
)

// The SQLite store's SQL, all of it: where it differs from PostgreSQL's,
// and the statements only its own transactions run. What both databases
// share is written once in core.Shared.

// statements is the SQLite statement table.
var statements = core.Shared(core.Statements{
	NoRows:       sql.ErrNoRows,
	NewScan:      core.NewAnyScan,
	SchemaExists: `SELECT count(*) = 1 FROM sqlite_master WHERE type = 'table' AND name = 'ratekeeper_schema'`,
	// BEGIN IMMEDIATE takes the write lock, which serializes migrations
	// and blob writers alike.
	LockSchema:    "",
	BlobUsageLock: "",
	// The LRU clock is one past the most recent use; it is exact because
	// every blob write holds the database's write lock.
	NextBlobUse: nextBlobUse,
	Migrations:  migrations,
}, false)

const nextBlobUse = `(SELECT coalesce(max(last_used), 0) + 1 FROM ratekeeper_blobs)`

// migrations is the schema's whole history, oldest first; entry v brings
// version v to v+1. Never edit a released entry: append a new one and
// raise core.SchemaVersion (and PostgreSQL's too).
var migrations = [][]string{
	{ // version 1: records
		`
CREATE TABLE ratekeeper_records (
	key        TEXT    NOT NULL PRIMARY KEY,
	value      BLOB    NOT NULL,
	version    INTEGER NOT NULL,
	updated_at INTEGER NOT NULL, -- Unix nanoseconds, UTC
	checksum   INTEGER NOT NULL  -- CRC-32C of key, NUL, value
) WITHOUT ROWID`,
	},
	{ // version 2: blob table for the conditional-request cache
		`
CREATE TABLE ratekeeper_blobs (
	key       TEXT    NOT NULL PRIMARY KEY,
	value     BLOB    NOT NULL,
	size      INTEGER NOT NULL, -- len(key) + len(value)
	last_used INTEGER NOT NULL, -- LRU clock: larger is more recent
	checksum  INTEGER NOT NULL
)`,
		`CREATE INDEX ratekeeper_blobs_last_used ON ratekeeper_blobs (last_used)`,
		`CREATE TABLE ratekeeper_blob_usage (id INTEGER PRIMARY KEY CHECK (id = 1), total INTEGER NOT NULL)`,
		`INSERT INTO ratekeeper_blob_usage (id, total) VALUES (1, 0)`,
	},
}

// The statements of this store's own transactions.
const (
	// upsertRecord writes a record whatever was there: the write lock
	// taken before the read is what makes the update atomic.
	upsertRecord = `
INSERT INTO ratekeeper_records (key, value, version, updated_at, checksum) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET value = excluded.value, version = excluded.version,
	updated_at = excluded.updated_at, checksum = excluded.checksum`
	// getBlob reads on a reader connection, so a miss writes nothing;
	// touchBlob then moves a hit to the front of the LRU order.
	getBlob   = `SELECT value, checksum FROM ratekeeper_blobs WHERE key = ?`
	touchBlob = `UPDATE ratekeeper_blobs SET last_used = ` + nextBlobUse + ` WHERE key = ?`
)

// selectRecords reads the records of n keys in one query.
func selectRecords(n int) string {
	return `SELECT ` + core.RecordColumns + ` FROM ratekeeper_records WHERE key IN (?` + strings.Repeat(", ?", n-1) + `)`
}
