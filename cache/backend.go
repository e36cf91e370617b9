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
// this method set, and TouchBlob too (UseRecorder).
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
// key derivation or the blob encoding does, so older blobs are never read
// (the backend evicts them in time). Version 2: one blob per URL and
// Accept holds the answers of several owners.
const BlobKeyPrefix = "httpcache/2/"

// blobMagic starts every encoded record; anything else is not ours.
var blobMagic = []byte("RKC2")

// blobKey returns the Backend key for k.
func blobKey(k key) string {
	var b [len(BlobKeyPrefix) + 2*len(k)]byte
	copy(b[:], BlobKeyPrefix)
	hex.Encode(b[len(BlobKeyPrefix):], k[:])
	return string(b[:])
}

// wireRecord is a record as encoded for a Backend (encoding/gob after
// blobMagic).
type wireRecord struct {
	Key      []byte
	Variants []wireEntry
}

// wireEntry is one variant of a wireRecord.
type wireEntry struct {
	Status       int
	Header       map[string][]string
	Body         []byte
	ETag         string
	LastModified string
	VaryNames    []string
	VaryHash     []byte
	Uncompressed bool
	StoredAt     int64  // Unix nanoseconds
	Owner        []byte // the party that stored it: a digest, never the owner
	Shared       bool
	Private      bool
	// Ruled: the server's tag followed its TagRule when stored (a field
	// older blobs lack, decoded as false: the stored tag is sent as is).
	Ruled bool
	// RequestTime (Unix nanoseconds), Principal, CredVary and Public are
	// what freshness needs (older blobs lack them: an answer whose
	// request time is unknown counts its age from when it was stored,
	// and one without a principal is served fresh only to requests
	// without one).
	RequestTime int64
	Principal   []byte
	CredVary    bool
	Public      bool
}

// encodeRecord serializes r for a Backend.
func encodeRecord(r *record) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(int(r.size) + 512)
	buf.Write(blobMagic)
	w := wireRecord{Key: r.key[:], Variants: make([]wireEntry, len(r.variants))}
	for i, e := range r.variants {
		w.Variants[i] = wireEntry{
			Status:       http.StatusOK,
			Header:       e.Header(),
			Body:         e.body,
			ETag:         e.etag,
			LastModified: e.lastModified,
			VaryNames:    e.varyNames,
			Uncompressed: e.uncompressed,
			StoredAt:     e.storedAt.UnixNano(),
			Owner:        e.owner[:],
			Shared:       e.shared,
			Private:      e.private,
			Ruled:        e.ruled,
			RequestTime:  e.requestTime.UnixNano(),
			CredVary:     e.credVary,
			Public:       e.public,
		}
		if e.principal != (party{}) {
			w.Variants[i].Principal = e.principal[:]
		}
		if len(e.varyNames) > 0 {
			w.Variants[i].VaryHash = e.varyHash[:]
		}
	}
	if err := gob.NewEncoder(&buf).Encode(&w); err != nil {
		return nil, fmt.Errorf("encoding a cache entry: %w", err)
	}
	return buf.Bytes(), nil
}

// errCorrupt marks a blob that is not a valid record for its key.
var errCorrupt = errors.New("cache: corrupted blob")

// decodeRecord parses a blob stored under k. Anything that is not a
// complete, consistent record for k is an error wrapping errCorrupt.
func decodeRecord(k key, blob []byte) (*record, error) {
	if !bytes.HasPrefix(blob, blobMagic) {
		return nil, fmt.Errorf("%w: it does not start with %q", errCorrupt, blobMagic)
	}
	var w wireRecord
	dec := gob.NewDecoder(bytes.NewReader(blob[len(blobMagic):]))
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	switch {
	case !bytes.Equal(w.Key, k[:]):
		return nil, fmt.Errorf("%w: it was stored for another key", errCorrupt)
	case len(w.Variants) == 0 || len(w.Variants) > maxVariants:
		return nil, fmt.Errorf("%w: %d answers, want 1 to %d", errCorrupt, len(w.Variants), maxVariants)
	}
	variants := make([]*Entry, len(w.Variants))
	shared := 0
	for i := range w.Variants {
		e, err := decodeEntry(k, &w.Variants[i])
		if err != nil {
			return nil, err
		}
		if e.shared {
			shared++
		}
		for _, v := range variants[:i] {
			if v.owner == e.owner {
				return nil, fmt.Errorf("%w: two answers of one owner", errCorrupt)
			}
		}
		variants[i] = e
	}
	if shared > 1 {
		return nil, fmt.Errorf("%w: %d shared answers, want at most 1", errCorrupt, shared)
	}
	return newRecord(k, variants), nil
}

// decodeEntry checks and builds one variant of a record stored under k.
func decodeEntry(k key, w *wireEntry) (*Entry, error) {
	switch {
	case w.Status != http.StatusOK:
		return nil, fmt.Errorf("%w: status %d, want 200", errCorrupt, w.Status)
	case w.ETag == "" && w.LastModified == "":
		return nil, fmt.Errorf("%w: it has no validator", errCorrupt)
	case w.Shared && w.ETag == "":
		return nil, fmt.Errorf("%w: a shared answer without an ETag", errCorrupt)
	case len(w.VaryNames) > 0 && len(w.VaryHash) != len(key{}):
		return nil, fmt.Errorf("%w: a Vary digest of %d bytes, want %d", errCorrupt, len(w.VaryHash), len(key{}))
	case len(w.Principal) != 0 && len(w.Principal) != len(party{}):
		return nil, fmt.Errorf("%w: a principal digest of %d bytes, want %d", errCorrupt, len(w.Principal), len(party{}))
	case len(w.Owner) != len(party{}):
		return nil, fmt.Errorf("%w: an owner digest of %d bytes, want %d", errCorrupt, len(w.Owner), len(party{}))
	}
	e := &Entry{
		key:          k,
		body:         w.Body,
		etag:         w.ETag,
		lastModified: w.LastModified,
		varyNames:    w.VaryNames,
		uncompressed: w.Uncompressed,
		storedAt:     time.Unix(0, w.StoredAt),
		shared:       w.Shared,
		private:      w.Private,
		ruled:        w.Ruled && w.ETag != "",
		credVary:     w.CredVary,
		public:       w.Public,
	}
	e.requestTime = e.storedAt
	if w.RequestTime != 0 {
		e.requestTime = time.Unix(0, w.RequestTime)
	}
	e.setHeader(w.Header)
	copy(e.varyHash[:], w.VaryHash)
	copy(e.owner[:], w.Owner)
	copy(e.principal[:], w.Principal)
	e.finish()
	return e, nil
}
