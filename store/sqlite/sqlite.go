// Package sqlite is the store (store.Store) in a SQLite file, shared by
// every process on one machine that opens the same file, and the one way
// ratekeeper opens SQLite (OpenDB, which River's tasks use too) and checks
// a file (Check). Its SQL is in sql.go.
//
// Each Update is one immediate transaction: it takes the database's write
// lock before reading, so concurrent writers (goroutines or processes)
// queue instead of failing; writers in one process queue on a single
// connection, processes wait for each other for up to the busy timeout. A
// process killed in the middle of an Update leaves the previous value, and
// the operating system releases its lock at once. Commits are not flushed
// to disk one by one (synchronous = NORMAL): a power cut may lose the last
// moments of updates, never the database's consistency — fine for state
// that the next response rebuilds. Do not put the file on a network file
// system: SQLite's locks need a local one.
//
// Layer 2 of docs/architecture.md: above package store, with which it registers.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/ratekeeper/ratekeeper/store/internal/core"
)

// Store is a store.Store in a SQLite file. Its methods are core.Store's,
// shared with PostgreSQL; what SQLite does its own way is transact and
// readBlob below.
type Store struct {
	*base
	shared *core.SQL
	// write has a single connection: this process's writers queue on it
	// in Go instead of sleeping in SQLite's busy handler, which only has
	// to arbitrate between processes.
	write *sql.DB
	// read serves Get and List; in WAL mode readers never wait for the
	// writer.
	read *sql.DB
	// watch holds the connection each Listen polls on, apart from read:
	// a listener keeps its connection for as long as someone waits, and
	// taken from read's few, listeners of several States on one Store
	// left the decisions' reads none (a read then waited for a listener
	// to let go, with a fleet's answers unread meanwhile).
	watch *sql.DB
	// The hot statements are parsed once per connection, not once per
	// call: parsing was a quarter of an update's time.
	writeStmts, readStmts stmtCache
}

// base is core.Store under a name of this package's, so that embedding it
// promotes store.Store's methods and no exported field.
type base = core.Store

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

// updateStmts prepares the statements an update of n keys runs. It must
// be called before the update's transaction begins: preparing needs the
// single write connection, which the transaction then holds.
func (s *Store) updateStmts(ctx context.Context, n int) (updateStmts, error) {
	var u updateStmts
	var err error
	read := statements.GetRecord // one key (every Update): the plain lookup
	if n > 1 {
		read = selectRecords(n)
	}
	if u.read, err = s.writeStmts.get(ctx, read); err != nil {
		return u, err
	}
	if u.upsert, err = s.writeStmts.get(ctx, upsertRecord); err != nil {
		return u, err
	}
	u.delete, err = s.writeStmts.get(ctx, statements.DeleteRecord)
	return u, err
}

// updateStmts are the prepared statements of one update.
type updateStmts struct{ read, upsert, delete *sql.Stmt }

// readers is how many connections serve reads concurrently.
const readers = 4

// Open opens the store in the SQLite file at path (a plain path:
// store.Open reads the --db string), creating the file and migrating its
// schema as needed.
func Open(ctx context.Context, path string, opts core.Options) (*Store, error) {
	return open(ctx, path, opts, core.SchemaVersion)
}

