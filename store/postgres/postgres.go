// Package postgres is the store (store.Store) in a PostgreSQL database,
// shared by every process on every machine that opens it. Its SQL is in
// sql.go.
//
// Update locks the key's row (SELECT ... FOR UPDATE; an absent key is
// inserted with ON CONFLICT DO NOTHING and the update retried if another
// client won the race), so updates of one key serialize across the fleet
// and different keys proceed in parallel. A client that dies mid-update
// loses its connection and PostgreSQL rolls the update back; a client
// whose machine vanishes without closing its connection holds the row for
// at most idle_in_transaction_session_timeout, which the store sets to 30 s
// unless the DSN sets it. An Update takes two round trips (BEGIN with the
// locking read, then the write with COMMIT). Other DSN parameters are
// passed to the server as session settings: search_path picks the schema
// the tables live in, and synchronous_commit=off (store.Options.Advisory
// sets it) roughly doubles how many updates per second one hot key takes,
// at the price of losing the last fraction of a second of updates if the
// database server crashes.
//
// Layer 2 of docs/architecture.md: above package store, with which it registers.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratekeeper/ratekeeper/store/internal/core"
)

// Store is a store.Store in a PostgreSQL database. Its methods are
// core.Store's, shared with SQLite; what PostgreSQL does its own way is
// transact and readBlob below.
type Store struct {
	*base
	shared *core.SQL
	pool   *pgxpool.Pool
}

// base is core.Store under a name of this package's, so that embedding it
// promotes store.Store's methods and no exported field.
type base = core.Store

// idleInTransactionTimeout ends the session of a client that vanished (a
// machine gone without closing its sockets) while it held a row lock, so the
// fleet waits at most this long. An Update never idles in its transaction
// longer than its fn takes. A DSN that sets the parameter wins.
const idleInTransactionTimeout = 30 * time.Second

// maxAttempts bounds how often Update retries after a conflict.
const maxAttempts = 20

// Open opens the store in the PostgreSQL database named by dsn (a
// postgres:// URL or key=value string, as pgx accepts; a search_path
// parameter picks the schema), migrating its schema as needed.
func Open(ctx context.Context, dsn string, opts core.Options) (*Store, error) {
	return open(ctx, dsn, opts, core.SchemaVersion)
}

// open opens the store and migrates its schema up to version target.
func open(ctx context.Context, dsn string, opts core.Options, target int) (*Store, error) {
	opts, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn) // its errors mask the password
	if err != nil {
		return nil, fmt.Errorf("store: PostgreSQL DSN: %w", err)
	}
	params := cfg.ConnConfig.RuntimeParams
	if _, set := params["idle_in_transaction_session_timeout"]; !set {
		params["idle_in_transaction_session_timeout"] = fmt.Sprint(idleInTransactionTimeout.Milliseconds())
	}
	if _, set := params["synchronous_commit"]; opts.Advisory && !set {
		params["synchronous_commit"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: PostgreSQL: %w", err)
	}
	if err := statements.Migrate(ctx, db{conn{pool}, pool}, target); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: PostgreSQL %s: %w", describe(cfg), err)
	}
	st := &Store{shared: core.NewSQL(statements, opts, conn{pool}, db{conn{pool}, pool}), pool: pool}
	st.base = core.NewStore(st.shared, core.Dialect{Transact: st.transact, ReadBlob: st.readBlob, Release: st.release})
	return st, nil
}

// DatabaseNow implements store.Clock: the server's clock_timestamp(),
// the time when the statement runs (now() would be the start of a
// transaction).
func (s *Store) DatabaseNow(ctx context.Context) (time.Time, error) {
	if err := s.shared.Closed.Check(); err != nil {
		return time.Time{}, err
	}
	var t time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("store: database time: %w", err)
	}
	return t, nil
}

// describe names the database for messages, without the password.
func describe(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return fmt.Sprintf("database %q on %s:%d as %q", c.Database, c.Host, c.Port, c.User)
}

