package kv

import "fmt"

// The tables of the SQLite and PostgreSQL stores all start with
// "ratekeeper_", so they can share a database with River's "river_" tables.
const (
	schemaTable  = "ratekeeper_schema"  // one row: the schema version
	recordsTable = "ratekeeper_records" // Store records
	blobsTable   = "ratekeeper_blobs"   // Blobs
	usageTable   = "ratekeeper_blob_usage"
)

// migration brings a database from version-1 to version. The statements run
// in one transaction together with the version bump, so a database is always
// at exactly one version.
type migration struct {
	version  int
	sqlite   []string
	postgres []string
}

// migrations is the schema's whole history, oldest first; entry i has
// version i+1. Never edit a released entry: append a new one and raise
// SchemaVersion.
var migrations = []migration{
	{
		version: 1, // records
		sqlite: []string{`
CREATE TABLE ratekeeper_records (
	key        TEXT    NOT NULL PRIMARY KEY,
	value      BLOB    NOT NULL,
	version    INTEGER NOT NULL,
	updated_at INTEGER NOT NULL, -- Unix nanoseconds, UTC
	checksum   INTEGER NOT NULL  -- CRC-32C of key, NUL, value
) WITHOUT ROWID`},
		postgres: []string{`
CREATE TABLE ratekeeper_records (
	key        text COLLATE "C" PRIMARY KEY, -- byte order, as List promises
	value      bytea       NOT NULL,
	version    bigint      NOT NULL,
	updated_at timestamptz NOT NULL,
	checksum   bigint      NOT NULL          -- CRC-32C of key, NUL, value
)`},
	},
	{
		version: 2, // blob table for the conditional-request cache
		sqlite: []string{`
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
		postgres: []string{`
CREATE TABLE ratekeeper_blobs (
	key       text COLLATE "C" PRIMARY KEY,
	value     bytea  NOT NULL,
	size      bigint NOT NULL, -- len(key) + len(value)
	last_used bigint NOT NULL, -- from ratekeeper_blob_clock: larger is more recent
	checksum  bigint NOT NULL
)`,
			`CREATE INDEX ratekeeper_blobs_last_used ON ratekeeper_blobs (last_used)`,
			`CREATE SEQUENCE ratekeeper_blob_clock`,
			// The usage row is also the lock that serializes blob writers.
			`CREATE TABLE ratekeeper_blob_usage (id integer PRIMARY KEY CHECK (id = 1), total bigint NOT NULL)`,
			`INSERT INTO ratekeeper_blob_usage (id, total) VALUES (1, 0)`,
		},
	},
}

// SchemaVersion is the database schema version this build creates and
// understands. Opening a database at an older version migrates it; a newer
// one is refused with a *SchemaTooNewError.
const SchemaVersion = 2

// SchemaTooNewError is returned when opening a database that a newer
// ratekeeper has migrated past what this build knows.
type SchemaTooNewError struct {
	Found     int // the database's version
	Supported int // SchemaVersion of this build
}

func (e *SchemaTooNewError) Error() string {
	return fmt.Sprintf("database schema version %d is newer than this ratekeeper supports (%d); upgrade ratekeeper", e.Found, e.Supported)
}

// checkVersion returns the error for a database at version found, if any.
func checkVersion(found int) error {
	switch {
	case found > SchemaVersion:
		return &SchemaTooNewError{Found: found, Supported: SchemaVersion}
	case found < 0:
		return fmt.Errorf("store: %s holds version %d; a version is never negative, so the table was damaged (set it to the version the tables match, or start a new database)", schemaTable, found)
	}
	return nil
}

// pending returns the migrations that bring a database at version found up
// to version target.
func pending(found, target int) []migration {
	if found >= target {
		return nil
	}
	return migrations[found:target]
}
