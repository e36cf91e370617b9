package tasks

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// runner runs ratekeeper's own SQL on a pool or a transaction of either
// database. Queries are written with $1-style placeholders; SQLite reads
// them as ?1-style.
type runner interface {
	exec(ctx context.Context, query string, args ...any) error
	query(ctx context.Context, query string, args ...any) (rowsIter, error)
}

type rowsIter interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// pgRunner runs on a pgx pool or transaction.
type pgRunner struct {
	q interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	}
}

func (r pgRunner) exec(ctx context.Context, q string, args ...any) error {
	_, err := r.q.Exec(ctx, q, args...)
	return err
}

func (r pgRunner) query(ctx context.Context, q string, args ...any) (rowsIter, error) {
	rows, err := r.q.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// sqliteRunner runs on a database/sql pool or transaction.
type sqliteRunner struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	}
}

func sqliteSQL(q string) string { return strings.ReplaceAll(q, "$", "?") }

func (r sqliteRunner) exec(ctx context.Context, q string, args ...any) error {
	_, err := r.q.ExecContext(ctx, sqliteSQL(q), args...)
	return err
}

func (r sqliteRunner) query(ctx context.Context, q string, args ...any) (rowsIter, error) {
	rows, err := r.q.QueryContext(ctx, sqliteSQL(q), args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

var (
	_ runner = pgRunner{q: (*pgxpool.Pool)(nil)}
	_ runner = sqliteRunner{q: (*sql.DB)(nil)}
)

// eventColumns are the history table's columns, in insert order.
const eventColumns = "task_id, event_key, at_us, kind, attempt, worker, message, delay_ms, reschedule_count, retry_count"

// insertEvents stores events, skipping any already stored (same task and
// key), so that copying an outbox twice is harmless.
func insertEvents(ctx context.Context, r runner, events []Event) error {
	const perStatement = 200 // 10 columns each: well under SQLite's variable limit
	for len(events) > 0 {
		n := min(len(events), perStatement)
		batch := events[:n]
		events = events[n:]
		var sb strings.Builder
		sb.WriteString("INSERT INTO ratekeeper_task_events (" + eventColumns + ") VALUES ")
		args := make([]any, 0, n*10)
		for i, e := range batch {
			if i > 0 {
				sb.WriteString(", ")
			}
			b := i * 10
			fmt.Fprintf(&sb, "($%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d)", b+1, b+2, b+3, b+4, b+5, b+6, b+7, b+8, b+9, b+10)
			args = append(args, e.TaskID, e.Key, e.At.UnixMicro(), string(e.Kind), e.Attempt, e.Worker, e.Message,
				e.Delay.Milliseconds(), e.RescheduleCount, e.RetryCount)
		}
		sb.WriteString(" ON CONFLICT (task_id, event_key) DO NOTHING")
		if err := r.exec(ctx, sb.String(), args...); err != nil {
			return fmt.Errorf("record task history: %w", err)
		}
	}
	return nil
}

// loadEvents reads a task's stored history, oldest first.
func loadEvents(ctx context.Context, r runner, taskID int64) ([]Event, error) {
	rows, err := r.query(ctx, "SELECT "+eventColumns+" FROM ratekeeper_task_events WHERE task_id = $1 ORDER BY at_us, id", taskID)
	if err != nil {
		return nil, fmt.Errorf("read task history: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var (
			e       Event
			atUS    int64
			kind    string
			delayMS int64
		)
		if err := rows.Scan(&e.TaskID, &e.Key, &atUS, &kind, &e.Attempt, &e.Worker, &e.Message, &delayMS, &e.RescheduleCount, &e.RetryCount); err != nil {
			return nil, fmt.Errorf("read task history: %w", err)
		}
		e.At = time.UnixMicro(atUS).UTC()
		e.Kind = EventKind(kind)
		e.Delay = time.Duration(delayMS) * time.Millisecond
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read task history: %w", err)
	}
	return out, nil
}

// ourMigrations are the schema changes of ratekeeper's task tables, in
// order, per database. Tables are prefixed ratekeeper_ so that they never
// meet River's river_* tables or other ratekeeper packages' tables. data,
// when set, runs after the statements, in the same transaction.
var ourMigrations = []struct {
	version          int
	postgres, sqlite []string
	data             func(ctx context.Context, r runner) error
}{
	{
		version: 1,
		postgres: []string{`CREATE TABLE IF NOT EXISTS ratekeeper_task_events (
	id               BIGSERIAL PRIMARY KEY,
	task_id          BIGINT  NOT NULL,
	event_key        TEXT    NOT NULL,
	at_us            BIGINT  NOT NULL,
	kind             TEXT    NOT NULL,
	attempt          INTEGER NOT NULL DEFAULT 0,
	worker           TEXT    NOT NULL DEFAULT '',
	message          TEXT    NOT NULL DEFAULT '',
	delay_ms         BIGINT  NOT NULL DEFAULT 0,
	reschedule_count INTEGER NOT NULL DEFAULT 0,
	retry_count      INTEGER NOT NULL DEFAULT 0,
	UNIQUE (task_id, event_key)
)`},
		sqlite: []string{`CREATE TABLE IF NOT EXISTS ratekeeper_task_events (
	id               INTEGER PRIMARY KEY,
	task_id          INTEGER NOT NULL,
	event_key        TEXT    NOT NULL,
	at_us            INTEGER NOT NULL,
	kind             TEXT    NOT NULL,
	attempt          INTEGER NOT NULL DEFAULT 0,
	worker           TEXT    NOT NULL DEFAULT '',
	message          TEXT    NOT NULL DEFAULT '',
	delay_ms         INTEGER NOT NULL DEFAULT 0,
	reschedule_count INTEGER NOT NULL DEFAULT 0,
	retry_count      INTEGER NOT NULL DEFAULT 0,
	UNIQUE (task_id, event_key)
)`},
	},
	{
		// The workers running now, with the types they handle, so that a
		// list can say why a task waits; and one River queue per type.
		version:  2,
		postgres: []string{workersTable},
		sqlite:   []string{workersTable},
		data:     moveToTypeQueues,
	},
	{
		// The process running each worker, so that any process can tell
		// a worker whose process ended (see liveness.go).
		version:  3,
		postgres: []string{workersHolder},
		sqlite:   []string{workersHolder},
	},
}

const workersHolder = `ALTER TABLE ratekeeper_task_workers ADD COLUMN holder TEXT NOT NULL DEFAULT ''`

const workersTable = `CREATE TABLE IF NOT EXISTS ratekeeper_task_workers (
	worker_id     TEXT   PRIMARY KEY,
	types         TEXT   NOT NULL,
	started_at_us BIGINT NOT NULL,
	seen_at_us    BIGINT NOT NULL
)`

// moveToTypeQueues moves tasks of types other than http, which databases
// from before one queue per type keep in the http queue, to their type's
// queue (see queueFor).
func moveToTypeQueues(ctx context.Context, r runner) error {
	rows, err := r.query(ctx, "SELECT DISTINCT kind FROM river_job WHERE queue = $1 AND kind <> $2", queueName, HTTPType)
	if err != nil {
		return err
	}
	var kinds []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return err
		}
		kinds = append(kinds, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, k := range kinds {
		if err := r.exec(ctx, "UPDATE river_job SET queue = $1 WHERE queue = $2 AND kind = $3", queueFor(k), queueName, k); err != nil {
			return err
		}
	}
	return nil
}

// migrateOurs applies ratekeeper's task migrations not yet applied, inside
// the caller's transaction, and returns the versions it applied.
func migrateOurs(ctx context.Context, r runner, postgres bool) ([]int, error) {
	if err := r.exec(ctx, `CREATE TABLE IF NOT EXISTS ratekeeper_task_migrations (
	version       INTEGER PRIMARY KEY,
	applied_at_us BIGINT NOT NULL
)`); err != nil {
		return nil, err
	}
	rows, err := r.query(ctx, "SELECT version FROM ratekeeper_task_migrations")
	if err != nil {
		return nil, err
	}
	done := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, err
		}
		done[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var applied []int
	for _, m := range ourMigrations {
		if done[m.version] {
			continue
		}
		stmts := m.sqlite
		if postgres {
			stmts = m.postgres
		}
		for _, s := range stmts {
			if err := r.exec(ctx, s); err != nil {
				return applied, fmt.Errorf("migration %d: %w", m.version, err)
			}
		}
		if m.data != nil {
			if err := m.data(ctx, r); err != nil {
				return applied, fmt.Errorf("migration %d: %w", m.version, err)
			}
		}
		if err := r.exec(ctx, "INSERT INTO ratekeeper_task_migrations (version, applied_at_us) VALUES ($1, $2)", m.version, time.Now().UnixMicro()); err != nil {
			return applied, fmt.Errorf("migration %d: %w", m.version, err)
		}
		applied = append(applied, m.version)
	}
	return applied, nil
}

// jitter returns a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}