// errConflict means another client inserted the key between our read
// (which found nothing to lock) and our insert: read again.
var errConflict = errors.New("concurrent insert")

// transact is core.Dialect's Transact: attempts at the update until one
// commits, fn fails, or an error other than a lost race ends it. The
// locking read takes every existing row of keys in key order, the same
// order in every transaction. An absent key is inserted: by Update with ON
// CONFLICT DO NOTHING, which does nothing when another client won the race
// to create it; by UpdateMany without, so that one that lost the race fails
// with a unique violation. Either rolls back and starts over, now finding
// the row to lock.
func (s *Store) transact(ctx context.Context, keys []string, fn core.UpdateFn) (written []string, fnErr, err error) {
	for range maxAttempts {
		written, fnErr, err = s.updateOnce(ctx, keys, fn)
		if fnErr != nil || !retryable(err) {
			break
		}
	}
	return written, fnErr, err
}

// updateOnce makes one attempt at an update. fnErr is fn's error, returned
// unchanged; err is the database's. It returns the keys it wrote.
//
// It takes two round trips to the server, not four: BEGIN is pipelined with
// the locking read, and the writes with COMMIT, which also shortens the time
// the rows stay locked.
func (s *Store) updateOnce(ctx context.Context, keys []string, fn core.UpdateFn) (written []string, fnErr, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	// Release destroys a connection still inside a transaction, which the
	// server then rolls back; endTx spares that on the expected paths.
	defer conn.Release()
	recs, exists, err := s.lock(ctx, conn, keys)
	if err != nil {
		return nil, nil, errors.Join(err, endTx(ctx, conn))
	}
	olds := core.Before(recs)
	all, err := fn(recs, exists)
	if err != nil {
		return nil, err, endTx(ctx, conn)
	}
	write, written, once := s.writes(keys, recs, olds, exists, all)
	if len(written) == 0 {
		return nil, nil, endTx(ctx, conn)
	}
	if n, ok := core.NotificationFrom(ctx); ok && (n.When == nil || n.When()) {
		// Sent at COMMIT, and only if it commits.
		write.Queue(`SELECT pg_notify($1, $2)`, n.Channel, n.Payload)
	}
	tags, err := commit(ctx, conn, write)
	if err != nil {
		return nil, nil, errors.Join(err, endTx(ctx, conn))
	}
	if once && tags[0].RowsAffected() == 0 {
		return nil, nil, errConflict
	}
	return written, nil, nil
}

