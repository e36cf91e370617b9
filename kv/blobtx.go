package kv

import "context"

// blobTx is one blob-writing transaction of a SQL store. The transaction
// holds the lock that serializes blob writers (SQLite's write lock, the
// PostgreSQL usage row), so the recorded total stays exact.
type blobTx interface {
	// usage returns the total size recorded in ratekeeper_blob_usage.
	usage(ctx context.Context) (int64, error)
	setUsage(ctx context.Context, total int64) error
	// remove deletes key's blob and returns its size (0 if absent).
	remove(ctx context.Context, key string) (int64, error)
	// removeOldest deletes the least recently used blob and returns its
	// size; ok is false when there is none.
	removeOldest(ctx context.Context) (size int64, ok bool, err error)
	// insert adds a blob as the most recently used.
	insert(ctx context.Context, key string, value []byte, size int64) error
}

// putBlobIn stores value under key in tx, then evicts least recently used
// blobs until the total is within limit. A blob larger than limit is not
// stored (but the stale one under key is still removed): tooLarge says so,
// and the transaction should commit all the same.
func putBlobIn(ctx context.Context, tx blobTx, key string, value []byte, limit int64) (tooLarge, err error) {
	total, err := tx.usage(ctx)
	if err != nil {
		return nil, err
	}
	old, err := tx.remove(ctx, key)
	if err != nil {
		return nil, err
	}
	total -= old
	if size := int64(len(key) + len(value)); size > limit {
		tooLarge = blobTooLarge(key, size, limit)
	} else {
		if err := tx.insert(ctx, key, nonNil(value), size); err != nil {
			return nil, err
		}
		total += size
	}
	for total > limit {
		size, ok, err := tx.removeOldest(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			total = 0 // the usage row overcounted: the table is empty
			break
		}
		total -= size
	}
	return tooLarge, tx.setUsage(ctx, total)
}

// deleteBlobIn removes key's blob in tx.
func deleteBlobIn(ctx context.Context, tx blobTx, key string) error {
	total, err := tx.usage(ctx)
	if err != nil {
		return err
	}
	size, err := tx.remove(ctx, key)
	if err != nil || size == 0 {
		return err
	}
	return tx.setUsage(ctx, max(total-size, 0))
}
