package store

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
)

// Kind is the kind of database a connection string names.
type Kind int

const (
	// Memory is "" or "memory": this process's memory, shared with nobody.
	Memory Kind = iota
	// SQLite is a file path, optionally after "sqlite://" or "file:":
	// shared by the processes of one machine.
	SQLite
	// Postgres is a postgres:// or postgresql:// URL: shared by a fleet.
	Postgres
)

var kindNames = [...]string{Memory: "memory", SQLite: "SQLite", Postgres: "PostgreSQL"}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// KindOf says which kind of database dsn names, the same string as the
// CLI's --db. It is the one place that tells them apart; it does not check
// dsn any further (Open refuses what it cannot open).
func KindOf(dsn string) Kind {
	switch {
	case dsn == "" || dsn == "memory":
		return Memory
	case strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://"):
		return Postgres
	}
	return SQLite
}

// SQLitePath returns the file path a SQLite dsn names: without a
// "sqlite://" or "file:" prefix, and without query parameters.
func SQLitePath(dsn string) string {
	p := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite://"), "file:")
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	return p
}

// Redact returns dsn fit for messages and logs: a PostgreSQL URL's
// password masked (the whole URL when it cannot be read).
func Redact(dsn string) string {
	if KindOf(dsn) != Postgres {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres://…"
	}
	return u.Redacted()
}

// Open opens the store named by dsn (see [KindOf]):
//
//   - "" or "memory": a new in-memory store (package store/memory);
//   - "postgres://..." or "postgresql://...": PostgreSQL (store/postgres);
//   - anything else: a SQLite file path, optionally prefixed by "sqlite://"
//     or "file:" (store/sqlite).
//
// A URL with any other scheme is refused, and so is a kind whose store
// the program did not import (see [Driver]).
func Open(ctx context.Context, dsn string, opts Options) (Store, error) {
	k := KindOf(dsn)
	name := dsn
	if k == SQLite {
		if scheme, _, ok := strings.Cut(dsn, "://"); ok && scheme != "sqlite" && scheme != "file" && !strings.ContainsAny(scheme, `/\.`) {
			return nil, fmt.Errorf("store: unsupported database URL scheme %q; use a SQLite file path (or sqlite://path), postgres://... for PostgreSQL, or \"memory\"", scheme)
		}
		name = SQLitePath(dsn)
	}
	d, err := driver(k)
	if err != nil {
		return nil, err
	}
	return d.Open(ctx, name, opts)
}

// A Driver is one kind of database's store, as its package registers it
// (store/memory, store/sqlite, store/postgres): the interfaces of this
// package sit below every store, and no store is linked into a program
// that does not import it. A program that reads any --db imports
// store/all, which registers all three.
type Driver struct {
	// Open opens the store. For SQLite, name is the file's path
	// ([SQLitePath]); for PostgreSQL, the whole URL; memory ignores it.
	Open func(ctx context.Context, name string, opts Options) (Store, error)
	// Transient reports whether err is this database away for a moment,
	// which the outage wait waits out; nil for a store never away.
	Transient func(err error) bool
}

var drivers struct {
	sync.RWMutex
	byKind [len(kindNames)]*Driver
}

// Register makes the store of kind k available to [Open]. A store's
// package calls it from init; a second registration of one kind panics, as
// database/sql's does.
func Register(k Kind, d Driver) {
	drivers.Lock()
	defer drivers.Unlock()
	if k < 0 || int(k) >= len(drivers.byKind) || d.Open == nil {
		panic(fmt.Sprintf("store: Register of %v without an Open", k))
	}
	if drivers.byKind[k] != nil {
		panic(fmt.Sprintf("store: Register called twice for %v", k))
	}
	drivers.byKind[k] = &d
}

// driver returns the registered store of kind k, or an error saying what
// to import.
func driver(k Kind) (*Driver, error) {
	drivers.RLock()
	defer drivers.RUnlock()
	if d := drivers.byKind[k]; d != nil {
		return d, nil
	}
	return nil, fmt.Errorf("store: no %v store is linked into this program; import github.com/ratekeeper/ratekeeper/store/all (or the store's own package)", k)
}

// anyTransient asks every registered store whether err is its database
// away for a moment.
func anyTransient(err error) bool {
	drivers.RLock()
	defer drivers.RUnlock()
	for _, d := range drivers.byKind {
		if d != nil && d.Transient != nil && d.Transient(err) {
			return true
		}
	}
	return false
}