// lock begins the transaction and reads the records of keys, locking their
// rows (in key order), into records in the order of keys; exists[i]
// reports a row for keys[i], even a corrupted one, which is returned as
// absent. One key (every Update) is read with the plain key lookup, which
// costs the server less than an array.
func (s *Store) lock(ctx context.Context, conn *pgxpool.Conn, keys []string) (recs []*core.Record, exists []bool, err error) {
	read := &pgx.Batch{}
	read.Queue(`BEGIN`)
	if len(keys) == 1 {
		read.Queue(lockRecord, keys[0])
	} else {
		read.Queue(lockRecords, keys)
	}
	br := conn.SendBatch(ctx, read)
	if _, err = br.Exec(); err == nil && len(keys) == 1 {
		var rec core.Record
		recs, exists = []*core.Record{&rec}, make([]bool, 1)
		rec, exists[0], err = s.shared.ReadRecord(keys[0], br.QueryRow())
	} else if err == nil {
		var rs pgx.Rows
		if rs, err = br.Query(); err == nil {
			recs, exists, err = s.shared.ReadRecords(rows{rs}, keys)
		}
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	return recs, exists, err
}

// writes queues the writes of an update: the records whose value changed,
// or all of them (but a delete of what is not there) for Update. They go in
// key order too, so two clients inserting the same new keys wait for each
// other in one order. once says the one write is Update's insert, which
// does nothing when another client inserted the key first.
func (s *Store) writes(keys []string, recs []*core.Record, olds []core.Record, exists []bool, all bool) (write *pgx.Batch, written []string, once bool) {
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	write = &pgx.Batch{}
	now := s.shared.Opts.Stamp()
	for _, i := range order {
		key, v, old := keys[i], recs[i].Value, olds[i]
		switch {
		case !core.MustWrite(all, old.Value, exists[i], v):
			continue
		case v == nil:
			write.Queue(statements.DeleteRecord, key)
		case exists[i]:
			write.Queue(updateRecord, key, core.NonNil(v), old.Version+1, now, core.Checksum(key, v))
		case all:
			once = true
			write.Queue(insertRecordOnce, key, core.NonNil(v), now, core.Checksum(key, v))
		default:
			write.Queue(insertRecord, key, core.NonNil(v), now, core.Checksum(key, v))
		}
		written = append(written, key)
	}
	return write, written, once
}

// commit sends the queued writes and COMMIT in one round trip and returns
// the writes' command tags.
func commit(ctx context.Context, conn *pgxpool.Conn, write *pgx.Batch) ([]pgconn.CommandTag, error) {
	n := write.Len()
	write.Queue(`COMMIT`)
	br := conn.SendBatch(ctx, write)
	tags := make([]pgconn.CommandTag, 0, n)
	var err error
	for range n {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err != nil {
			break
		}
		tags = append(tags, tag)
	}
	if err == nil {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err == nil && tag.String() != "COMMIT" {
			err = fmt.Errorf("the server answered COMMIT with %q", tag)
		}
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	return tags, err
}

// endTx rolls back the transaction conn is in, if any.
func endTx(ctx context.Context, conn *pgxpool.Conn) error {
	if conn.Conn().PgConn().TxStatus() == 'I' {
		return nil
	}
	_, err := conn.Exec(ctx, `ROLLBACK`)
	return err
}

// retryable reports whether an attempt failed only because it raced
// another client, so that trying again can succeed.
func retryable(err error) bool {
	if errors.Is(err, errConflict) {
		return true
	}
	var pgErr *pgconn.PgError
	// serialization_failure, deadlock_detected, and unique_violation: an
	// UpdateMany that lost the race to create a key.
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01" || pgErr.Code == "23505")
}

// readBlob is core.Dialect's ReadBlob: a plain SELECT, which locks and
// writes nothing.
func (s *Store) readBlob(ctx context.Context, key string) (value, sum, used any, err error) {
	err = s.pool.QueryRow(ctx, statements.SelectBlob, key).Scan(&value, &sum, &used)
	return value, sum, used, err
}

// release is core.Dialect's Release.
func (s *Store) release() error {
	s.pool.Close()
	return nil
}

// conn is a pgx pool, connection or transaction as core uses it.
type conn struct {
	q interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
		QueryRow(context.Context, string, ...any) pgx.Row
		Query(context.Context, string, ...any) (pgx.Rows, error)
	}
}

func (c conn) Exec(ctx context.Context, query string, args ...any) error {
	_, err := c.q.Exec(ctx, query, args...)
	return err
}

func (c conn) QueryRow(ctx context.Context, query string, args ...any) core.Row {
	return c.q.QueryRow(ctx, query, args...)
}

func (c conn) Query(ctx context.Context, query string, args ...any) (core.Rows, error) {
	rs, err := c.q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows{rs}, nil
}

// rows gives pgx's rows the Close of database/sql's.
type rows struct{ pgx.Rows }

func (r rows) Close() error {
	r.Rows.Close()
	return r.Rows.Err()
}

// db is the pool as core uses it.
type db struct {
	conn
	pool *pgxpool.Pool
}

func (d db) Begin(ctx context.Context) (core.Tx, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return txn{conn{tx}, tx}, nil
}

// txn is a transaction as core uses it.
type txn struct {
	conn
	tx pgx.Tx
}

func (t txn) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t txn) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }
