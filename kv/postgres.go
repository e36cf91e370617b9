package kv

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
)

// Postgres is a Store in a PostgreSQL database, shared by every process on
// every machine that opens it. Each Update locks the key's row (SELECT ...
// FOR UPDATE) for the read-modify-write, so updates of one key serialize
// across the fleet while different keys proceed in parallel. A client that
// dies mid-update loses its connection, and PostgreSQL rolls its transaction
// back and releases the lock.
type Postgres struct {
	opts    Options
	closed  closedFlag
	corrupt *corruptionLog
	pool    *pgxpool.Pool
}

// idleInTransactionTimeout ends the session of a client that vanished (a
// machine gone without closing its sockets) while it held a row lock, so the
// fleet waits at most this long. An Update never idles in its transaction
// longer than its fn takes. A DSN that sets the parameter wins.
const idleInTransactionTimeout = 30 * time.Second

// pgMaxAttempts bounds how often Update retries after a conflict.
const pgMaxAttempts = 20

// pgMigrationLock is the advisory lock key that serializes schema
// migrations (the bytes of "rk-schm").
const pgMigrationLock int64 = 0x726b2d7363686d

// OpenPostgres opens the store in the PostgreSQL database named by dsn (a
// postgres:// URL or key=value string, as pgx accepts; a search_path
// parameter picks the schema), migrating its schema as needed (see the
// package doc).
func OpenPostgres(ctx context.Context, dsn string, opts Options) (*Postgres, error) {
	return openPostgres(ctx, dsn, opts, SchemaVersion)
}

// openPostgres opens the store and migrates its schema up to version target.
func openPostgres(ctx context.Context, dsn string, opts Options, target int) (*Postgres, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn) // its errors mask the password
	if err != nil {
		return nil, fmt.Errorf("store: PostgreSQL DSN: %w", err)
	}
	if _, set := cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = fmt.Sprint(idleInTransactionTimeout.Milliseconds())
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: PostgreSQL: %w", err)
	}
	if err := migratePostgres(ctx, pool, target); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: PostgreSQL %s: %w", describePostgres(cfg), err)
	}
	return &Postgres{opts: opts, corrupt: newCorruptionLog(opts.Logger), pool: pool}, nil
}

// describePostgres names the database for messages, without the password.
func describePostgres(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return fmt.Sprintf("database %q on %s:%d as %q", c.Database, c.Host, c.Port, c.User)
}

// migratePostgres brings the schema to version target. An advisory lock
// makes concurrent openers take turns: the second finds the work done.
func migratePostgres(ctx context.Context, pool *pgxpool.Pool, target int) error {
	// Fast path, without the lock (nor the CREATE privilege): most opens
	// find the schema current.
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('ratekeeper_schema') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("reading the schema version: %w", err)
	}
	if exists {
		found, err := pgVersion(ctx, pool)
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

	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("starting the schema migration: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgMigrationLock); err != nil {
		return fmt.Errorf("locking the schema for migration: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS ratekeeper_schema (id integer PRIMARY KEY CHECK (id = 1), version integer NOT NULL)`); err != nil {
		return fmt.Errorf("creating %s: %w", schemaTable, err)
	}
	found, err := pgVersion(ctx, tx)
	if err != nil {
		return err
	}
	if err := checkVersion(found); err != nil {
		return err
	}
	for _, m := range pending(found, target) {
		for _, stmt := range m.postgres {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("migrating the schema to version %d: %w", m.version, err)
			}
		}
		found = m.version
	}
	if _, err := tx.Exec(ctx, `INSERT INTO ratekeeper_schema (id, version) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET version = excluded.version`, found); err != nil {
		return fmt.Errorf("recording schema version %d: %w", found, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing the schema migration: %w", err)
	}
	return nil
}

type pgQueryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// pgVersion reads the schema version; a missing row is version 0.
func pgVersion(ctx context.Context, q pgQueryer) (int, error) {
	var v int
	err := q.QueryRow(ctx, `SELECT version FROM ratekeeper_schema WHERE id = 1`).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the schema version: %w", err)
	}
	return v, nil
}

func (s *Postgres) begin(key string) error {
	if err := s.closed.check(); err != nil {
		return err
	}
	return ValidateKey(key)
}

// errPgConflict means another client inserted the key between our read
// (which found nothing to lock) and our insert: read again.
var errPgConflict = errors.New("concurrent insert")

