package store

import (
	"context"
	"fmt"
	"sync"
)

// A Driver is one kind of database's store, as its package registers it
// (store/memory, store/sqlite, store/postgres): the interfaces of this
// package sit below every store, and no store is linked into a program
// that does not import it. A program that reads any --db imports
// store/all, which registers all three.
type Driver struct {
	// Open opens the store. For SQLite, name is the file's path
	// ([SQLitePath]); for PostgreSQL, the whole URL; memory ignores it.
	Open func(ctx context.Context, name string, opts Options) (Store, error)
	// IsTransient reports whether err is this database away for a
	// moment (see [IsTransient]); nil for a store that is never away.
	IsTransient func(err error) bool
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
		if d != nil && d.IsTransient != nil && d.IsTransient(err) {
			return true
		}
	}
	return false
}
