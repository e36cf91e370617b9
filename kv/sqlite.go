package kv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/sqlitedb"
)

// SQLite is a Store in a SQLite file, shared by every process on the machine
// that opens the same file. Each Update is one immediate transaction: it
// takes the database's write lock before reading, so concurrent writers
// (goroutines or processes) queue instead of failing, and a process that
// dies mid-update leaves the previous value in place.
type SQLite struct {
	opts    Options
	closed  closedFlag
	corrupt *corruptionLog
	// write has a single connection: this process's writers queue on it
	// in Go instead of sleeping in SQLite's busy handler, which only has
	// to arbitrate between processes.
	write *sql.DB
	// read serves Get and List; in WAL mode readers never wait for the
	// writer.
	read *sql.DB
	// The hot statements are parsed once per connection, not once per
	// call: parsing was a quarter of an update's time.
	writeStmts, readStmts stmtCache
}

// stmtCache holds statements prepared on one database handle, by text.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[query] = st
	return st, nil
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		st.Close()
	}
	c.m = nil
}

// writeStmts prepares the statements an update of n keys runs. It must
// be called before the update's transaction begins: preparing needs the
// single write connection, which the transaction then holds.
func (s *SQLite) updateStmts(ctx context.Context, n int) (sqliteUpdateStmts, error) {
	var u sqliteUpdateStmts
	var err error
	if u.read, err = s.writeStmts.get(ctx, `SELECT key, value, version, updated_at, checksum FROM ratekeeper_records WHERE key IN (?`+
		strings.Repeat(", ?", n-1)+`)`); err != nil {
		return u, err
	}
	if u.upsert, err = s.writeStmts.get(ctx, sqliteUpsert); err != nil {
		return u, err
	}
	u.delete, err = s.writeStmts.get(ctx, `DELETE FROM ratekeeper_records WHERE key = ?`)
	return u, err
}

// sqliteUpdateStmts are the prepared statements of one update.
type sqliteUpdateStmts struct{ read, upsert, delete *sql.Stmt }

// sqliteReaders is how many connections serve reads concurrently.
const sqliteReaders = 4

// OpenSQLite opens the store in the SQLite file at path, creating the file
// and migrating its schema as needed (see the package doc).
func OpenSQLite(ctx context.Context, path string, opts Options) (*SQLite, error) {
	return openSQLite(ctx, path, opts, SchemaVersion)
}

// openSQLite opens the store and migrates its schema up to version target
// (tests create old databases with a target below SchemaVersion).
func openSQLite(ctx context.Context, path string, opts Options, target int) (*SQLite, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if p := strings.TrimPrefix(strings.TrimPrefix(path, "sqlite://"), "file:"); p == ":memory:" || strings.HasPrefix(p, ":memory:?") {
		return nil, fmt.Errorf("store: SQLite %q is private to one connection and cannot be shared; use \"memory\" for an in-memory store or a file path", path)
	}
	write, err := sqlitedb.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxIdleTime(0)
	write.SetConnMaxLifetime(0)
	if err := migrateSQLite(ctx, write, target); err != nil {
		write.Close()
		return nil, fmt.Errorf("store: SQLite %s: %w", path, err)
	}
	read, err := sqlitedb.Open(ctx, path)
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	read.SetMaxOpenConns(sqliteReaders)
	read.SetMaxIdleConns(sqliteReaders)
	st := &SQLite{opts: opts, corrupt: newCorruptionLog(opts.Logger), write: write, read: read}
	st.writeStmts.db, st.readStmts.db = write, read
	return st, nil
}

