package postgres

import (
	"context"

	"github.com/ratekeeper/ratekeeper/store"
)

// init makes store.Open open a postgres:// or postgresql:// URL.
func init() {
	store.Register(store.Postgres, store.Driver{
		Open: func(ctx context.Context, dsn string, opts store.Options) (store.Store, error) {
			s, err := Open(ctx, dsn, opts)
			if err != nil {
				return nil, err // a nil Store, not one holding a nil pointer
			}
			return s, nil
		},
		Transient: IsTransient,
	})
}
