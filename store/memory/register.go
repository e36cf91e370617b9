package memory

import (
	"context"

	"github.com/ratekeeper/ratekeeper/store"
)

// init makes store.Open("memory") (and "") open a new Store.
func init() {
	store.Register(store.Memory, store.Driver{
		Open: func(_ context.Context, _ string, opts store.Options) (store.Store, error) {
			s, err := New(opts)
			if err != nil {
				return nil, err // a nil Store, not one holding a nil pointer
			}
			return s, nil
		},
	})
}
