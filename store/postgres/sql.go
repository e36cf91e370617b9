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
	Migrations: migrations,
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
	{ // version 3: the blob total in 32 shards kept by triggers; last_used in Unix milliseconds
		`ALTER TABLE ratekeeper_blobs ADD COLUMN shard integer NOT NULL DEFAULT 0`,
		`DROP TABLE ratekeeper_blob_usage`,
		`DROP SEQUENCE ratekeeper_blob_clock`,
		`CREATE TABLE ratekeeper_blob_usage (shard integer PRIMARY KEY, total bigint NOT NULL)`,
		`INSERT INTO ratekeeper_blob_usage (shard, total) SELECT n, 0 FROM generate_series(0, 31) AS n`,
		// The blobs there are counted in shard 0, where they say they are;
		// their old LRU clock values are far below any time in
		// milliseconds, so they go first, in their old order.
		`UPDATE ratekeeper_blob_usage SET total = (SELECT coalesce(sum(size), 0) FROM ratekeeper_blobs) WHERE shard = 0`,
		// The functions keep the migration's search_path, so an operator's
		// statement on the blobs from a connection that names the schema
		// differently still counts in this schema's usage rows.
		`
CREATE FUNCTION ratekeeper_count_blob() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
	IF TG_OP IN ('DELETE', 'UPDATE') THEN
		UPDATE ratekeeper_blob_usage SET total = total - OLD.size WHERE shard = OLD.shard;
	END IF;
	IF TG_OP IN ('INSERT', 'UPDATE') THEN
		UPDATE ratekeeper_blob_usage SET total = total + NEW.size WHERE shard = NEW.shard;
	END IF;
	RETURN NULL;
END $$`,
		`
CREATE TRIGGER ratekeeper_blob_counted AFTER INSERT OR DELETE OR UPDATE OF size, shard ON ratekeeper_blobs
FOR EACH ROW EXECUTE FUNCTION ratekeeper_count_blob()`,
		// TRUNCATE fires no row trigger; it locks the whole table, so no
		// write runs beside this reset.
		`
CREATE FUNCTION ratekeeper_blobs_truncated() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
	UPDATE ratekeeper_blob_usage SET total = 0;
	RETURN NULL;
END $$`,
		`
CREATE TRIGGER ratekeeper_blobs_truncated AFTER TRUNCATE ON ratekeeper_blobs
FOR EACH STATEMENT EXECUTE FUNCTION ratekeeper_blobs_truncated()`,
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
)
