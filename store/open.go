package store

import (
	"context"
	"fmt"
	"net/url"
	"strings"
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
