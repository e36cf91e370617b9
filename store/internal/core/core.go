// Package core is what every store of the store tree is built on: the
// record and options types that package store names, the rules for keys,
// checksums, the corruption log and the closed flag — and, for the two SQL
// stores, the code they share: schema migrations, the blob table's LRU,
// reading records, over a statement table each database fills in
// (Statements).
//
// Layer 0 of docs/architecture.md: it must not know a driver (database/sql
// and pgx stay in store/sqlite and store/postgres) nor what a value means.
package core

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Record is the state stored under one key.
type Record struct {
	// Key names the record. See [ValidateKey] for what a key may hold.
	Key string
	// Value is opaque to the store: the caller encodes and decodes it.
	Value []byte
	// Version counts the writes of the key since it was last absent: 0 for
	// an absent key, 1 after the first write, +1 for every write after.
	Version int64
	// UpdatedAt is when the last write happened, by the writer's clock
	// ([Options.Now]), in UTC with at least microsecond precision.
	UpdatedAt time.Time
}

var (
	// ErrNotFound is returned (wrapped) by Get when the key is absent.
	ErrNotFound = errors.New("store: key not found")
	// ErrClosed is returned (wrapped) by every call on a closed store.
	ErrClosed = errors.New("store: closed")
	// ErrInvalidKey is returned (wrapped) for a key or prefix the store
	// cannot hold; the error text says which rule it breaks.
	ErrInvalidKey = errors.New("store: invalid key")
	// ErrBlobTooLarge is returned (wrapped) by PutBlob for a blob bigger
	// than the whole blob limit.
	ErrBlobTooLarge = errors.New("store: blob larger than the blob limit")
)

// MaxKeyLen is the longest key, in bytes, every store accepts. (PostgreSQL
// cannot index much longer text; callers with long natural keys, such as
// URLs, hash them.)
const MaxKeyLen = 1024

// DefaultBlobLimit is the blob table's size bound when Options.BlobLimit is 0.
const DefaultBlobLimit = 64 << 20

// Options configures a store. The zero value is ready to use.
type Options struct {
	// BlobLimit bounds the total size in bytes of the blob table; 0 means
	// DefaultBlobLimit. Several processes sharing one database each enforce
	// their own limit when they put a blob.
	BlobLimit int64
	// Logger receives warnings about corrupted rows; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock stamped into Record.UpdatedAt; nil means time.Now.
	Now func() time.Time
	// Advisory says the values can be rebuilt (quota state, cached
	// answers): PostgreSQL then commits without waiting for its disk
	// (synchronous_commit=off, unless the DSN sets it). A server crash may
	// lose the last fraction of a second of updates; every update of the
	// fleet stops waiting for a flush.
	Advisory bool
}

// WithDefaults checks opts and fills in the defaults.
func (opts Options) WithDefaults() (Options, error) {
	switch {
	case opts.BlobLimit < 0:
		return opts, fmt.Errorf("store: blob limit %d is negative; use a positive number of bytes, or 0 for the default (%d)", opts.BlobLimit, DefaultBlobLimit)
	case opts.BlobLimit == 0:
		opts.BlobLimit = DefaultBlobLimit
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return opts, nil
}

// Stamp returns the clock's time in the form every store keeps: UTC,
// without a monotonic reading.
func (opts Options) Stamp() time.Time { return opts.Now().UTC().Round(0) }

// ValidateKey reports whether key can be stored by every implementation: it
// must be non-empty, at most MaxKeyLen bytes, valid UTF-8 and free of NUL
// bytes. Keys appear in logs, so they must never contain a secret.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: the key is empty; use a non-empty name such as \"bucket/github/alice/core\"", ErrInvalidKey)
	}
	return ValidatePrefix(key, "key")
}

// ValidateKeys checks UpdateMany's keys: each valid, none twice, at least
// one.
func ValidateKeys(keys []string) error {
	if len(keys) == 0 {
		return fmt.Errorf("%w: no keys given; UpdateMany needs at least one", ErrInvalidKey)
	}
	for i, k := range keys {
		if err := ValidateKey(k); err != nil {
			return err
		}
		for _, prev := range keys[:i] {
			if prev == k {
				return fmt.Errorf("%w: the key %q is given twice; UpdateMany takes distinct keys", ErrInvalidKey, k)
			}
		}
	}
	return nil
}