// migrateSQLite brings the schema to version target. The write lock taken by
// the immediate transaction makes concurrent openers take turns: the second
// one finds the work done.
func migrateSQLite(ctx context.Context, db *sql.DB, target int) error {
	// Fast path, without the write lock: most opens find the schema current.
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, schemaTable).Scan(&tables); err != nil {
		return fmt.Errorf("reading the schema version: %w", err)
	}
	if tables == 1 {
		found, err := sqliteVersion(ctx, db)
		if err != nil {
			return err
		}
		if err := checkVersion(found); err != nil {
			return err
		}
		if found >= target {
			return nil
		}
	}

	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (see sqlitedb)
	if err != nil {
		return fmt.Errorf("locking the database to migrate its schema: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS ratekeeper_schema (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("creating %s: %w", schemaTable, err)
	}
	found, err := sqliteVersion(ctx, tx)
	if err != nil {
		return err
	}
	if err := checkVersion(found); err != nil {
		return err
	}
	for _, m := range pending(found, target) {
		for _, stmt := range m.sqlite {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migrating the schema to version %d: %w", m.version, err)
			}
		}
		found = m.version
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO ratekeeper_schema (id, version) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET version = excluded.version`, found); err != nil {
		return fmt.Errorf("recording schema version %d: %w", found, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing the schema migration: %w", err)
	}
	return nil
}

type sqlQueryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// sqliteVersion reads the schema version; a missing row is version 0.
func sqliteVersion(ctx context.Context, q sqlQueryer) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, `SELECT version FROM ratekeeper_schema WHERE id = 1`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the schema version: %w", err)
	}
	return v, nil
}

func (s *SQLite) begin(key string) error {
	if err := s.closed.check(); err != nil {
		return err
	}
	return ValidateKey(key)
}

// Update implements Store.
func (s *SQLite) Update(ctx context.Context, key string, fn func(rec *Record) error) error {
	if err := s.begin(key); err != nil {
		return err
	}
	stmts, err := s.updateStmts(ctx, 1)
	if err != nil {
		return fmt.Errorf("store: update %q: %w", key, err)
	}
	tx, err := s.write.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock before the read
	if err != nil {
		return fmt.Errorf("store: update %q: %w", key, err)
	}
	defer tx.Rollback()
	rec, exists, err := s.readRecord(ctx, tx, key)
	if err != nil {
		return fmt.Errorf("store: update %q: %w", key, err)
	}
	version := rec.Version
	if err := fn(&rec); err != nil {
		return err
	}
	if rec.Value == nil && !exists {
		return nil // deleting what is not there
	}
	err = s.writeRecord(ctx, tx, stmts, key, rec.Value, version)
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return fmt.Errorf("store: update %q: %w", key, err)
	}
	s.corrupt.written(recordsTable, key)
	return nil
}

// writeRecord writes value under key in tx as the version after version (a
// nil value deletes the key).
func (s *SQLite) writeRecord(ctx context.Context, tx *sql.Tx, stmts sqliteUpdateStmts, key string, value []byte, version int64) error {
	if value == nil {
		_, err := tx.StmtContext(ctx, stmts.delete).ExecContext(ctx, key)
		return err
	}
	_, err := tx.StmtContext(ctx, stmts.upsert).ExecContext(ctx, key, nonNil(value), version+1, s.opts.now().UnixNano(), checksum(key, value))
	return err
}

const sqliteUpsert = `
INSERT INTO ratekeeper_records (key, value, version, updated_at, checksum) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET value = excluded.value, version = excluded.version,
	updated_at = excluded.updated_at, checksum = excluded.checksum`

// UpdateMany implements Store: one immediate transaction reads every key
// with one query and writes only the records that changed.
func (s *SQLite) UpdateMany(ctx context.Context, keys []string, fn func(recs []*Record) error) error {
	if err := s.closed.check(); err != nil {
		return err
	}
	if err := validateKeys(keys); err != nil {
		return err
	}
	stmts, err := s.updateStmts(ctx, len(keys))
	if err != nil {
		return fmt.Errorf("store: update %q: %w", keys, err)
	}
	tx, err := s.write.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock before the read
	if err != nil {
		return fmt.Errorf("store: update %q: %w", keys, err)
	}
	defer tx.Rollback()
	recs, exists, err := s.readRecords(ctx, tx, stmts.read, keys)
	if err != nil {
		return fmt.Errorf("store: update %q: %w", keys, err)
	}
	olds := make([]Record, len(recs))
	for i, r := range recs {
		olds[i] = *r
		r.Value = cloneBytes(r.Value) // fn may scribble on it
	}
	if err := fn(recs); err != nil {
		return err
	}
	var written []string
	for i, r := range recs {
		if !changed(olds[i].Value, exists[i], r.Value) {
			continue
		}
		if err := s.writeRecord(ctx, tx, stmts, keys[i], r.Value, olds[i].Version); err != nil {
			return fmt.Errorf("store: update %q: %w", keys[i], err)
		}
		written = append(written, keys[i])
	}
	if len(written) == 0 {
		return nil
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: update %q: %w", keys, err)
	}
	for _, k := range written {
		s.corrupt.written(recordsTable, k)
	}
	return nil
}

// readRecords reads the records of keys in one query, in the order of
// keys; exists[i] reports a row for keys[i], even a corrupted one, which
// is returned as absent.
func (s *SQLite) readRecords(ctx context.Context, tx *sql.Tx, read *sql.Stmt, keys []string) ([]*Record, []bool, error) {
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	rows, err := tx.StmtContext(ctx, read).QueryContext(ctx, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	recs := make([]*Record, len(keys))
	exists := make([]bool, len(keys))
	for i, k := range keys {
		recs[i] = &Record{Key: k}
	}
	for rows.Next() {
		var key string
		var value, version, updated, sum any
		if err := rows.Scan(&key, &value, &version, &updated, &sum); err != nil {
			return nil, nil, err
		}
		i := slices.Index(keys, key)
		if i < 0 {
			continue
		}
		exists[i] = true
		rec, problem := decodeSQLiteRecord(key, value, version, updated, sum)
		if problem != "" {
			s.corrupt.report(recordsTable, key, problem)
			continue
		}
		*recs[i] = rec
	}
	return recs, exists, rows.Err()
}

// readRecord reads key's record. exists reports whether a row is there, even
// a corrupted one, which is returned as absent.
func (s *SQLite) readRecord(ctx context.Context, q sqlQueryer, key string) (rec Record, exists bool, err error) {
	var value, version, updated, sum any
	err = q.QueryRowContext(ctx, `SELECT value, version, updated_at, checksum FROM ratekeeper_records WHERE key = ?`, key).
		Scan(&value, &version, &updated, &sum)
	if errors.Is(err, sql.ErrNoRows) {
		return Record{Key: key}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	rec, problem := decodeSQLiteRecord(key, value, version, updated, sum)
	if problem != "" {
		s.corrupt.report(recordsTable, key, problem)
		return Record{Key: key}, true, nil
	}
	return rec, true, nil
}

// decodeSQLiteRecord checks a row's columns. SQLite lets any column hold any
// type, so a damaged row may hold text where a number belongs; problem says
// what is wrong, or is empty for a good row.
func decodeSQLiteRecord(key string, value, version, updated, sum any) (rec Record, problem string) {
	v, ok := value.([]byte)
	if !ok {
		if s, isText := value.(string); isText {
			v = []byte(s) // the checksum decides whether the bytes are right
		} else {
			return Record{}, fmt.Sprintf("value is %T, want bytes", value)
		}
	}
	ver, ok := version.(int64)
	if !ok || ver < 1 {
		return Record{}, fmt.Sprintf("version is %T %v, want a positive integer", version, version)
	}
	nanos, ok := updated.(int64)
	if !ok {
		return Record{}, fmt.Sprintf("updated_at is %T %v, want Unix nanoseconds", updated, updated)
	}
	got, ok := sum.(int64)
	if !ok {
		return Record{}, fmt.Sprintf("checksum is %T %v, want an integer", sum, sum)
	}
	if want := checksum(key, v); got != want {
		return Record{}, fmt.Sprintf("checksum %d does not match the value (want %d)", got, want)
	}
	return Record{Key: key, Value: nonNil(v), Version: ver, UpdatedAt: time.Unix(0, nanos).UTC()}, ""
}

// Get implements Store.
func (s *SQLite) Get(ctx context.Context, key string) (Record, error) {
	if err := s.begin(key); err != nil {
		return Record{}, err
	}
	rec, _, err := s.readRecord(ctx, s.read, key)
	if err != nil {
		return Record{}, fmt.Errorf("store: get %q: %w", key, err)
	}
	if rec.Value == nil {
		return Record{}, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	return rec, nil
}

// List implements Store.
func (s *SQLite) List(ctx context.Context, prefix string) ([]Record, error) {
	if err := s.closed.check(); err != nil {
		return nil, err
	}
	if err := validatePrefix(prefix, "prefix"); err != nil {
		return nil, err
	}
	query, args := `SELECT key, value, version, updated_at, checksum FROM ratekeeper_records WHERE key >= ?`, []any{prefix}
	if end, ok := prefixEnd(prefix); ok {
		query, args = query+` AND key < ?`, append(args, end)
	}
	rows, err := s.read.QueryContext(ctx, query+` ORDER BY key`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list %q: %w", prefix, err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var key string
		var value, version, updated, sum any
		if err := rows.Scan(&key, &value, &version, &updated, &sum); err != nil {
			return nil, fmt.Errorf("store: list %q: %w", prefix, err)
		}
		rec, problem := decodeSQLiteRecord(key, value, version, updated, sum)
		if problem != "" {
			s.corrupt.report(recordsTable, key, problem)
			continue
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list %q: %w", prefix, err)
	}
	return out, nil
}

// sqliteNextUse is the LRU clock: one past the most recent use. It is exact
// because every blob write holds the database's write lock.
const sqliteNextUse = `(SELECT coalesce(max(last_used), 0) + 1 FROM ratekeeper_blobs)`

// GetBlob implements Blobs. It reads on a reader connection, so a miss
// writes nothing; a hit then moves the blob to the front of the LRU order,
// which is a write.
func (s *SQLite) GetBlob(ctx context.Context, key string) ([]byte, bool, error) {
	if err := s.begin(key); err != nil {
		return nil, false, err
	}
	var value, sum any
	st, err := s.readStmts.get(ctx, `SELECT value, checksum FROM ratekeeper_blobs WHERE key = ?`)
	if err == nil {
		err = st.QueryRowContext(ctx, key).Scan(&value, &sum)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("store: get blob %q: %w", key, err)
	}
	if _, err := s.write.ExecContext(ctx, `UPDATE ratekeeper_blobs SET last_used = `+sqliteNextUse+` WHERE key = ?`, key); err != nil {
		return nil, false, fmt.Errorf("store: get blob %q: %w", key, err)
	}
	v, ok := value.([]byte)
	if !ok {
		s.corrupt.report(blobsTable, key, fmt.Sprintf("value is %T, want bytes", value))
		return nil, false, nil
	}
	if got, ok := sum.(int64); !ok || got != checksum(key, v) {
		s.corrupt.report(blobsTable, key, fmt.Sprintf("checksum %v does not match the value", sum))
		return nil, false, nil
	}
	return nonNil(v), true, nil
}

// PutBlob implements Blobs.
func (s *SQLite) PutBlob(ctx context.Context, key string, value []byte) error {
	if err := s.begin(key); err != nil {
		return err
	}
	var tooLarge error
	err := s.blobTx(ctx, func(tx sqliteBlobTx) (err error) {
		tooLarge, err = putBlobIn(ctx, tx, key, value, s.opts.BlobLimit)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: put blob %q: %w", key, err)
	}
	s.corrupt.written(blobsTable, key)
	return tooLarge
}

// DeleteBlob implements Blobs.
func (s *SQLite) DeleteBlob(ctx context.Context, key string) error {
	if err := s.begin(key); err != nil {
		return err
	}
	if err := s.blobTx(ctx, func(tx sqliteBlobTx) error { return deleteBlobIn(ctx, tx, key) }); err != nil {
		return fmt.Errorf("store: delete blob %q: %w", key, err)
	}
	return nil
}

// blobTx runs fn in an immediate transaction and commits if fn succeeds.
func (s *SQLite) blobTx(ctx context.Context, fn func(sqliteBlobTx) error) error {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(sqliteBlobTx{tx}); err != nil {
		return err
	}
	return tx.Commit()
}

// sqliteBlobTx implements blobTx.
type sqliteBlobTx struct{ tx *sql.Tx }

func (t sqliteBlobTx) usage(ctx context.Context) (total int64, err error) {
	err = t.tx.QueryRowContext(ctx, `SELECT total FROM ratekeeper_blob_usage WHERE id = 1`).Scan(&total)
	return total, err
}

func (t sqliteBlobTx) setUsage(ctx context.Context, total int64) error {
	_, err := t.tx.ExecContext(ctx, `UPDATE ratekeeper_blob_usage SET total = ? WHERE id = 1`, total)
	return err
}

func (t sqliteBlobTx) remove(ctx context.Context, key string) (int64, error) {
	var size int64
	err := t.tx.QueryRowContext(ctx, `DELETE FROM ratekeeper_blobs WHERE key = ? RETURNING size`, key).Scan(&size)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return size, err
}

func (t sqliteBlobTx) removeOldest(ctx context.Context) (int64, bool, error) {
	var size int64
	err := t.tx.QueryRowContext(ctx, `
DELETE FROM ratekeeper_blobs WHERE key = (SELECT key FROM ratekeeper_blobs ORDER BY last_used LIMIT 1)
RETURNING size`).Scan(&size)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return size, err == nil, err
}

func (t sqliteBlobTx) insert(ctx context.Context, key string, value []byte, size int64) error {
	_, err := t.tx.ExecContext(ctx, `INSERT INTO ratekeeper_blobs (key, value, size, last_used, checksum) VALUES (?, ?, ?, `+sqliteNextUse+`, ?)`,
		key, value, size, checksum(key, value))
	return err
}

// Close implements Store.
func (s *SQLite) Close() error {
	if !s.closed.close() {
		return nil
	}
	s.readStmts.close()
	s.writeStmts.close()
	return errors.Join(s.read.Close(), s.write.Close())
}

// nonNil turns a nil slice into an empty one, so that an empty value is
// stored as an empty BLOB rather than NULL and a present record never has a
// nil Value.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
