package core

import (
	"context"
	"fmt"
	"time"
)

// Store is the store.Store both SQL stores are: the checks every call
// makes, Get, List and the blob table run the same on both, and a Dialect
// runs what each database does its own way. store/sqlite and
// store/postgres embed it.
type Store struct {
	sql  *SQL
	d    Dialect
	news News
}

// Dialect is what a SQL database does its own way.
type Dialect struct {
	// Transact runs one update of keys in a transaction that locks their
	// rows: it reads their records (ReadRecords' records and exists),
	// passes them to fn, writes what fn says must be written (a nil Value
	// deletes, but not what is not there), commits, and returns the keys
	// it wrote. fnErr is fn's error, returned unchanged after rolling back;
	// err is the database's.
	Transact func(ctx context.Context, keys []string, fn UpdateFn) (written []string, fnErr, err error)
	// ReadBlob reads key's row (SelectBlob) into value, checksum and
	// last_used (a missing row is Statements.NoRows), writing nothing.
	ReadBlob func(ctx context.Context, key string) (value, sum, used any, err error)
	// Release closes the database handles, once.
	Release func() error
}

// UpdateFn decides on the records of an update. all says to write every
// record even when its value did not change (Update's one record: its
// version counts the writes); otherwise only the changed ones are.
type UpdateFn func(recs []*Record, exists []bool) (all bool, err error)

// MustWrite reports whether an update writes a record: whatever fn left
// when all, else only a change — and never a delete of what is not there.
func MustWrite(all bool, old []byte, exists bool, updated []byte) bool {
	if all {
		return updated != nil || exists
	}
	return Changed(old, exists, updated)
}

// Before keeps the records of an update as they were read, and gives fn
// copies of their values to scribble on.
func Before(recs []*Record) []Record {
	olds := make([]Record, len(recs))
	for i, r := range recs {
		olds[i] = *r
		r.Value = CloneBytes(r.Value)
	}
	return olds
}

// NewStore returns the store of sql's database run by d.
func NewStore(sql *SQL, d Dialect) *Store { return &Store{sql: sql, d: d} }

// Update implements store.Store.
func (s *Store) Update(ctx context.Context, key string, fn func(rec *Record) error) error {
	if err := s.sql.Closed.Begin(key); err != nil {
		return err
	}
	return s.update(ctx, []string{key}, func(recs []*Record, _ []bool) (bool, error) {
		return true, fn(recs[0])
	})
}

// UpdateMany implements store.Store.
func (s *Store) UpdateMany(ctx context.Context, keys []string, fn func(recs []*Record) error) error {
	if err := s.sql.Closed.Check(); err != nil {
		return err
	}
	if err := ValidateKeys(keys); err != nil {
		return err
	}
	return s.update(ctx, keys, func(recs []*Record, _ []bool) (bool, error) {
		return false, fn(recs)
	})
}

func (s *Store) update(ctx context.Context, keys []string, fn UpdateFn) error {
	written, fnErr, err := s.d.Transact(ctx, keys, fn)
	switch {
	case fnErr != nil:
		return fnErr
	case err != nil && len(keys) == 1:
		return fmt.Errorf("store: update %q: %w", keys[0], err)
	case err != nil:
		return fmt.Errorf("store: update %q: %w", keys, err)
	}
	s.sql.Corrupt.Written(recordsTable, written...)
	if len(written) > 0 {
		s.news.Committed(ctx)
	}
	return nil
}

// News implements store.Newsboard: the commits of this store value that
// carried news.
func (s *Store) News() uint64 { return s.news.Count() }

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string) (Record, error) { return s.sql.get(ctx, key) }

// List implements store.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]Record, error) {
	return s.sql.list(ctx, prefix)
}

// DatabaseNow implements store.Clock for a database on this machine
// (SQLite): its clock is Options.Now.
func (s *Store) DatabaseNow(context.Context) (time.Time, error) {
	if err := s.sql.Closed.Check(); err != nil {
		return time.Time{}, err
	}
	return s.sql.Opts.Now(), nil
}

// GetMany implements store.Snapshot.
func (s *Store) GetMany(ctx context.Context, keys []string) ([]Record, error) {
	return s.sql.getMany(ctx, keys)
}

// GetBlob implements store.Blobs. A hit is a read; it writes only when
// the blob's recorded use is older than BlobUseGranularity.
func (s *Store) GetBlob(ctx context.Context, key string) ([]byte, bool, error) {
	if err := s.sql.Closed.Begin(key); err != nil {
		return nil, false, err
	}
	value, sum, used, err := s.d.ReadBlob(ctx, key)
	v, ok, err := s.sql.checkedBlob(key, value, sum, err)
	if ok {
		s.sql.touch(ctx, key, used)
	}
	return v, ok, err
}

// PutBlob implements store.Blobs.
func (s *Store) PutBlob(ctx context.Context, key string, value []byte) error {
	return s.sql.putBlob(ctx, key, value)
}

// TouchBlob implements store.Blobs.
func (s *Store) TouchBlob(ctx context.Context, key string) error {
	if err := s.sql.Closed.Begin(key); err != nil {
		return err
	}
	if err := s.sql.recordUse(ctx, key); err != nil {
		return fmt.Errorf("store: touch blob %q: %w", key, err)
	}
	return nil
}

// DeleteBlob implements store.Blobs.
func (s *Store) DeleteBlob(ctx context.Context, key string) error {
	return s.sql.deleteBlob(ctx, key)
}

// Close implements store.Store.
func (s *Store) Close() error {
	if !s.sql.Closed.Close() {
		return nil
	}
	return s.d.Release()
}
