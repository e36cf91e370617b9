package core

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// The blob table is shared by every process on the database, so how it
// locks decides whether a fleet's cache scales.
//
// Size. The total is kept in BlobShards rows of ratekeeper_blob_usage, a
// blob counted in the row its key hashes to, and the database keeps them
// exact itself: triggers on ratekeeper_blobs add a row's size on insert,
// take it away on delete and move it on a change of size (schema version
// 3). So a statement that writes one blob locks that blob's row and one
// usage shard for its own duration, and writers of different shards never
// wait for each other; the total is the sum of the shards, read without a
// lock. A trigger rather than Go code, because then nothing — an eviction,
// a replaced blob, an operator's DELETE — can leave the total wrong.
//
// The cap. After its write a writer evicts, one statement per victim, the
// least recently used blob while the sum exceeds the limit
// (RemoveOldestBlob: sum and victim from one snapshot). On PostgreSQL each
// statement commits on its own, so while writes are under way the total
// may exceed the limit by the blobs of writers between their insert and
// their eviction (at most one blob per concurrent writer), and once they
// are done it is within it: the last snapshot any of them takes sees every
// insert. Two evictors picking one victim do not both delete: the second
// finds it gone and stops, the first goes on while needed; rarely (a
// touch reordering the victims between their snapshots) a blob more than
// needed goes, and a victim rewritten while its eviction waited goes all
// the same: a cache can lose a blob, never its bound. On SQLite the write lock serializes writers anyway, so the
// write and its evictions are one transaction (BlobWriteInTx) and the cap
// is exact.
//
// Recency. last_used is the Unix time in milliseconds (Options.Now) of a
// blob's write or of a hit it recorded. A hit is a plain SELECT; it
// writes only when the recorded use is older than BlobUseGranularity,
// so a blob read all the time costs one UPDATE a minute, and eviction
// order is right at that granularity: a blob used a minute after another
// is always kept longer.

// BlobShards is the number of rows the blob table's total is split over
// (the migration to schema version 3 creates them).
const BlobShards = 32

// BlobUseGranularity is how stale a blob's recorded use may grow before a
// hit records it again.
const BlobUseGranularity = time.Minute

// blobShard is the usage row that counts key's blob.
func blobShard(key string) int {
	return int(crc32.Checksum([]byte(key), castagnoli) % BlobShards)
}

// putBlob implements store.Blobs for a SQL store.
func (s *SQL) putBlob(ctx context.Context, key string, value []byte) error {
	if err := s.Closed.Begin(key); err != nil {
		return err
	}
	size, limit := int64(len(key)+len(value)), s.Opts.BlobLimit
	err := s.blobWrite(ctx, func(c Conn) error {
		if size > limit {
			return c.Exec(ctx, s.RemoveBlob, key) // the stale blob goes all the same
		}
		now := s.Opts.Now().UnixMilli()
		if err := c.Exec(ctx, s.UpsertBlob, key, NonNil(value), size, blobShard(key), now, Checksum(key, value)); err != nil {
			return err
		}
		return s.evict(ctx, c, key)
	})
	if err != nil {
		return fmt.Errorf("store: put blob %q: %w", key, err)
	}
	if size > limit {
		return BlobTooLarge(key, size, limit)
	}
	s.Corrupt.Written(blobsTable, key)
	return nil
}

// evict removes least recently used blobs other than written, the one
// just stored, while the total exceeds the limit.
func (s *SQL) evict(ctx context.Context, c Conn, written string) error {
	for {
		var size int64
		err := c.QueryRow(ctx, s.RemoveOldestBlob, written, s.Opts.BlobLimit).Scan(&size)
		if errors.Is(err, s.NoRows) {
			return nil // within the limit, or another writer took the victim and goes on
		}
		if err != nil {
			return err
		}
	}
}

// deleteBlob implements store.Blobs for a SQL store.
func (s *SQL) deleteBlob(ctx context.Context, key string) error {
	if err := s.Closed.Begin(key); err != nil {
		return err
	}
	if err := s.Writer.Exec(ctx, s.RemoveBlob, key); err != nil {
		return fmt.Errorf("store: delete blob %q: %w", key, err)
	}
	return nil
}

// blobWrite runs fn's statements: in one transaction with BlobWriteInTx,
// else each on its own.
func (s *SQL) blobWrite(ctx context.Context, fn func(Conn) error) error {
	if !s.BlobWriteInTx {
		return fn(s.Writer)
	}
	tx, err := s.Writer.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// touch records a hit on key, whose row says it was last used at used,
// unless that is within BlobUseGranularity. A failure costs only recency,
// so it is logged, not returned: the caller has its blob.
func (s *SQL) touch(ctx context.Context, key string, used any) {
	if last, ok := used.(int64); ok && last >= s.Opts.Now().Add(-BlobUseGranularity).UnixMilli() {
		return
	}
	if err := s.recordUse(ctx, key); err != nil && ctx.Err() == nil {
		s.Opts.Logger.Warn("store: could not record a blob's use; it may be evicted early", "key", key, "err", err)
	}
}

// recordUse sets key's last use to now if the recorded one is older than
// BlobUseGranularity; the condition makes concurrent hits on one stale
// blob write it once.
func (s *SQL) recordUse(ctx context.Context, key string) error {
	now := s.Opts.Now()
	return s.Writer.Exec(ctx, s.TouchBlob, now.UnixMilli(), key, now.Add(-BlobUseGranularity).UnixMilli())
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
