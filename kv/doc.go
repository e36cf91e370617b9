// Package kv keeps ratekeeper's shared state (bucket state, credential
// state, cached response bodies) behind one atomic contract:
//
//	err := s.Update(ctx, key, func(rec *kv.Record) error {
//		// read rec.Value, compute, leave the new value in rec.Value
//		return nil
//	})
//
// Values are opaque bytes: callers encode them, and the pacing formula lives
// in package quota, never here. A store only makes each read-modify-write
// atomic, so that goroutines, processes and machines sharing one database
// never lose an update.
//
// # Implementations
//
// [Memory] ([NewMemory]) lives in one process: updates are atomic among its
// goroutines and everything is gone when the process exits. It suits a
// library user with a single client.
//
// [SQLite] ([OpenSQLite]) lives in a file shared by every process on one
// machine, opened through internal/sqlitedb (WAL journal, busy timeout).
// Update is one immediate transaction: it takes the write lock before it
// reads, so concurrent writers queue rather than fail; writers in one process
// queue on a single connection, processes wait for each other for up to the
// busy timeout. State survives restarts. A process killed in the middle of
// an Update leaves the previous value, and the operating system releases its
// lock at once. Commits are not flushed to disk one by one (synchronous =
// NORMAL): a power cut may lose the last moments of updates, never the
// database's consistency — fine for state that the next response rebuilds.
// Do not put the file on a network file system: SQLite's locks need a local
// one.
//
// [Postgres] ([OpenPostgres]) lives in a PostgreSQL database shared by many
// machines. Update locks the key's row (SELECT ... FOR UPDATE; an absent key
// is inserted with ON CONFLICT DO NOTHING and the update retried if another
// client won the race), so updates of one key serialize across the fleet and
// different keys proceed in parallel. A client that dies mid-update loses
// its connection and PostgreSQL rolls the update back; a client whose
// machine vanishes without closing its connection holds the row for at most
// idle_in_transaction_session_timeout, which the store sets to 30 s unless the
// DSN sets it. An Update takes two round trips (BEGIN with the locking read,
// then the write with COMMIT). Other DSN parameters are passed to the server
// as session settings: search_path picks the schema the tables live in, and
// synchronous_commit=off roughly doubles how many updates per second one hot
// key takes, at the price of losing the last fraction of a second of updates
// if the database server crashes.
//
// # Picking one
//
// [Open] picks by the DSN, the same string as the CLI's --db: "" or "memory"
// for memory, a postgres:// or postgresql:// URL for PostgreSQL, and anything
// else is a SQLite file path ("sqlite://" and "file:" prefixes are allowed).
// Use SQLite when every process runs on one machine (the CLI's default,
// ./ratekeeper.db), PostgreSQL when processes on several machines share
// credentials, memory when nothing else shares them.
//
// # Tables and schema versions
//
// The SQL stores' tables all start with "ratekeeper_" so that they share a
// database with River's "river_" tables. ratekeeper_schema holds the schema
// version. Opening a database migrates it to [SchemaVersion] automatically,
// in one transaction, and two processes opening at once take turns (SQLite's
// write lock, a PostgreSQL advisory lock), so the second finds the work done.
// A database at a newer version than this build knows is refused with a
// [*SchemaTooNewError] ("database schema version 3 is newer than this
// ratekeeper supports (2); upgrade ratekeeper"): an older binary never writes
// to tables it does not understand. Migrations only ever move forward.
//
// # Damaged rows
//
// Every row carries a CRC-32C checksum of its key and value. A row that does
// not read back as written (checksum mismatch, or in SQLite a column holding
// the wrong type) is treated as absent by Get, List, Update and GetBlob, and
// logged once per key through [Options.Logger]; the next Update sees the key
// as absent and so rebuilds it from the next response.
//
// # Blobs
//
// Every store also has a blob table ([Blobs]) for the conditional-request
// cache: values bounded in total size by [Options.BlobLimit], the least
// recently used evicted first.
//
// # Keys
//
// Keys are non-empty, valid UTF-8 without NUL bytes, and at most [MaxKeyLen]
// bytes; List sorts them in byte order. Keys appear in logs and errors, so a
// key must never contain a secret such as a token.
//
// The package kv/kvtest holds the test suite every implementation
// passes.
//
// Layer 1 of docs/architecture.md: it owns atomic shared records and blobs,
// and must not hold pacing logic or know what a value means.
package kv
