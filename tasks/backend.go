package tasks

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/sqlite"
)

// txOps are the transaction primitives of one database library.
type txOps[TTx any] struct {
	begin    func(ctx context.Context) (TTx, error)
	commit   func(ctx context.Context, tx TTx) error
	rollback func(ctx context.Context, tx TTx) error
	run      func(tx TTx) runner
	pool     runner
	// lock takes a database-wide lock until unlock is called; nil where
	// transactions serialise writers anyway (SQLite).
	lock func(ctx context.Context, key int64) (unlock func(), err error)
}

// riverBackend is the backend over one River driver. TD is the driver type
// (River's JobCompleteTx needs it), TTx its transaction type.
type riverBackend[TD riverdriver.Driver[TTx], TTx any] struct {
	driver   TD
	client   *river.Client[TTx] // insert-only: submits, reads, cancels
	tx       txOps[TTx]
	postgres bool
	logger   *slog.Logger
	closeDB  func()
	// outage waits out the database's outages for the worker's own calls
	// (its heartbeat); nil until waitOutages sets it.
	outage *store.Outage
}

func (b *riverBackend[TD, TTx]) setOutage(o *store.Outage) { b.outage = o }

// waitOut runs fn through the backend's outage wait, if it has one.
func (b *riverBackend[TD, TTx]) waitOut(ctx context.Context, fn func(context.Context) error) error {
	if b.outage == nil {
		return fn(ctx)
	}
	return b.outage.Do(ctx, fn)
}

func newRiverBackend[TD riverdriver.Driver[TTx], TTx any](driver TD, tx txOps[TTx], postgres bool, opts Options, closeDB func()) (*riverBackend[TD, TTx], error) {
	client, err := river.NewClient[TTx](driver, &river.Config{Logger: opts.Logger})
	if err != nil {
		closeDB()
		return nil, fmt.Errorf("tasks: river client: %w", err)
	}
	return &riverBackend[TD, TTx]{driver: driver, client: client, tx: tx, postgres: postgres, logger: opts.Logger, closeDB: closeDB}, nil
}

func openSQLite(ctx context.Context, dsn string, opts Options) (backend, error) {
	db, err := sqlite.OpenDB(ctx, store.SQLitePath(dsn))
	if err != nil {
		return nil, describeDBError(dsn, err)
	}
	// River's SQLite driver asks for a single connection: River runs
	// several operations at once and SQLite allows one writer, so more
	// connections only trade waiting in Go for SQLITE_BUSY retries.
	db.SetMaxOpenConns(1)
	ops := txOps[*sql.Tx]{
		begin:    func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
		commit:   func(_ context.Context, tx *sql.Tx) error { return tx.Commit() },
		rollback: func(_ context.Context, tx *sql.Tx) error { return tx.Rollback() },
		run:      func(tx *sql.Tx) runner { return sqliteRunner{q: tx} },
		pool:     sqliteRunner{q: db},
	}
	b, err := newRiverBackend(riversqlite.New(db), ops, false, opts, func() { _ = db.Close() })
	if err != nil {
		return nil, err
	}
	return b, nil
}

func openPostgres(ctx context.Context, dsn string, opts Options) (backend, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: PostgreSQL URL %s: %v", ErrInvalid, store.Redact(dsn), err)
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		// pgxpool's default (4 on this size of machine) starves a worker:
		// River's producer, completer and maintenance share the pool with
		// every task's completion transaction.
		cfg.MaxConns = 20
	}
	// Dialling again is for a database that went away, not for one that
	// never answered: a wrong URL or a server not started fails the open
	// at once (a dial made for the pool can carry a deadline of minutes).
	var reached atomic.Bool
	ready := sessionProbe(&cfg.ConnConfig.Config, cfg.ConnConfig.DialFunc)
	cfg.ConnConfig.DialFunc = redialRefused(cfg.ConnConfig.DialFunc, &reached, ready)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, describeDBError(dsn, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, describeDBError(dsn, err)
	}
	reached.Store(true)
	ops := txOps[pgx.Tx]{
		begin:    func(ctx context.Context) (pgx.Tx, error) { return pool.Begin(ctx) },
		commit:   func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
		rollback: func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) },
		run:      func(tx pgx.Tx) runner { return pgRunner{q: tx} },
		pool:     pgRunner{q: pool},
		lock: func(ctx context.Context, key int64) (func(), error) {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
				conn.Release()
				return nil, err
			}
			return func() {
				_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", key)
				conn.Release()
			}, nil
		},
	}
	b, err := newRiverBackend(riverpgxv5.New(pool), ops, true, opts, pool.Close)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// redialRefused wraps dial so that a PostgreSQL restarting is waited out
