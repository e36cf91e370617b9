package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ratekeeper/ratekeeper/internal/sqlitedb"
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

// Store is shared state behind one atomic read-modify-write. Every method is
// safe for concurrent use by many goroutines; the SQLite and PostgreSQL
// stores are also safe for concurrent use by many processes.
type Store interface {
	// Update runs fn on the current record for key inside one atomic
	// read-modify-write (rec.Value is nil and rec.Version 0 when the key is
	// absent). If fn returns nil, what it left in rec.Value is written back
	// (a nil Value deletes the key) and the version is incremented; changes
	// fn makes to other fields are ignored. If fn returns an error nothing
	// is written and Update returns that error unchanged. fn may be called
	// more than once (on a serialization conflict) and must not have side
	// effects beyond rec; it runs while the key is locked, so it must be quick
	// and must not call the store itself.
	Update(ctx context.Context, key string, fn func(rec *Record) error) error

	// UpdateMany is Update for several keys in one atomic transaction: fn
	// sees the current record of each key, in the order of keys, so what
	// it decides about one may depend on the others, and the others
	// cannot change in between. A record whose Value fn leaves as it was
	// (byte for byte) is not written, and when none changed nothing is;
	// a nil Value deletes the key. If fn returns an error nothing is
	// written and UpdateMany returns that error unchanged. The keys must
	// be distinct (else the error wraps [ErrInvalidKey]). fn may be
	// called more than once and must only change the records. The SQL
	// stores lock rows in one order, by key, in every transaction, so two
	// UpdateMany calls over overlapping keys never deadlock.
	UpdateMany(ctx context.Context, keys []string, fn func(recs []*Record) error) error

	// Get returns the record for key, or an error wrapping [ErrNotFound]
	// when the key is absent.
	Get(ctx context.Context, key string) (Record, error)

	// List returns every record whose key starts with prefix, sorted by key
	// (byte order). An empty prefix lists everything.
	List(ctx context.Context, prefix string) ([]Record, error)

	Blobs

	// Close releases the store's resources. Every later call except Close
	// returns an error wrapping [ErrClosed]; closing twice is harmless.
	Close() error
}

// Blobs is a table of byte values bounded in total size: once the total
// exceeds the store's [Options.BlobLimit], the least recently used blobs
// (by GetBlob or PutBlob) are evicted. It backs caches, so a blob may vanish
// at any time; callers must be ready to recompute it. The size of a blob is
// len(key) + len(value).
type Blobs interface {
	// GetBlob returns the blob stored under key and true, or nil and false
	// when there is none. A hit marks the blob as recently used.
	GetBlob(ctx context.Context, key string) ([]byte, bool, error)
	// PutBlob stores value under key, replacing any previous blob, then
	// evicts least recently used blobs until the total size is within the
	// limit. A blob larger than the limit on its own is refused with an
	// error wrapping [ErrBlobTooLarge], and any older blob under key is
	// removed.
	PutBlob(ctx context.Context, key string, value []byte) error
	// DeleteBlob removes the blob under key; deleting an absent blob is not
	// an error.
	DeleteBlob(ctx context.Context, key string) error
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
}

// withDefaults checks opts and fills in the defaults.
func (opts Options) withDefaults() (Options, error) {
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

// now returns the clock's time in the form every store keeps: UTC, without a
// monotonic reading.
func (opts Options) now() time.Time { return opts.Now().UTC().Round(0) }

// Open opens the store named by dsn:
//
//   - "" or "memory": a new in-memory store ([NewMemory]);
//   - "postgres://..." or "postgresql://...": PostgreSQL ([OpenPostgres]);
//   - anything else: a SQLite file path, optionally prefixed by "sqlite://"
//     or "file:" ([OpenSQLite]).
//
// A URL with any other scheme is refused.
func Open(ctx context.Context, dsn string, opts Options) (Store, error) {
	// Each case checks err itself so that a failure returns a nil Store,
	// not an interface holding a nil pointer.
	switch {
	case dsn == "" || dsn == "memory":
		s, err := NewMemory(opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	case sqlitedb.IsPostgres(dsn):
		s, err := OpenPostgres(ctx, dsn, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	if scheme, _, ok := strings.Cut(dsn, "://"); ok && scheme != "sqlite" && scheme != "file" && !strings.ContainsAny(scheme, `/\.`) {
		return nil, fmt.Errorf("store: unsupported database URL scheme %q; use a SQLite file path (or sqlite://path), postgres://... for PostgreSQL, or \"memory\"", scheme)
	}
	s, err := OpenSQLite(ctx, dsn, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ValidateKey reports whether key can be stored by every implementation: it
// must be non-empty, at most MaxKeyLen bytes, valid UTF-8 and free of NUL
// bytes. Keys appear in logs, so they must never contain a secret.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: the key is empty; use a non-empty name such as \"bucket/github/alice/core\"", ErrInvalidKey)
	}
	return validatePrefix(key, "key")
}

// validateKeys checks UpdateMany's keys: each valid, none twice, at least
// one.
func validateKeys(keys []string) error {
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

// changed reports whether an update must write a record: its new value
// differs from the old one (exists says whether a row was there, even a
// corrupted one read as absent, which a nil value then deletes).
func changed(old []byte, exists bool, updated []byte) bool {
	if updated == nil {
		return exists
	}
	return old == nil || !bytes.Equal(old, updated)
}

// validatePrefix checks the rules a List prefix shares with keys (it may be
// empty).
func validatePrefix(s, what string) error {
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

// checksum is stored beside every value so that a row that was damaged
// outside the store is detected instead of being handed to the caller. It
// covers the key too, so a value moved to another key is caught as well.
func checksum(key string, value []byte) int64 {
	sum := crc32.Update(0, castagnoli, []byte(key))
	sum = crc32.Update(sum, castagnoli, []byte{0})
	return int64(crc32.Update(sum, castagnoli, value))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// corruptionLog logs a corrupted row once per key, so a caller that keeps
// reading a damaged key does not flood the log. Writing the key again
// re-arms the warning.
type corruptionLog struct {
	logger *slog.Logger
	mu     sync.Mutex
	seen   map[string]bool // table + "\x00" + key
}

func newCorruptionLog(logger *slog.Logger) *corruptionLog {
	return &corruptionLog{logger: logger, seen: map[string]bool{}}
}

// report logs that the row for key in table is corrupted, unless it was
// already logged since the key was last written.
func (c *corruptionLog) report(table, key, reason string) {
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

// written forgets a key's corruption once it holds a good value again.
func (c *corruptionLog) written(table, key string) {
	id := table + "\x00" + key
	c.mu.Lock()
	delete(c.seen, id)
	c.mu.Unlock()
}

// closedFlag makes every call after Close fail the same way in each store.
type closedFlag struct {
	mu     sync.RWMutex
	closed bool
}

func (f *closedFlag) check() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return ErrClosed
	}
	return nil
}

// close marks the store closed and reports whether it was open.
func (f *closedFlag) close() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	was := !f.closed
	f.closed = true
	return was
}

// cloneBytes copies b, keeping nil as nil and empty as empty.
func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}
