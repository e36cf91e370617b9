package cache

import (
	"bytes"
	"context"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Backend is a shared table of byte values, such as a SQLite or PostgreSQL
// blob table, that lets several processes use one cache. A blob may vanish
// at any time (the backend bounds its own size); the cache then simply
// misses. Keys are BlobKeyPrefix followed by 64 hex digits of a SHA-256
// digest, so they have a fixed length and never contain a URL, an owner or
// a token. Errors never fail a request: the cache logs them and carries on
// uncached. The store package's Blobs (memory, SQLite, PostgreSQL) has
// exactly this method set.
type Backend interface {
	// GetBlob returns the value under key and true, or nil and false when
	// there is none.
	GetBlob(ctx context.Context, key string) ([]byte, bool, error)
	// PutBlob stores value under key, replacing any previous value.
	PutBlob(ctx context.Context, key string, value []byte) error
	// DeleteBlob removes the value under key; an absent key is not an error.
	DeleteBlob(ctx context.Context, key string) error
}

// BlobKeyPrefix starts every key the cache gives a Backend, so its blobs
// can share a table with other users'. The version changes whenever the
// blob encoding does.
const BlobKeyPrefix = "httpcache/1/"

// blobMagic starts every encoded entry; anything else is not ours.
var blobMagic = []byte("RKC1")

// blobKey returns the Backend key for k.
func blobKey(k key) string {
	var b [len(BlobKeyPrefix) + 2*len(k)]byte
	copy(b[:], BlobKeyPrefix)
	hex.Encode(b[len(BlobKeyPrefix):], k[:])
	return string(b[:])
}

// wireEntry is an Entry as encoded for a Backend (encoding/gob after
// blobMagic).
type wireEntry struct {
	Key          []byte
	Status       int
	Header       map[string][]string
	Body         []byte
	ETag         string
	LastModified string
	VaryNames    []string
	VaryHash     []byte
	Uncompressed bool
	StoredAt     int64 // Unix nanoseconds
}

// encodeEntry serializes e for a Backend.
func encodeEntry(e *Entry) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(e.body) + 512)
	buf.Write(blobMagic)
	w := wireEntry{
		Key:          e.key[:],
		Status:       http.StatusOK,
		Header:       e.Header(),
		Body:         e.body,
		ETag:         e.etag,
		LastModified: e.lastModified,
		VaryNames:    e.varyNames,
		Uncompressed: e.uncompressed,
		StoredAt:     e.storedAt.UnixNano(),
	}
	if len(e.varyNames) > 0 {
		w.VaryHash = e.varyHash[:]
	}
	if err := gob.NewEncoder(&buf).Encode(&w); err != nil {
		return nil, fmt.Errorf("encoding a cache entry: %w", err)
	}
	return buf.Bytes(), nil
}

// errCorrupt marks a blob that is not a valid entry for its key.
var errCorrupt = errors.New("cache: corrupted blob")

// decodeEntry parses a blob stored under k. Anything that is not a
// complete, consistent entry for k is an error wrapping errCorrupt.
func decodeEntry(k key, blob []byte) (*Entry, error) {
	if !bytes.HasPrefix(blob, blobMagic) {
		return nil, fmt.Errorf("%w: it does not start with %q", errCorrupt, blobMagic)
	}
	var w wireEntry
	dec := gob.NewDecoder(bytes.NewReader(blob[len(blobMagic):]))
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	switch {
	case !bytes.Equal(w.Key, k[:]):
		return nil, fmt.Errorf("%w: it was stored for another key", errCorrupt)
	case w.Status != http.StatusOK:
		return nil, fmt.Errorf("%w: status %d, want 200", errCorrupt, w.Status)
	case w.ETag == "" && w.LastModified == "":
		return nil, fmt.Errorf("%w: it has no validator", errCorrupt)
	case len(w.VaryNames) > 0 && len(w.VaryHash) != len(key{}):
		return nil, fmt.Errorf("%w: a Vary digest of %d bytes, want %d", errCorrupt, len(w.VaryHash), len(key{}))
	}
	e := &Entry{
		key:          k,
		body:         w.Body,
		etag:         w.ETag,
		lastModified: w.LastModified,
		varyNames:    w.VaryNames,
		uncompressed: w.Uncompressed,
		storedAt:     time.Unix(0, w.StoredAt),
	}
	e.setHeader(w.Header)
	copy(e.varyHash[:], w.VaryHash)
	e.finish()
	return e, nil
}