// Changed reports whether an update must write a record: its new value
// differs from the old one (exists says whether a row was there, even a
// corrupted one read as absent, which a nil value then deletes).
func Changed(old []byte, exists bool, updated []byte) bool {
	if updated == nil {
		return exists
	}
	return old == nil || !bytes.Equal(old, updated)
}

// ValidatePrefix checks the rules a List prefix shares with keys (it may be
// empty).
func ValidatePrefix(s, what string) error {
	switch {
	case len(s) > MaxKeyLen:
		return fmt.Errorf("%w: the %s is %d bytes long; at most %d bytes are allowed (hash longer natural keys)", ErrInvalidKey, what, len(s), MaxKeyLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: the %s %q is not valid UTF-8", ErrInvalidKey, what, s)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: the %s %q contains a NUL byte", ErrInvalidKey, what, s)
	}
	return nil
}

// prefixEnd returns the smallest string greater than every string that
// starts with prefix, for a key range scan [prefix, end). ok is false when
// there is no such bound (an empty prefix, or one made only of the largest
// rune). The result is valid UTF-8, which PostgreSQL requires of text: the
// last rune is incremented rather than the last byte, and since UTF-8 byte
// order is code point order the range still holds exactly the prefixed keys.
func prefixEnd(prefix string) (end string, ok bool) {
	for prefix != "" {
		r, size := utf8.DecodeLastRuneInString(prefix)
		prefix = prefix[:len(prefix)-size]
		switch {
		case r == utf8.MaxRune:
			continue // no rune follows it: bump the one before
		case r == 0xD7FF:
			r = 0xE000 // skip the surrogates, which UTF-8 cannot encode
		default:
			r++
		}
		return prefix + string(r), true
	}
	return "", false
}

// Checksum is stored beside every value so that a row that was damaged
// outside the store is detected instead of being handed to the caller. It
// covers the key too, so a value moved to another key is caught as well.
func Checksum(key string, value []byte) int64 {
	sum := crc32.Update(0, castagnoli, []byte(key))
	sum = crc32.Update(sum, castagnoli, []byte{0})
	return int64(crc32.Update(sum, castagnoli, value))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CorruptionLog logs a corrupted row once per key, so a caller that keeps
// reading a damaged key does not flood the log. Writing the key again
// re-arms the warning.
type CorruptionLog struct {
	logger *slog.Logger
	mu     sync.Mutex
	seen   map[string]bool // table + "\x00" + key
}

// newCorruptionLog returns a log writing to logger.
func newCorruptionLog(logger *slog.Logger) *CorruptionLog {
	return &CorruptionLog{logger: logger, seen: map[string]bool{}}
}

// Report logs that the row for key in table is corrupted, unless it was
// already logged since the key was last written.
func (c *CorruptionLog) Report(table, key, reason string) {
	id := table + "\x00" + key
	c.mu.Lock()
	logged := c.seen[id]
	c.seen[id] = true
	c.mu.Unlock()
	if !logged {
		c.logger.Warn("store: ignoring a corrupted row; it is treated as absent and rebuilt on the next write",
			"table", table, "key", key, "reason", reason)
	}
}

// Written forgets a key's corruption once it holds a good value again.
func (c *CorruptionLog) Written(table string, keys ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, key := range keys {
		delete(c.seen, table+"\x00"+key)
	}
}

// ClosedFlag makes every call after Close fail the same way in each store.
type ClosedFlag struct {
	mu     sync.RWMutex
	closed bool
}

// Check returns ErrClosed once the store is closed.
func (f *ClosedFlag) Check() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return ErrClosed
	}
	return nil
}

// Begin checks what every call on a key checks first: the store is open
// and the key valid.
func (f *ClosedFlag) Begin(key string) error {
	if err := f.Check(); err != nil {
		return err
	}
	return ValidateKey(key)
}

// Close marks the store closed and reports whether it was open.
func (f *ClosedFlag) Close() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	was := !f.closed
	f.closed = true
	return was
}

// CloneBytes copies b, keeping nil as nil and empty as empty.
func CloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// NonNil turns a nil slice into an empty one, so that an empty value is
// stored as an empty BLOB rather than NULL and a present record never has a
// nil Value.
func NonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// BlobTooLarge is PutBlob's error for a blob bigger than the whole limit.
func BlobTooLarge(key string, size, limit int64) error {
	return fmt.Errorf("%w: blob %q is %d bytes (key + value) but the blob limit is %d bytes; raise the limit or do not cache it", ErrBlobTooLarge, key, size, limit)
}