// open opens the store and migrates its schema up to version target
// (tests create old databases with a target below SchemaVersion).
func open(ctx context.Context, path string, opts core.Options, target int) (*Store, error) {
	opts, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	if path == ":memory:" || strings.HasPrefix(path, ":memory:?") {
		return nil, fmt.Errorf("store: SQLite %q is private to one connection and cannot be shared; use \"memory\" for an in-memory store or a file path", path)
	}
	write, err := OpenDB(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxIdleTime(0)
	write.SetConnMaxLifetime(0)
	if err := statements.Migrate(ctx, db{write}, target); err != nil {
		write.Close()
		return nil, fmt.Errorf("store: SQLite %s: %w", path, err)
	}
	read, err := OpenDB(ctx, path)
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	read.SetMaxOpenConns(readers)
	read.SetMaxIdleConns(readers)
	watch, err := OpenDB(ctx, path)
	if err != nil {
		write.Close()
		read.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	st := &Store{write: write, read: read, watch: watch}
	st.writeStmts.db, st.readStmts.db = write, read
	blobWriter, err := st.prepareBlobWrites(ctx, target)
	if err != nil {
		st.release()
		return nil, fmt.Errorf("store: SQLite %s: %w", path, err)
	}
	st.shared = core.NewSQL(statements, opts, conn{read}, blobWriter)
	st.base = core.NewStore(st.shared, core.Dialect{Transact: st.transact, ReadBlob: st.readBlob, Release: st.release})
	return st, nil
}

// transact is core.Dialect's Transact: one immediate transaction reads
// every key with one query and writes what fn says must be written.
func (s *Store) transact(ctx context.Context, keys []string, fn core.UpdateFn) (written []string, fnErr, err error) {
	stmts, err := s.updateStmts(ctx, len(keys))
	if err != nil {
		return nil, nil, err
	}
	tx, err := s.write.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock before the read
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback()
	recs, exists, err := s.readRecords(ctx, tx.StmtContext(ctx, stmts.read), keys)
	if err != nil {
		return nil, nil, err
	}
	olds := core.Before(recs)
	all, err := fn(recs, exists)
	if err != nil {
		return nil, err, nil
	}
	for i, r := range recs {
		if !core.MustWrite(all, olds[i].Value, exists[i], r.Value) {
			continue
		}
		if err := s.writeRecord(ctx, tx, stmts, keys[i], r.Value, olds[i].Version); err != nil {
			return nil, nil, err
		}
		written = append(written, keys[i])
	}
	if len(written) == 0 {
		return nil, nil, nil
	}
	if err := tx.Commit(); err != nil {
		return nil, nil, err
	}
	return written, nil, nil
}

// readRecords reads the records of keys with stmt, in the order of keys;
// exists[i] reports a row for keys[i], even a corrupted one, which is
// returned as absent.
func (s *Store) readRecords(ctx context.Context, stmt *sql.Stmt, keys []string) (recs []*core.Record, exists []bool, err error) {
	if len(keys) == 1 {
		var rec core.Record
		recs, exists = []*core.Record{&rec}, make([]bool, 1)
		rec, exists[0], err = s.shared.ReadRecord(keys[0], stmt.QueryRowContext(ctx, keys[0]))
		return recs, exists, err
	}
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	rows, err := stmt.QueryContext(ctx, args...)
	if err != nil {
		return nil, nil, err
	}
	return s.shared.ReadRecords(rows, keys)
}

// writeRecord writes value under key in tx as the version after version (a
// nil value deletes the key).
func (s *Store) writeRecord(ctx context.Context, tx *sql.Tx, stmts updateStmts, key string, value []byte, version int64) error {
	if value == nil {
		_, err := tx.StmtContext(ctx, stmts.delete).ExecContext(ctx, key)
		return err
	}
	_, err := tx.StmtContext(ctx, stmts.upsert).ExecContext(ctx, key, core.NonNil(value), version+1, s.shared.Opts.Stamp().UnixNano(), core.Checksum(key, value))
	return err
}

// readBlob is core.Dialect's ReadBlob, on a reader connection: in WAL
// mode it neither waits for nor blocks the writer.
func (s *Store) readBlob(ctx context.Context, key string) (value, sum, used any, err error) {
	st, err := s.readStmts.get(ctx, statements.SelectBlob)
	if err == nil {
		err = st.QueryRowContext(ctx, key).Scan(&value, &sum, &used)
	}
	return value, sum, used, err
}

// release is core.Dialect's Release.
func (s *Store) release() error {
	s.readStmts.close()
	s.writeStmts.close()
	return errors.Join(s.watch.Close(), s.read.Close(), s.write.Close())
}

// conn is a database/sql handle or transaction as core uses it.
type conn struct {
	q interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
		QueryRowContext(context.Context, string, ...any) *sql.Row
		QueryContext(context.Context, string, ...any) (*sql.Rows, error)
	}
}

func (c conn) Exec(ctx context.Context, query string, args ...any) error {
	_, err := c.q.ExecContext(ctx, query, args...)
	return err
}

func (c conn) QueryRow(ctx context.Context, query string, args ...any) core.Row {
	return c.q.QueryRowContext(ctx, query, args...)
}

func (c conn) Query(ctx context.Context, query string, args ...any) (core.Rows, error) {
	return c.q.QueryContext(ctx, query, args...)
}

// db is the write handle as core uses it: its transactions are immediate.
type db struct{ *sql.DB }

func (d db) Exec(ctx context.Context, query string, args ...any) error {
	return conn{d.DB}.Exec(ctx, query, args...)
}

func (d db) QueryRow(ctx context.Context, query string, args ...any) core.Row {
	return d.QueryRowContext(ctx, query, args...)
}

func (d db) Query(ctx context.Context, query string, args ...any) (core.Rows, error) {
	return d.QueryContext(ctx, query, args...)
}

func (d db) Begin(ctx context.Context) (core.Tx, error) {
	tx, err := d.BeginTx(ctx, nil) // BEGIN IMMEDIATE (see OpenDB)
	if err != nil {
		return nil, err
	}
	return txn{conn{tx}, tx}, nil
}

// txn is a transaction as core uses it.
type txn struct {
	conn
	tx *sql.Tx
}

func (t txn) Commit(context.Context) error   { return t.tx.Commit() }
func (t txn) Rollback(context.Context) error { return t.tx.Rollback() }
