package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Conn is a database handle or transaction as the code both SQL stores
// share uses it, whichever driver is under it.
type Conn interface {
	Exec(ctx context.Context, query string, args ...any) error
	QueryRow(ctx context.Context, query string, args ...any) Row
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Row is one row of a query; its Scan returns Statements.NoRows when there
// is none.
type Row interface{ Scan(dest ...any) error }

// Rows are the rows of a query.
type Rows interface {
	Row
	Next() bool
	Err() error
	Close() error
}

// DB is a database on which transactions begin.
type DB interface {
	Conn
	// Begin starts a transaction; on SQLite it holds the write lock from
	// the start (BEGIN IMMEDIATE).
	Begin(ctx context.Context) (Tx, error)
}

// Tx is a transaction.
type Tx interface {
	Conn
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// Statements is one database's SQL, each statement named by what it does.
// A database fills in the statements where it differs (its file sql.go says
// which and why) and Shared adds those written once for both.
type Statements struct {
	// NoRows is the driver's error for a row that is not there.
	NoRows error
	// NewScan gives what a record row is scanned into: NewAnyScan where a
	// column may hold any type (SQLite), NewTypedScan where the database
	// enforces them (PostgreSQL).
	NewScan func() Scan

	// Where the databases differ.

	SchemaExists  string     // one boolean: is there a ratekeeper_schema table
	LockSchema    string     // serializes migrations; "" when Begin's lock does
	Migrations    [][]string // entry v brings the schema from version v to v+1
	BlobWriteInTx bool       // a blob write and its evictions in one transaction (blob.go)

	// Written once for both (Shared).

	// NumberedPlaceholders says the database takes $1, $2, … rather than
	// ?, for the statements built at run time.
	NumberedPlaceholders bool

	CreateSchema     string
	GetVersion       string
	SetVersion       string // (version)
	GetRecord        string // (key) → value, version, updated_at, checksum
	DeleteRecord     string // (key)
	ListFrom         string // (prefix) → RecordColumns, in key order
	ListRange        string // (prefix, end) → RecordColumns, in key order
	SelectBlob       string // (key) → value, checksum, last_used
	UpsertBlob       string // (key, value, size, shard, last_used, checksum)
	RemoveBlob       string // (key)
	RemoveOldestBlob string // (key written, limit) → size; nothing when within the limit
	TouchBlob        string // (last_used, key, stale before)
}

// RecordColumns are the columns every record query reads, key first.
const RecordColumns = `key, value, version, updated_at, checksum`

// Shared returns st with the statements both databases share, their ?
// placeholders numbered ($1, $2, …) when numbered is set (PostgreSQL).
func Shared(st Statements, numbered bool) *Statements {
	ph := func(q string) string { return q }
	if numbered {
		ph = dollarNumbered
	}
	st.NumberedPlaceholders = numbered
	st.CreateSchema = `CREATE TABLE IF NOT EXISTS ratekeeper_schema (id integer PRIMARY KEY CHECK (id = 1), version integer NOT NULL)`
	st.GetVersion = `SELECT version FROM ratekeeper_schema WHERE id = 1`
	st.SetVersion = ph(`INSERT INTO ratekeeper_schema (id, version) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET version = excluded.version`)
	st.GetRecord = ph(`SELECT value, version, updated_at, checksum FROM ratekeeper_records WHERE key = ?`)
	st.DeleteRecord = ph(`DELETE FROM ratekeeper_records WHERE key = ?`)
	st.ListFrom = ph(`SELECT ` + RecordColumns + ` FROM ratekeeper_records WHERE key >= ? ORDER BY key`)
	st.ListRange = ph(`SELECT ` + RecordColumns + ` FROM ratekeeper_records WHERE key >= ? AND key < ? ORDER BY key`)
	st.SelectBlob = ph(`SELECT value, checksum, last_used FROM ratekeeper_blobs WHERE key = ?`)
	st.UpsertBlob = ph(`
INSERT INTO ratekeeper_blobs (key, value, size, shard, last_used, checksum) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET value = excluded.value, size = excluded.size, shard = excluded.shard,
	last_used = excluded.last_used, checksum = excluded.checksum`)
	st.RemoveBlob = ph(`DELETE FROM ratekeeper_blobs WHERE key = ?`)
	// One statement reads the usage and picks the victim from one
	// snapshot; two writers evicting at once pick the same victim, and the
	// one that finds it gone stops (the other goes on while needed).
	st.RemoveOldestBlob = ph(`
DELETE FROM ratekeeper_blobs
WHERE key = (SELECT key FROM ratekeeper_blobs WHERE key <> ? ORDER BY last_used LIMIT 1)
	AND (SELECT sum(total) FROM ratekeeper_blob_usage) > ?
RETURNING size`)
	st.TouchBlob = ph(`UPDATE ratekeeper_blobs SET last_used = ? WHERE key = ? AND last_used < ?`)
	return &st
}

// dollarNumbered rewrites the ? placeholders of query as $1, $2, … in
// order, the form PostgreSQL takes. The statements it is given hold no ?
// of their own.
func dollarNumbered(query string) string {
	var b strings.Builder
	n := 0
	for {
		i := strings.IndexByte(query, '?')
		if i < 0 {
			b.WriteString(query)
			return b.String()
		}
		n++
		b.WriteString(query[:i])
		b.WriteString("$" + strconv.Itoa(n))
		query = query[i+1:]
	}
}

// SQL is what both SQL stores share at run time: statements, options,
// corruption log, closed flag, and the reads and blob writes that run the
// same on both (Store calls them).
type SQL struct {
	*Statements
	Opts    Options
	Closed  ClosedFlag
	Corrupt *CorruptionLog
	// Reader serves Get and List; Writer, the blob transactions.
	Reader Conn
	Writer DB
}

// NewSQL returns the shared part of a SQL store; opts must have its
// defaults.
func NewSQL(st *Statements, opts Options, reader Conn, writer DB) *SQL {
	return &SQL{Statements: st, Opts: opts, Corrupt: newCorruptionLog(opts.Logger), Reader: reader, Writer: writer}
}

// ReadRecord reads key's record from row (GetRecord's columns). exists
// reports whether a row is there, even a corrupted one, which is returned
// as absent.
func (s *SQL) ReadRecord(key string, row Row) (rec Record, exists bool, err error) {
	sc := s.NewScan()
	err = row.Scan(sc.Dest()...)
	if errors.Is(err, s.NoRows) {
		return Record{Key: key}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	rec, problem := sc.Record(key)
	if problem != "" {
		s.Corrupt.Report(recordsTable, key, problem)
		return Record{Key: key}, true, nil
	}
	return rec, true, nil
}

// ReadRecords reads the rows of a query of RecordColumns over keys into
// records in the order of keys; exists[i] reports a row for keys[i], even
// a corrupted one, which is returned as absent. It closes rows.
func (s *SQL) ReadRecords(rows Rows, keys []string) ([]*Record, []bool, error) {
	defer rows.Close()
	recs := make([]*Record, len(keys))
	exists := make([]bool, len(keys))
	for i, k := range keys {
		recs[i] = &Record{Key: k}
	}
	err := s.eachRecord(rows, func(rec Record, ok bool) {
		if i := slices.Index(keys, rec.Key); i >= 0 {
			exists[i] = true
			if ok {
				*recs[i] = rec
			}
		}
	})
	return recs, exists, err
}

// eachRecord calls fn with each row of rows (RecordColumns); ok is false
// for a corrupted row, which is reported and carries only its key.
func (s *SQL) eachRecord(rows Rows, fn func(rec Record, ok bool)) error {
	var key string
	sc := s.NewScan()
	dest := append([]any{&key}, sc.Dest()...)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		rec, problem := sc.Record(key)
		if problem != "" {
			s.Corrupt.Report(recordsTable, key, problem)
			fn(Record{Key: key}, false)
			continue
		}
		fn(rec, true)
	}
	return rows.Err()
}

// get implements store.Store.
func (s *SQL) get(ctx context.Context, key string) (Record, error) {
	if err := s.Closed.Begin(key); err != nil {
		return Record{}, err
	}
	rec, _, err := s.ReadRecord(key, s.Reader.QueryRow(ctx, s.GetRecord, key))
	if err != nil {
		return Record{}, fmt.Errorf("store: get %q: %w", key, err)
	}
	if rec.Value == nil {
		return Record{}, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	return rec, nil
}

// list implements store.Store.
func (s *SQL) list(ctx context.Context, prefix string) ([]Record, error) {
	if err := s.Closed.Check(); err != nil {
		return nil, err
	}
	if err := ValidatePrefix(prefix, "prefix"); err != nil {
		return nil, err
	}
	query, args := s.ListFrom, []any{prefix}
	if end, ok := prefixEnd(prefix); ok {
		query, args = s.ListRange, append(args, end)
	}
	rows, err := s.Reader.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list %q: %w", prefix, err)
	}
	defer rows.Close()
	var out []Record
	err = s.eachRecord(rows, func(rec Record, ok bool) {
		if ok {
			out = append(out, rec)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("store: list %q: %w", prefix, err)
	}
	return out, nil
}

// getMany implements store.Snapshot: one statement reads every key, no
// row locked, so a decision can read the pool without making other
// processes wait.
func (s *SQL) getMany(ctx context.Context, keys []string) ([]Record, error) {
	if err := s.Closed.Check(); err != nil {
		return nil, err
	}
	if err := ValidateKeys(keys); err != nil {
		return nil, err
	}
	query := `SELECT ` + RecordColumns + ` FROM ratekeeper_records WHERE key IN (?` + strings.Repeat(`, ?`, len(keys)-1) + `)`
	if s.NumberedPlaceholders {
		query = dollarNumbered(query)
	}
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	rows, err := s.Reader.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: get %d keys: %w", len(keys), err)
	}
	recs, _, err := s.ReadRecords(rows, keys)
	if err != nil {
		return nil, fmt.Errorf("store: get %d keys: %w", len(keys), err)
	}
	out := make([]Record, len(recs))
	for i, r := range recs {
		out[i] = *r
	}
	return out, nil
}
