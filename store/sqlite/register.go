package sqlite

import (
	"context"

	"github.com/ratekeeper/ratekeeper/store"
)

// init makes store.Open open a SQLite file; it gives Open the file's path,
// having read the connection string itself.
func init() {
	store.Register(store.SQLite, store.Driver{
		Open: func(ctx context.Context, path string, opts store.Options) (store.Store, error) {
			s, err := Open(ctx, path, opts)
			if err != nil {
				return nil, err // a nil Store, not one holding a nil pointer
			}
			return s, nil
		},
		Transient: IsTransient,
	})
}
