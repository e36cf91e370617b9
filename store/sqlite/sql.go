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
	// and blob writers alike: a blob write and its evictions might as well
	// be one transaction.
	LockSchema:    "",
	BlobWriteInTx: true,
	Migrations:    migrations,
}, false)

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
	{ // version 3: the blob total in 32 shards kept by triggers; last_used in Unix milliseconds
		`ALTER TABLE ratekeeper_blobs ADD COLUMN shard INTEGER NOT NULL DEFAULT 0`,
		`DROP TABLE ratekeeper_blob_usage`,
		`CREATE TABLE ratekeeper_blob_usage (shard INTEGER PRIMARY KEY, total INTEGER NOT NULL)`,
		`
WITH RECURSIVE shards (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM shards WHERE n < 31)
INSERT INTO ratekeeper_blob_usage (shard, total) SELECT n, 0 FROM shards`,
		// The blobs there are counted in shard 0, where they say they are;
		// their old LRU clock values are far below any time in
		// milliseconds, so they go first, in their old order.
		`UPDATE ratekeeper_blob_usage SET total = (SELECT coalesce(sum(size), 0) FROM ratekeeper_blobs) WHERE shard = 0`,
		`
CREATE TRIGGER ratekeeper_blob_added AFTER INSERT ON ratekeeper_blobs BEGIN
	UPDATE ratekeeper_blob_usage SET total = total + NEW.size WHERE shard = NEW.shard;
END`,
		`
CREATE TRIGGER ratekeeper_blob_removed AFTER DELETE ON ratekeeper_blobs BEGIN
	UPDATE ratekeeper_blob_usage SET total = total - OLD.size WHERE shard = OLD.shard;
END`,
		`
CREATE TRIGGER ratekeeper_blob_resized AFTER UPDATE OF size, shard ON ratekeeper_blobs BEGIN
	UPDATE ratekeeper_blob_usage SET total = total - OLD.size WHERE shard = OLD.shard;
	UPDATE ratekeeper_blob_usage SET total = total + NEW.size WHERE shard = NEW.shard;
END`,
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
)

// selectRecords reads the records of n keys in one query.
func selectRecords(n int) string {
	return `SELECT ` + core.RecordColumns + ` FROM ratekeeper_records WHERE key IN (?` + strings.Repeat(", ?", n-1) + `)`
}
