package store

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// withoutDrivers runs fn with no store registered, as in a program that
// imports package store alone.
func withoutDrivers(t *testing.T, fn func()) {
	drivers.Lock()
	saved := drivers.byKind
	drivers.byKind = [len(kindNames)]*Driver{}
	drivers.Unlock()
	defer func() {
		drivers.Lock()
		drivers.byKind = saved
		drivers.Unlock()
	}()
	fn()
}

// A kind whose store the program did not import is refused, saying what
// to import; a registered one opens, and its Transient is what
// IsTransient asks.
func TestOpenAsksTheRegisteredStore(t *testing.T) {
	busy := errors.New("busy")
	withoutDrivers(t, func() {
		if _, err := Open(t.Context(), "state.db", Options{}); err == nil || !strings.Contains(err.Error(), "store/all") {
			t.Errorf("Open with no store registered: %v, want an error naming store/all", err)
		}
		if IsTransient(busy) {
			t.Error("an error is transient with no store registered")
		}
		var gotName string
		Register(SQLite, Driver{
			Open: func(_ context.Context, name string, _ Options) (Store, error) {
				gotName = name
				return nil, errors.New("opened")
			},
			Transient: func(err error) bool { return err == busy },
		})
		if _, err := Open(t.Context(), "sqlite://dir/state.db?x=1", Options{}); err == nil || err.Error() != "opened" || gotName != "dir/state.db" {
			t.Errorf("Open: %v with %q, want the registered store given the file's path", err, gotName)
		}
		if !IsTransient(busy) || IsTransient(errors.New("other")) {
			t.Error("IsTransient does not ask the registered store")
		}
		defer func() {
			if recover() == nil {
				t.Error("a second registration of SQLite did not panic")
			}
		}()
		Register(SQLite, Driver{Open: func(context.Context, string, Options) (Store, error) { return nil, nil }})
	})
}