// until the caller's deadline, when it has one. River's completer gives
// each attempt to write finished tasks a deadline and tries three times:
// failing at once, it gave up after a few seconds of a restart and left
// the tasks running until its rescuer ran them again; waiting within each
// attempt, it rides out half a minute. A call without a deadline fails at
// once, as before (the queue's own calls wait in store.Outage), and so
// does every dial until the database was reached once (reached).
//
// A restart has two phases. While the server is down, a dial is refused
// (ECONNREFUSED), which the dial itself sees. While it starts up, the dial
// succeeds and the session is refused after the startup message (SQLSTATE
// 57P03), which only the caller sees, and River's completer gave up on
// that as well. So once a dial was refused, each dial first asks ready
// (a session opened apart from the pool) whether the server accepts
// sessions, and waits while it answers 57P03; the first session accepted
// ends the outage, and with it the extra session per dial.
func redialRefused(dial pgconn.DialFunc, reached *atomic.Bool, ready func(context.Context) error) pgconn.DialFunc {
	var down atomic.Bool // a dial was refused since a session was last accepted
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		wait := 50 * time.Millisecond
		for {
			conn, err := dial(ctx, network, addr)
			if err == nil && down.Load() && ready != nil {
				if rerr := ready(ctx); restarting(rerr) {
					_ = conn.Close()
					conn, err = nil, rerr
				} else {
					// Accepted, or refused for a reason a wait does not
					// cure: the pool's own session will say which.
					down.Store(false)
				}
			}
			if err == nil || !restarting(err) || !reached.Load() {
				return conn, err
			}
			down.Store(true)
			if _, ok := ctx.Deadline(); !ok {
				return nil, err
			}
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(wait):
			}
			wait = min(2*wait, time.Second)
		}
	}
}

// restarting reports whether err is what a PostgreSQL restarting answers:
// a connection refused, or "the database system is starting up" (or
// shutting down, or in recovery: SQLSTATE 57P03, cannot connect now).
func restarting(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &pgErr) && pgErr.Code == "57P03"
}

// sessionProbe opens and closes one session with cfg's settings, dialled
// with dial, apart from any pool.
func sessionProbe(cfg *pgconn.Config, dial pgconn.DialFunc) func(context.Context) error {
	probe := cfg.Copy()
	probe.DialFunc = dial
	return func(ctx context.Context) error {
		c, err := pgconn.ConnectConfig(ctx, probe)
		if err != nil {
			return err
		}
		return c.Close(ctx)
	}
}

func (b *riverBackend[TD, TTx]) close() { b.closeDB() }

// pool runs SQL outside any transaction.
func (b *riverBackend[TD, TTx]) pool() runner { return b.tx.pool }

// inTx runs fn in a transaction, committing when it returns nil.
func (b *riverBackend[TD, TTx]) inTx(ctx context.Context, fn func(tx TTx, r runner) error) error {
	tx, err := b.tx.begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx, b.tx.run(tx)); err != nil {
		_ = b.tx.rollback(context.WithoutCancel(ctx), tx)
		return err
	}
	return b.tx.commit(ctx, tx)
}

// migrationLockKey serialises concurrent migrations of one PostgreSQL
// database.
const migrationLockKey = 0x7261_7465_6b65_6570 // "ratekeep"

func (b *riverBackend[TD, TTx]) migrate(ctx context.Context) (MigrateResult, error) {
	var res MigrateResult
	if b.tx.lock != nil {
		unlock, err := b.tx.lock(ctx, migrationLockKey)
		if err != nil {
			return res, fmt.Errorf("lock for migration: %w", err)
		}
		defer unlock()
	}
	m, err := rivermigrate.New[TTx](b.driver, &rivermigrate.Config{Logger: b.logger})
	if err != nil {
		return res, err
	}
	// River applies each of its migrations in its own transaction. Two
	// processes migrating a fresh SQLite file at once can collide; the
	// loser finds the work done when it looks again.
	for try := 1; ; try++ {
		rr, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil)
		if err == nil {
			for _, v := range rr.Versions {
				res.River = append(res.River, v.Version)
			}
			break
		}
		if try == 3 || ctx.Err() != nil {
			return res, fmt.Errorf("river migrations: %w", err)
		}
		time.Sleep(time.Duration(try) * 50 * time.Millisecond)
	}
	err = b.inTx(ctx, func(_ TTx, r runner) error {
		res.Tasks, err = migrateOurs(ctx, r, b.postgres)
		return err
	})
	return res, err
}

