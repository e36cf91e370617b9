package store

import (
	"context"
	"time"

	"github.com/ratekeeper/ratekeeper/store/internal/core"
)

// Record is the state stored under one key: Key, Value (opaque bytes, nil
// for an absent key), Version (writes since the key was last absent) and
// UpdatedAt (the writer's clock, UTC). Every store implementation shares
// this one type.
type Record = core.Record

// Options configures a store (BlobLimit, Logger, Now, Advisory). The zero
// value is ready to use.
type Options = core.Options

// SchemaTooNewError is returned when opening a database that a newer
// ratekeeper has migrated past what this build knows.
type SchemaTooNewError = core.SchemaTooNewError

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

// Snapshot is implemented by the SQL stores: GetMany reads the records
// of several keys in one statement, locking none, in the order of keys (an
// absent key has a nil Value and Version 0). The records may be from
// different moments of other writers' transactions; a caller that writes
// what it decided on them re-checks them under UpdateMany.
type Snapshot interface {
	GetMany(ctx context.Context, keys []string) ([]Record, error)
}

// Clock is implemented by every store: DatabaseNow is the time on the
// database's clock, the one clock every process sharing the database
// agrees on (see store/quotastate). PostgreSQL reads its server's clock;
// SQLite and memory, whose processes share one machine, return
// Options.Now.
type Clock interface {
	DatabaseNow(ctx context.Context) (time.Time, error)
}

// Notifier is implemented by stores that can tell every process sharing
// the database that something changed, so that a process waiting for
// another's write need not poll. Listen calls fn with the payload of each
// notification sent on channel (store.WithNotification), this process's
// own included, until ctx ends. fn("") also means something may have
// changed unseen (a lost connection was restored, or the store cannot
// tell who wrote). waiting reports whether anyone is waiting for news: a
// store that must poll to notice other processes' writes polls only then.
// Listen returns ctx's error.
//
// PostgreSQL uses LISTEN/NOTIFY on a connection of its own; SQLite,
// whose processes share one machine and cannot signal each other through
// the file, watches PRAGMA data_version (which moves whenever another
// connection commits) a few times a second while someone waits.
type Notifier interface {
	Listen(ctx context.Context, channel string, fn func(payload string), waiting func() bool) error
}

// Newsboard is implemented by every store of this module: News counts
// the commits made through this store value that carried news
// (Notification.News), read in one atomic load. Processes sharing one
// store value — every one of a memory store's, or several quota states
// over one SQL store opened once — hear each other's news by it before
// their next decision, where a notification reaches them later (SQLite
// polls) or never (the memory store sends none). Processes of other
// store values hear it by Notifier. Wrappers (WaitOutages) pass it
// through, 0 over a store without one.
type Newsboard interface {
	News() uint64
}

// NewsOf returns s's News, 0 when s is no Newsboard.
func NewsOf(s Store) uint64 {
	if n, ok := s.(Newsboard); ok {
		return n.News()
	}
	return 0
}

// Notification is what a write tells the processes listening: see
// WithNotification.
type Notification = core.Notification

// WithNotification returns ctx carrying n: an Update or UpdateMany run with
// it sends n to every process listening on n.Channel (Notifier.Listen)
// when, and only when, its transaction commits a write, in the same
// transaction. Stores that cannot send one ignore it (SQLite's listeners
// notice every commit anyway).
func WithNotification(ctx context.Context, n Notification) context.Context {
	return core.WithNotification(ctx, n)
}

// Blobs is a table of byte values bounded in total size: once the total
// exceeds the store's [Options.BlobLimit], the least recently used blobs
// (by GetBlob or PutBlob) are evicted. It backs caches, so a blob may vanish
// at any time; callers must be ready to recompute it. The size of a blob is
// len(key) + len(value).
//
// In the SQL stores, shared by processes, a hit is a read: it records the
// use only when the recorded one is older than [BlobUseGranularity], so
// least recently used means "at that granularity" there (memory is exact).
// Writers do not wait for each other unless they write one key (or, on
// SQLite, at all: its write lock serializes them), so while writes are
// under way the total may exceed the limit by up to one blob per
// concurrent writer; once they are done it is within it.
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
	// TouchBlob marks the blob under key as recently used, as a hit would,
	// without reading it (the SQL stores write only when its recorded use
	// is older than BlobUseGranularity); an absent blob is not an error.
	// A cache serving the blob from its own memory calls it, so that the
	// table's order sees those hits too.
	TouchBlob(ctx context.Context, key string) error
}

var (
	// ErrNotFound is returned (wrapped) by Get when the key is absent.
	ErrNotFound = core.ErrNotFound
	// ErrClosed is returned (wrapped) by every call on a closed store.
	ErrClosed = core.ErrClosed
	// ErrInvalidKey is returned (wrapped) for a key or prefix the store
	// cannot hold; the error text says which rule it breaks.
	ErrInvalidKey = core.ErrInvalidKey
	// ErrBlobTooLarge is returned (wrapped) by PutBlob for a blob bigger
	// than the whole blob limit.
	ErrBlobTooLarge = core.ErrBlobTooLarge
)

const (
	// MaxKeyLen is the longest key, in bytes, every store accepts.
	// (PostgreSQL cannot index much longer text; callers with long natural
	// keys, such as URLs, hash them.)
	MaxKeyLen = core.MaxKeyLen
	// DefaultBlobLimit is the blob table's size bound when
	// Options.BlobLimit is 0.
	DefaultBlobLimit = core.DefaultBlobLimit
	// BlobUseGranularity is how stale the recorded use of a blob may grow
	// in the SQL stores before a hit records it again.
	BlobUseGranularity = core.BlobUseGranularity
	// SchemaVersion is the database schema version this build creates and
	// understands. Opening a database at an older version migrates it; a
	// newer one is refused with a *SchemaTooNewError.
	SchemaVersion = core.SchemaVersion
)

// ValidateKey reports whether key can be stored by every implementation: it
// must be non-empty, at most MaxKeyLen bytes, valid UTF-8 and free of NUL
// bytes. Keys appear in logs, so they must never contain a secret.
func ValidateKey(key string) error { return core.ValidateKey(key) }
