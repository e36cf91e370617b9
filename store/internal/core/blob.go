package core

import (
	"context"
	"errors"
	"fmt"
)

// putBlob implements store.Blobs for a SQL store: one transaction that
// holds the lock serializing blob writers (SQLite's write lock, the
// PostgreSQL usage row), so the recorded total stays exact.
func (s *SQL) putBlob(ctx context.Context, key string, value []byte) error {
	if err := s.Closed.Begin(key); err != nil {
		return err
	}
	var tooLarge error
	err := s.blobTx(ctx, func(tx blobTx) (err error) {
		tooLarge, err = tx.put(ctx, key, value, s.Opts.BlobLimit)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: put blob %q: %w", key, err)
	}
	s.Corrupt.Written(blobsTable, key)
	return tooLarge
}

// deleteBlob implements store.Blobs for a SQL store.
func (s *SQL) deleteBlob(ctx context.Context, key string) error {
	if err := s.Closed.Begin(key); err != nil {
		return err
	}
	if err := s.blobTx(ctx, func(tx blobTx) error { return tx.delete(ctx, key) }); err != nil {
		return fmt.Errorf("store: delete blob %q: %w", key, err)
	}
	return nil
}

// checkedBlob is GetBlob's answer from a row scanned into value and sum (or
// the error of reading it): the blob, or a miss for no row or a corrupted
// one, which is reported.
func (s *SQL) checkedBlob(key string, value, sum any, err error) ([]byte, bool, error) {
	if errors.Is(err, s.NoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("store: get blob %q: %w", key, err)
	}
	v, problem := checkBlob(key, value, sum)
	if problem != "" {
		s.Corrupt.Report(blobsTable, key, problem)
		return nil, false, nil
	}
	return v, true, nil
}

// blobTx runs fn in a transaction of the writer and commits if fn
// succeeds.
func (s *SQL) blobTx(ctx context.Context, fn func(blobTx) error) error {
	tx, err := s.Writer.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := fn(blobTx{tx, s.Statements}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// blobTx is one blob-writing transaction.
type blobTx struct {
	tx Tx
	st *Statements
}

// usage returns the total size recorded in ratekeeper_blob_usage.
func (t blobTx) usage(ctx context.Context) (total int64, err error) {
	err = t.tx.QueryRow(ctx, t.st.BlobUsage).Scan(&total)
	return total, err
}

// remove deletes the blob a statement names and returns its size; ok is
// false when there is none.
func (t blobTx) remove(ctx context.Context, query string, args ...any) (size int64, ok bool, err error) {
	err = t.tx.QueryRow(ctx, query, args...).Scan(&size)
	if errors.Is(err, t.st.NoRows) {
		return 0, false, nil
	}
	return size, err == nil, err
}

// put stores value under key, then evicts least recently used blobs until
// the total is within limit. A blob larger than limit is not stored (but
// the stale one under key is still removed): tooLarge says so, and the
// transaction should commit all the same.
func (t blobTx) put(ctx context.Context, key string, value []byte, limit int64) (tooLarge, err error) {
	total, err := t.usage(ctx)
	if err != nil {
		return nil, err
	}
	old, _, err := t.remove(ctx, t.st.RemoveBlob, key)
	if err != nil {
		return nil, err
	}
	total -= old
	if size := int64(len(key) + len(value)); size > limit {
		tooLarge = BlobTooLarge(key, size, limit)
	} else {
		if err := t.tx.Exec(ctx, t.st.InsertBlob, key, NonNil(value), size, Checksum(key, value)); err != nil {
			return nil, err
		}
		total += size
	}
	for total > limit {
		size, ok, err := t.remove(ctx, t.st.RemoveOldestBlob)
		if err != nil {
			return nil, err
		}
		if !ok {
			total = 0 // the usage row overcounted: the table is empty
			break
		}
		total -= size
	}
	return tooLarge, t.tx.Exec(ctx, t.st.SetBlobUsage, total)
}

// delete removes key's blob.
func (t blobTx) delete(ctx context.Context, key string) error {
	total, err := t.usage(ctx)
	if err != nil {
		return err
	}
	size, _, err := t.remove(ctx, t.st.RemoveBlob, key)
	if err != nil || size == 0 {
		return err
	}
	return t.tx.Exec(ctx, t.st.SetBlobUsage, max(total-size, 0))
}