// Update implements Store.
func (s *Postgres) Update(ctx context.Context, key string, fn func(rec *Record) error) error {
	if err := s.begin(key); err != nil {
		return err
	}
	var err error
	for range pgMaxAttempts {
		var fnErr error
		fnErr, err = s.updateOnce(ctx, key, fn)
		if fnErr != nil {
			return fnErr
		}
		if !pgRetryable(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("store: update %q: %w", key, err)
	}
	s.corrupt.written(recordsTable, key)
	return nil
}

// updateOnce makes one attempt at Update. fnErr is fn's error, returned
// unchanged; err is the database's.
//
// It takes two round trips to the server, not four: BEGIN is pipelined with
// the locking read, and the write with COMMIT, which also shortens the time
// the row stays locked.
func (s *Postgres) updateOnce(ctx context.Context, key string, fn func(rec *Record) error) (fnErr, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// Release destroys a connection still inside a transaction, which the
	// server then rolls back; endTx spares that on the expected paths.
	defer conn.Release()

	read := &pgx.Batch{}
	read.Queue(`BEGIN`)
	read.Queue(pgSelectRecord+` FOR UPDATE`, key)
	br := conn.SendBatch(ctx, read)
	_, err = br.Exec()
	var rec Record
	var exists bool
	if err == nil {
		rec, exists, err = s.scanRecord(key, br.QueryRow())
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return nil, errors.Join(err, endTx(ctx, conn))
	}

	version := rec.Version
	if err := fn(&rec); err != nil {
		return err, endTx(ctx, conn)
	}
	write := &pgx.Batch{}
	insert := false
	switch {
	case rec.Value == nil && !exists:
		return nil, endTx(ctx, conn) // deleting what is not there
	case rec.Value == nil:
		write.Queue(`DELETE FROM ratekeeper_records WHERE key = $1`, key)
	case exists:
		write.Queue(`UPDATE ratekeeper_records SET value = $2, version = $3, updated_at = $4, checksum = $5 WHERE key = $1`,
			key, nonNil(rec.Value), version+1, s.opts.now(), checksum(key, rec.Value))
	default:
		// Nothing was there to lock. If another client inserts the key
		// first, our insert does nothing and we start over, now finding
		// its row to lock.
		insert = true
		write.Queue(`INSERT INTO ratekeeper_records (key, value, version, updated_at, checksum) VALUES ($1, $2, 1, $3, $4) ON CONFLICT (key) DO NOTHING`,
			key, nonNil(rec.Value), s.opts.now(), checksum(key, rec.Value))
	}
	write.Queue(`COMMIT`)
	br = conn.SendBatch(ctx, write)
	written, err := br.Exec()
	if err == nil {
		var commit pgconn.CommandTag
		if commit, err = br.Exec(); err == nil && commit.String() != "COMMIT" {
			err = fmt.Errorf("the server answered COMMIT with %q", commit)
		}
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return nil, errors.Join(err, endTx(ctx, conn))
	}
	if insert && written.RowsAffected() == 0 {
		return nil, errPgConflict
	}
	return nil, nil
}

// UpdateMany implements Store. The locking read takes every existing row
// of keys in key order (SELECT ... ORDER BY key FOR UPDATE), the same order
// in every transaction; absent keys are inserted without ON CONFLICT, so a
// client that lost the race to create one fails with a unique violation,
// rolls back and starts over, now finding the row to lock.
func (s *Postgres) UpdateMany(ctx context.Context, keys []string, fn func(recs []*Record) error) error {
	if err := s.closed.check(); err != nil {
		return err
	}
	if err := validateKeys(keys); err != nil {
		return err
	}
	var err error
	var written []string
	for range pgMaxAttempts {
		var fnErr error
		written, fnErr, err = s.updateManyOnce(ctx, keys, fn)
		if fnErr != nil {
			return fnErr
		}
		if !pgRetryable(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("store: update %q: %w", keys, err)
	}
	for _, k := range written {
		s.corrupt.written(recordsTable, k)
	}
	return nil
}

// updateManyOnce makes one attempt at UpdateMany, in two round trips like
// updateOnce. It returns the keys it wrote.
func (s *Postgres) updateManyOnce(ctx context.Context, keys []string, fn func(recs []*Record) error) (written []string, fnErr, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Release()

	read := &pgx.Batch{}
	read.Queue(`BEGIN`)
	read.Queue(`SELECT key, value, version, updated_at, checksum FROM ratekeeper_records WHERE key = ANY($1) ORDER BY key FOR UPDATE`, keys)
	br := conn.SendBatch(ctx, read)
	recs := make([]*Record, len(keys))
	exists := make([]bool, len(keys))
	for i, k := range keys {
		recs[i] = &Record{Key: k}
	}
	_, err = br.Exec()
	if err == nil {
		var rows pgx.Rows
		rows, err = br.Query()
		if err == nil {
			err = s.scanRecords(rows, keys, recs, exists)
		}
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return nil, nil, errors.Join(err, endTx(ctx, conn))
	}

	olds := make([]Record, len(recs))
	for i, r := range recs {
		olds[i] = *r
		r.Value = cloneBytes(r.Value)
	}
	if err := fn(recs); err != nil {
		return nil, err, endTx(ctx, conn)
	}
	write := &pgx.Batch{}
	// Writes go in key order too, so two clients inserting the same new
	// keys wait for each other in one order.
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	now := s.opts.now()
	for _, i := range order {
		key, v, old := keys[i], recs[i].Value, olds[i]
		switch {
		case !changed(old.Value, exists[i], v):
			continue
		case v == nil:
			write.Queue(`DELETE FROM ratekeeper_records WHERE key = $1`, key)
		case exists[i]:
			write.Queue(`UPDATE ratekeeper_records SET value = $2, version = $3, updated_at = $4, checksum = $5 WHERE key = $1`,
				key, nonNil(v), old.Version+1, now, checksum(key, v))
		default:
			write.Queue(`INSERT INTO ratekeeper_records (key, value, version, updated_at, checksum) VALUES ($1, $2, 1, $3, $4)`,
				key, nonNil(v), now, checksum(key, v))
		}
		written = append(written, key)
	}
	if len(written) == 0 {
		return nil, nil, endTx(ctx, conn)
	}
	write.Queue(`COMMIT`)
	br = conn.SendBatch(ctx, write)
	for range written {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if err == nil {
		var commit pgconn.CommandTag
		if commit, err = br.Exec(); err == nil && commit.String() != "COMMIT" {
			err = fmt.Errorf("the server answered COMMIT with %q", commit)
		}
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return nil, nil, errors.Join(err, endTx(ctx, conn))
	}
	return written, nil, nil
}

// scanRecords reads the rows of a locking read into recs (by key's place in
// keys), marking exists; a corrupted row exists but reads as absent.
func (s *Postgres) scanRecords(rows pgx.Rows, keys []string, recs []*Record, exists []bool) error {
	defer rows.Close()
	for rows.Next() {
		var key string
		var value []byte
		var version, sum int64
		var updated time.Time
		if err := rows.Scan(&key, &value, &version, &updated, &sum); err != nil {
			return err
		}
		i := slices.Index(keys, key)
		if i < 0 {
			continue
		}
		exists[i] = true
		rec, problem := checkPgRecord(key, value, version, updated, sum)
		if problem != "" {
			s.corrupt.report(recordsTable, key, problem)
			continue
		}
		*recs[i] = rec
	}
	return rows.Err()
}

// endTx rolls back the transaction conn is in, if any.
func endTx(ctx context.Context, conn *pgxpool.Conn) error {
	if conn.Conn().PgConn().TxStatus() == 'I' {
		return nil
	}
	_, err := conn.Exec(ctx, `ROLLBACK`)
	return err
}

// pgRetryable reports whether an attempt failed only because it raced
// another client, so that trying again can succeed.
func pgRetryable(err error) bool {
	if errors.Is(err, errPgConflict) {
		return true
	}
	var pgErr *pgconn.PgError
	// serialization_failure, deadlock_detected, and unique_violation: an
	// UpdateMany that lost the race to create a key.
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01" || pgErr.Code == "23505")
}

const pgSelectRecord = `SELECT value, version, updated_at, checksum FROM ratekeeper_records WHERE key = $1`

// scanRecord reads key's record from row. exists reports whether a row is
// there, even a corrupted one, which is returned as absent.
func (s *Postgres) scanRecord(key string, row pgx.Row) (rec Record, exists bool, err error) {
	var value []byte
	var version, sum int64
	var updated time.Time
	err = row.Scan(&value, &version, &updated, &sum)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{Key: key}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	rec, problem := checkPgRecord(key, value, version, updated, sum)
	if problem != "" {
		s.corrupt.report(recordsTable, key, problem)
		return Record{Key: key}, true, nil
	}
	return rec, true, nil
}

// checkPgRecord checks a row; problem says what is wrong, or is empty for a
// good row. (PostgreSQL enforces the column types and NOT NULL, so only the
// contents can be wrong.)
func checkPgRecord(key string, value []byte, version int64, updated time.Time, sum int64) (rec Record, problem string) {
	if version < 1 {
		return Record{}, fmt.Sprintf("version is %d, want a positive integer", version)
	}
	if want := checksum(key, value); sum != want {
		return Record{}, fmt.Sprintf("checksum %d does not match the value (want %d)", sum, want)
	}
	return Record{Key: key, Value: nonNil(value), Version: version, UpdatedAt: updated.UTC()}, ""
}

// Get implements Store.
func (s *Postgres) Get(ctx context.Context, key string) (Record, error) {
	if err := s.begin(key); err != nil {
		return Record{}, err
	}
	rec, _, err := s.scanRecord(key, s.pool.QueryRow(ctx, pgSelectRecord, key))
	if err != nil {
		return Record{}, fmt.Errorf("store: get %q: %w", key, err)
	}
	if rec.Value == nil {
		return Record{}, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	return rec, nil
}

// List implements Store.
func (s *Postgres) List(ctx context.Context, prefix string) ([]Record, error) {
	if err := s.closed.check(); err != nil {
		return nil, err
	}
	if err := validatePrefix(prefix, "prefix"); err != nil {
		return nil, err
	}
	query, args := `SELECT key, value, version, updated_at, checksum FROM ratekeeper_records WHERE key >= $1`, []any{prefix}
	if end, ok := prefixEnd(prefix); ok {
		query, args = query+` AND key < $2`, append(args, end)
	}
	rows, err := s.pool.Query(ctx, query+` ORDER BY key`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list %q: %w", prefix, err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var key string
		var value []byte
		var version, sum int64
		var updated time.Time
		if err := rows.Scan(&key, &value, &version, &updated, &sum); err != nil {
			return nil, fmt.Errorf("store: list %q: %w", prefix, err)
		}
		rec, problem := checkPgRecord(key, value, version, updated, sum)
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

// GetBlob implements Blobs. A hit is a write (it moves the blob to the
// front of the LRU order).
func (s *Postgres) GetBlob(ctx context.Context, key string) ([]byte, bool, error) {
	if err := s.begin(key); err != nil {
		return nil, false, err
	}
	var value []byte
	var sum int64
	err := s.pool.QueryRow(ctx, `UPDATE ratekeeper_blobs SET last_used = nextval('ratekeeper_blob_clock') WHERE key = $1 RETURNING value, checksum`, key).
		Scan(&value, &sum)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("store: get blob %q: %w", key, err)
	}
	if sum != checksum(key, value) {
		s.corrupt.report(blobsTable, key, fmt.Sprintf("checksum %d does not match the value", sum))
		return nil, false, nil
	}
	return nonNil(value), true, nil
}

// PutBlob implements Blobs.
func (s *Postgres) PutBlob(ctx context.Context, key string, value []byte) error {
	if err := s.begin(key); err != nil {
		return err
	}
	var tooLarge error
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
		tooLarge, err = putBlobIn(ctx, pgBlobTx{tx}, key, value, s.opts.BlobLimit)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: put blob %q: %w", key, err)
	}
	s.corrupt.written(blobsTable, key)
	return tooLarge
}

// DeleteBlob implements Blobs.
func (s *Postgres) DeleteBlob(ctx context.Context, key string) error {
	if err := s.begin(key); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return deleteBlobIn(ctx, pgBlobTx{tx}, key) })
	if err != nil {
		return fmt.Errorf("store: delete blob %q: %w", key, err)
	}
	return nil
}

// pgBlobTx implements blobTx.
type pgBlobTx struct{ tx pgx.Tx }

// usage also locks the usage row, which serializes blob writers; readers
// (GetBlob) do not take it.
func (t pgBlobTx) usage(ctx context.Context) (total int64, err error) {
	err = t.tx.QueryRow(ctx, `SELECT total FROM ratekeeper_blob_usage WHERE id = 1 FOR UPDATE`).Scan(&total)
	return total, err
}

func (t pgBlobTx) setUsage(ctx context.Context, total int64) error {
	_, err := t.tx.Exec(ctx, `UPDATE ratekeeper_blob_usage SET total = $1 WHERE id = 1`, total)
	return err
}

func (t pgBlobTx) remove(ctx context.Context, key string) (int64, error) {
	var size int64
	err := t.tx.QueryRow(ctx, `DELETE FROM ratekeeper_blobs WHERE key = $1 RETURNING size`, key).Scan(&size)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return size, err
}

func (t pgBlobTx) removeOldest(ctx context.Context) (int64, bool, error) {
	var size int64
	err := t.tx.QueryRow(ctx, `
DELETE FROM ratekeeper_blobs WHERE key = (SELECT key FROM ratekeeper_blobs ORDER BY last_used LIMIT 1)
RETURNING size`).Scan(&size)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return size, err == nil, err
}

func (t pgBlobTx) insert(ctx context.Context, key string, value []byte, size int64) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO ratekeeper_blobs (key, value, size, last_used, checksum) VALUES ($1, $2, $3, nextval('ratekeeper_blob_clock'), $4)`,
		key, value, size, checksum(key, value))
	return err
}

// Close implements Store.
func (s *Postgres) Close() error {
	if s.closed.close() {
		s.pool.Close()
	}
	return nil
}
