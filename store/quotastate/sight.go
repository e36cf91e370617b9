package quotastate

import (
	"context"
	"errors"
	"slices"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/transport"
)

var _ transport.SightStore = (*State)(nil)

// LoadBlind implements transport.SightStore: by credential ID, the owners
// each credential of provider cannot see, as any process of the fleet
// learnt them.
func (st *State) LoadBlind(ctx context.Context, provider string) (map[string][]string, error) {
	k := key("sight", provider)
	rec, err := st.s.Get(ctx, k)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var v map[string][]string
	if !st.unmarshal(rec, &v) {
		return nil, nil
	}
	return v, nil
}

// AddBlind implements transport.SightStore. It adds to what the record
// holds, in one transaction, so processes learning at once lose nothing.
func (st *State) AddBlind(ctx context.Context, provider, id, owner string) error {
	return update(ctx, st, key("sight", provider), func() map[string][]string { return map[string][]string{} },
		func(v *map[string][]string) error {
			if *v == nil {
				*v = map[string][]string{}
			}
			if owners := (*v)[id]; !slices.Contains(owners, owner) {
				(*v)[id] = append(owners, owner)
			}
			return nil
		})
}
