package sqlite

import (
	"context"
	"database/sql"

	"github.com/ratekeeper/ratekeeper/store/internal/core"
)

// blobWrites are the statements of a blob write, prepared once on the
// write connection when the store opens: parsing them (and the triggers
// they fire) was a third of a put's time, all of it under the write lock
// every process on the file waits for.
var blobWrites = []string{statements.UpsertBlob, statements.RemoveBlob, statements.RemoveOldestBlob, statements.TouchBlob}

// preparedDB is the write handle as core's blob code uses it: the
// statements in stmts run prepared, in and out of transactions.
type preparedDB struct {
	db
	stmts map[string]*sql.Stmt
}

// prepareBlobWrites prepares blobWrites on the write connection of a
// database at schema version (a store opened at an older one, as tests
// do, runs them unprepared: they would not parse). It must run before any
// transaction holds that single connection.
func (s *Store) prepareBlobWrites(ctx context.Context, version int) (preparedDB, error) {
	d := preparedDB{db: db{s.write}, stmts: map[string]*sql.Stmt{}}
	for _, q := range blobWrites {
		if version < core.SchemaVersion {
			break
		}
		st, err := s.writeStmts.get(ctx, q)
		if err != nil {
			return d, err
		}
		d.stmts[q] = st
	}
	return d, nil
}

func (d preparedDB) Exec(ctx context.Context, query string, args ...any) error {
	if st := d.stmts[query]; st != nil {
		_, err := st.ExecContext(ctx, args...)
		return err
	}
	return d.db.Exec(ctx, query, args...)
}

func (d preparedDB) QueryRow(ctx context.Context, query string, args ...any) core.Row {
	if st := d.stmts[query]; st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return d.db.QueryRow(ctx, query, args...)
}

func (d preparedDB) Begin(ctx context.Context) (core.Tx, error) {
	tx, err := d.BeginTx(ctx, nil) // BEGIN IMMEDIATE (see OpenDB)
	if err != nil {
		return nil, err
	}
	return preparedTx{txn{conn{tx}, tx}, d.stmts}, nil
}

// preparedTx is a transaction of a preparedDB.
type preparedTx struct {
	txn
	stmts map[string]*sql.Stmt
}

func (t preparedTx) Exec(ctx context.Context, query string, args ...any) error {
	if st := t.stmts[query]; st != nil {
		_, err := t.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
		return err
	}
	return t.txn.Exec(ctx, query, args...)
}

func (t preparedTx) QueryRow(ctx context.Context, query string, args ...any) core.Row {
	if st := t.stmts[query]; st != nil {
		return t.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.txn.QueryRow(ctx, query, args...)
}
