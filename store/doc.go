// Package store keeps ratekeeper's shared state (bucket state, credential
// state, cached response bodies) behind one atomic contract:
//
//	err := s.Update(ctx, key, func(rec *store.Record) error {
//		// read rec.Value, compute, leave the new value in rec.Value
//		return nil
//	})
//
// Values are opaque bytes: callers encode them, and the pacing formula lives
// in package quota, never here. A store only makes each read-modify-write
// atomic, so that goroutines, processes and machines sharing one database
// never lose an update.
//
// # The tree
//
// Package store holds the interfaces ([Store], [Blobs]) and [Open], the
// one place that reads a connection string ([KindOf], [SQLitePath],
// [Redact]: the task queue asks them too). It imports none of the stores
// below: each registers a [Driver] from init, as database/sql's drivers
// do, and store/all links all three. What a fleet needs beyond one
// atomic update is offered by the stores through optional interfaces:
// [Snapshot] (read many keys without locks, to decide before locking),
// [Clock] (the database's time, the one clock a fleet shares) and
// [Notifier] with [WithNotification] (wake other processes at a commit).
// Below it:
//
//   - store/memory: in this process's memory; updates are atomic among its
//     goroutines and everything is gone when the process exits. It suits a
//     library user with a single client.
//   - store/sqlite: a file shared by every process on one machine (WAL
//     journal, busy timeout); Update is one immediate transaction that takes
//     the write lock before it reads. It also opens SQLite for the task
//     queue (OpenDB) and checks a damaged file (Check).
//   - store/postgres: a PostgreSQL database shared by many machines; Update
//     locks the key's row (SELECT ... FOR UPDATE).
//   - store/storetest: the suite every store passes, by area.
//   - store/quotastate: the transport's quota state (transport.State) kept
//     in a store.
//   - store/all: imported for its effect, it registers memory, sqlite and
//     postgres.
//
// Each SQL store keeps its SQL in its sql.go: its statement table, where it
// differs from the other database, and its migrations; what both share is
// written once (store/internal/core, which also holds the code both run).
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
// [*SchemaTooNewError] ("database schema version 4 is newer than this
// ratekeeper supports (3); upgrade ratekeeper"): an older binary never writes
// to tables it does not understand. Migrations only ever move forward.
//
// # Damaged rows
//
// Every row carries a CRC-32C checksum of its key and value. A row that does
// not read back as written (checksum mismatch, or in SQLite a column holding
// the wrong type) is treated as absent by Get, List, Update and GetBlob, and
// logged once per key through Options.Logger; the next Update sees the key
// as absent and so rebuilds it from the next response.
//
// # Blobs
//
// Every store also has a blob table ([Blobs]) for the conditional-request
// cache: values bounded in total size by Options.BlobLimit, the least
// recently used evicted first. In the SQL stores no lock is global: the
// total is split over 32 rows kept exact by triggers, a put locks its own
// row and one of them, and a hit is a plain read that records the use only
// when the recorded one is older than [BlobUseGranularity]; eviction
// follows least recent use at that granularity.
//
// # Keys
//
// Keys are non-empty, valid UTF-8 without NUL bytes, and at most [MaxKeyLen]
// bytes; List sorts them in byte order. Keys appear in logs and errors, so a
// key must never contain a secret such as a token.
//
// Layer 1 of docs/architecture.md: it owns atomic shared records and blobs,
// and must not hold pacing logic or know what a value means.
package store
