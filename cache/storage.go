package cache

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"time"
)

// The records live in the memory LRU, or in a Backend with a memory front.
//
// The front keeps recently used records of the backend, so a repeated GET
// in one process does not read the blob table each time. It may hold a
// record another process has since replaced; that is safe, because no
// stored answer is ever served without the server's 304 to the validator
// sent: an outdated validator only costs the full answer, which then
// replaces the record everywhere. Writes go to the backend and the front
// together.

// The front also remembers that the backend had no record for a key
// (an absent record, with no variants), so that the Store following a
// Prepare that found nothing does not read the blob table again. Lookups
// for Prepare do not trust it (another process may have stored the URL
// since): they read the backend again.

// memory returns the LRU that holds records in this process: the cache
// itself, or the front of its backend.
func (c *core) memory() *lru {
	if c.mem != nil {
		return c.mem
	}
	return c.front
}

// lookup returns the record stored under k, or nil.
func (c *core) lookup(ctx context.Context, k key) *record {
	r := c.memory().get(k)
	switch {
	case c.backend == nil:
		return r
	case r != nil && !r.absent():
		c.recordUse(ctx, r)
		return r
	}
	return c.read(ctx, k)
}

// useEvery is how often a record the front serves has its use recorded in
// the backend: store.BlobUseGranularity, the store's own (a lower layer
// cannot import it). More often would only be writes the store skips.
const useEvery = time.Minute

// UseRecorder is a Backend that can mark a blob as recently used without
// reading it, as the store package's Blobs can (TouchBlob). The cache
// then tells it of the hits its memory front serves, at most once a minute
// per record, so that the shared table does not evict what a process uses
// all the time just because that process never reads it there.
type UseRecorder interface {
	TouchBlob(ctx context.Context, key string) error
}

// recordUse tells the backend of a hit on r served from the front, if
// the last use the backend recorded is older than useEvery.
func (c *core) recordUse(ctx context.Context, r *record) {
	rec, ok := c.backend.(UseRecorder)
	now := c.now().UnixMilli()
	last := r.used.Load()
	if !ok || now-last < useEvery.Milliseconds() || !r.used.CompareAndSwap(last, now) {
		return
	}
	if err := rec.TouchBlob(ctx, blobKey(r.key)); err != nil {
		c.fail("recording a cache entry's use", r.key, err)
	}
}

// read reads the record under k from the backend into the front.
func (c *core) read(ctx context.Context, k key) *record {
	bk := blobKey(k)
	blob, ok, err := c.backend.GetBlob(ctx, bk)
	if err != nil {
		c.fail("reading a cache entry", k, err)
		return nil
	}
	if !ok {
		c.front.set(absentRecord(k))
		return nil
	}
	r, err := decodeRecord(k, blob)
	if err != nil {
		c.fail("ignoring an unreadable cache entry", k, err)
		if err := c.backend.DeleteBlob(ctx, bk); err != nil {
			c.fail("deleting an unreadable cache entry", k, err)
		}
		return nil
	}
	r.used.Store(c.now().UnixMilli())
	c.front.set(r)
	return r
}

// update replaces the record under k with fn's answer given the current
// one (nil for none; a nil answer removes it), and reports whether fn's
// record is stored. In memory this is atomic. With a backend it reads the
// record (from the front when there), then writes: two processes updating
// one URL at once may lose one's answer, which only costs a full answer
// later.
func (c *core) update(ctx context.Context, k key, fn func(*record) *record) bool {
	if c.mem != nil {
		return c.mem.update(k, fn)
	}
	old := c.front.get(k)
	switch {
	case old == nil:
		old = c.read(ctx, k)
	case old.absent():
		old = nil
	}
	r := fn(old)
	if r == old {
		return r != nil
	}
	bk := blobKey(k)
	if r == nil {
		c.front.delete(k)
		if err := c.backend.DeleteBlob(ctx, bk); err != nil {
			c.fail("deleting a cache entry", k, err)
		}
		return false
	}
	blob, err := encodeRecord(r)
	if err == nil {
		err = c.backend.PutBlob(ctx, bk, blob)
	}
	if err != nil {
		// The backend keeps what it had, or nothing: the front must not
		// offer what no other process can see.
		c.front.delete(k)
		c.fail("storing a cache entry", k, err)
		return false
	}
	r.used.Store(c.now().UnixMilli())
	c.front.set(r)
	return true
}

// fail counts and logs a backend problem. The key appears as a short
// digest prefix: enough to find the blob, nothing about the request.
func (c *core) fail(msg string, k key, err error) {
	c.failures.Add(1)
	level := slog.LevelWarn
	if errors.Is(err, context.Canceled) {
		level = slog.LevelDebug
	}
	c.log.Log(context.Background(), level, "cache: "+msg, "key", hex.EncodeToString(k[:6]), "err", err)
}