// insert adds jobs and their "created" events in one transaction.
func (b *riverBackend[TD, TTx]) insert(ctx context.Context, specs []insertSpec, created func([]*rivertype.JobRow, []bool) []Event) ([]Submitted, error) {
	params := make([]river.InsertManyParams, len(specs))
	for i, s := range specs {
		params[i] = river.InsertManyParams{Args: s.args, InsertOpts: s.opts}
	}
	var out []Submitted
	err := b.inTx(ctx, func(tx TTx, r runner) error {
		res, err := b.client.InsertManyTx(ctx, tx, params)
		if err != nil {
			return err
		}
		rows := make([]*rivertype.JobRow, len(res))
		dup := make([]bool, len(res))
		out = make([]Submitted, len(res))
		for i, ir := range res {
			rows[i], dup[i] = ir.Job, ir.UniqueSkippedAsDuplicate
			out[i] = Submitted{ID: ir.Job.ID, Duplicate: ir.UniqueSkippedAsDuplicate}
		}
		return insertEvents(ctx, r, created(rows, dup))
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (b *riverBackend[TD, TTx]) get(ctx context.Context, id int64) (*rivertype.JobRow, error) {
	row, err := b.client.JobGet(ctx, id)
	if errors.Is(err, rivertype.ErrNotFound) || (err == nil && !ours(row)) {
		return nil, fmt.Errorf("task %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get task %d: %w", id, err)
	}
	return row, nil
}

func (b *riverBackend[TD, TTx]) getMany(ctx context.Context, ids []int64) ([]*rivertype.JobRow, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	res, err := b.client.JobList(ctx, river.NewJobListParams().Where(oursSQL).IDs(ids...).First(len(ids)))
	if err != nil {
		return nil, err
	}
	return res.Jobs, nil
}

// failedPredicate is true for a cancelled row that ratekeeper itself ended
// (record.Failed): those are failed tasks, not cancelled ones.
func (b *riverBackend[TD, TTx]) failedPredicate() string {
	if b.postgres {
		return "coalesce((metadata->'output'->>'failed')::boolean, false)"
	}
	return "coalesce(metadata ->> '$.output.failed', 0) = 1"
}

func (b *riverBackend[TD, TTx]) list(ctx context.Context, f Filter, limit int) ([]*rivertype.JobRow, error) {
	p := river.NewJobListParams().OrderBy(river.JobListOrderByID, river.SortOrderAsc).First(limit)
	if f.Type != "" {
		p = p.Queues(queueFor(f.Type)).Kinds(f.Type)
	} else {
		p = p.Where(oursSQL)
	}
	if f.AfterID > 0 {
		p = p.Where("id > @after_id", river.NamedArgs{"after_id": f.AfterID})
	}
	if f.State != "" {
		p = p.States(riverStates(f.State)...)
		switch f.State {
		case StateFailed:
			p = p.Where("(state <> 'cancelled' OR " + b.failedPredicate() + ")")
		case StateCancelled:
			p = p.Where("NOT (" + b.failedPredicate() + ")")
		}
	}
	res, err := b.client.JobList(ctx, p)
	if err != nil {
		return nil, err
	}
	return res.Jobs, nil
}

// cancel cancels a job and records the events of that in one transaction.
func (b *riverBackend[TD, TTx]) cancel(ctx context.Context, id int64, now time.Time, events func(before, after *rivertype.JobRow) []Event) (before, after *rivertype.JobRow, err error) {
	err = b.inTx(ctx, func(tx TTx, r runner) error {
		before, err = b.client.JobGetTx(ctx, tx, id)
		if errors.Is(err, rivertype.ErrNotFound) || (err == nil && !ours(before)) {
			return fmt.Errorf("task %d: %w", id, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if before.FinalizedAt != nil {
			return ErrFinished
		}
		if before.State == rivertype.JobStateRunning {
			if before, err = b.takeBackIfGone(ctx, tx, r, before, now); err != nil {
				return err
			}
		}
		after, err = b.client.JobCancelTx(ctx, tx, id)
		if err != nil {
			return err
		}
		return insertEvents(ctx, r, events(before, after))
	})
	return before, after, err
}

// takeBackIfGone takes back running row, in transaction tx, if the
// worker of its attempt is gone, and returns the row as it is then: a
// cancel of a task nobody runs anymore then takes effect at once, instead
// of when River's rescuer finds it.
func (b *riverBackend[TD, TTx]) takeBackIfGone(ctx context.Context, tx TTx, r runner, row *rivertype.JobRow, now time.Time) (*rivertype.JobRow, error) {
	worker := attemptedBy(row, 0)
	if worker == "" {
		return row, nil
	}
	ws, nowUS, err := readWorkers(ctx, r, b.postgres, worker)
	if err != nil || len(ws) == 0 {
		return row, err
	}
	v := judgeWorker(ws[0], nowUS, thisMachine)
	if !v.gone {
		return row, nil
	}
	done, err := b.reclaimIn(ctx, r, row, worker, v, now)
	if err != nil || !done {
		return row, err
	}
	return b.client.JobGetTx(ctx, tx, row.ID)
}

func (b *riverBackend[TD, TTx]) events(ctx context.Context, id int64) ([]Event, error) {
	return loadEvents(ctx, b.tx.pool, id)
}

func (b *riverBackend[TD, TTx]) workers(ctx context.Context) ([]workerInfo, int64, error) {
	return readWorkers(ctx, b.tx.pool, b.postgres, "")
}
