package postgres

import (
	"github.com/jackc/pgx/v5"

	"github.com/ratekeeper/ratekeeper/store/internal/core"
)

// The PostgreSQL store's SQL, all of it: where it differs from SQLite's,
// and the statements only its own transactions run. What both databases
// share is written once in core.Shared, its placeholders numbered here.

// statements is the PostgreSQL statement table.
var statements = core.Shared(core.Statements{
	NoRows:       pgx.ErrNoRows,
	NewScan:      core.NewTypedScan,
	SchemaExists: `SELECT to_regclass('ratekeeper_schema') IS NOT NULL`,
	// An advisory lock (the bytes of "rk-schm") makes concurrent openers
	// take turns.
	LockSchema: `SELECT pg_advisory_xact_lock(32205990298609773)`, // 0x726b2d7363686d
	// The usage row is the lock that serializes blob writers; readers
	// (GetBlob) do not take it.
	BlobUsageLock: ` FOR UPDATE`,
	NextBlobUse:   `nextval('ratekeeper_blob_clock')`,
	Migrations:    migrations,
}, true)

// migrations is the schema's whole history, oldest first; entry v brings
// version v to v+1. Never edit a released entry: append a new one and
// raise core.SchemaVersion (and SQLite's too).
var migrations = [][]string{
	{ // version 1: records
		`
CREATE TABLE ratekeeper_records (
	key        text COLLATE "C" PRIMARY KEY, -- byte order, as List promises
	value      bytea       NOT NULL,
	version    bigint      NOT NULL,
	updated_at timestamptz NOT NULL,
	checksum   bigint      NOT NULL          -- CRC-32C of key, NUL, value
)`,
	},
	{ // version 2: blob table for the conditional-request cache
		`
CREATE TABLE ratekeeper_blobs (
	key       text COLLATE "C" PRIMARY KEY,
	value     bytea  NOT NULL,
	size      bigint NOT NULL, -- len(key) + len(value)
	last_used bigint NOT NULL, -- from ratekeeper_blob_clock: larger is more recent
	checksum  bigint NOT NULL
)`,
		`CREATE INDEX ratekeeper_blobs_last_used ON ratekeeper_blobs (last_used)`,
		`CREATE SEQUENCE ratekeeper_blob_clock`,
		`CREATE TABLE ratekeeper_blob_usage (id integer PRIMARY KEY CHECK (id = 1), total bigint NOT NULL)`,
		`INSERT INTO ratekeeper_blob_usage (id, total) VALUES (1, 0)`,
	},
}

// The statements of this store's own transactions.
var (
	// lockRecord takes one key's row, if there is one.
	lockRecord = statements.GetRecord + ` FOR UPDATE`
)

const (
	// lockRecords takes every existing row of the keys in key order, the
	// same order in every transaction, so two never deadlock.
	lockRecords = `SELECT ` + core.RecordColumns + ` FROM ratekeeper_records WHERE key = ANY($1) ORDER BY key FOR UPDATE`
	// updateRecord writes a row the transaction holds locked.
	updateRecord = `UPDATE ratekeeper_records SET value = $2, version = $3, updated_at = $4, checksum = $5 WHERE key = $1`
	// insertRecord creates an absent key; a client that lost the race to
	// create it fails with a unique violation and starts over.
	insertRecord = `INSERT INTO ratekeeper_records (key, value, version, updated_at, checksum) VALUES ($1, $2, 1, $3, $4)`
	// insertRecordOnce is Update's: one that lost the race inserts nothing
	// and starts over, now finding a row to lock.
	insertRecordOnce = insertRecord + ` ON CONFLICT (key) DO NOTHING`
	// getBlob moves a hit to the front of the LRU order as it reads it.
	getBlob = `UPDATE ratekeeper_blobs SET last_used = nextval('ratekeeper_blob_clock') WHERE key = $1 RETURNING value, checksum`
)
