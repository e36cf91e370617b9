// Package statestore keeps the transport's quota state — buckets, owners'
// secondary limits, what is known of each credential — in a shared
// store.Store, so that several processes on one machine (SQLite) or many
// machines (PostgreSQL) spend one quota together, and a restarted process
// knows remaining, reset and invalid tokens without spending a request.
//
// It only encodes: each update is one store.Update (an atomic
// read-modify-write), and the pacing formula stays in package quota. A
// value that cannot be decoded (a corrupted row) is ignored — the bucket
// starts afresh and is rebuilt from the next response — and logged once
// per key.
//
// Keys:
//
//	bucket/PROVIDER/OWNER/RESOURCE   a quota.Bucket, JSON
//	owner/PROVIDER/OWNER             a quota.Owner, JSON
//	cred/PROVIDER/ID                 a transport.CredentialRecord, JSON
//
// with each part path-escaped; OWNER and ID are the credential package's
// identities ("user:123", "token:" and a truncated hash), never a token.
package statestore

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"

	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/transport"
)

// State implements transport.State and transport.CredentialStore over a
// store.Store.
type State struct {
	s      store.Store
	log    *slog.Logger
	warned sync.Map // key → struct{}: corrupted values are logged once
}

// New returns a State keeping its values in s. log receives the one-time
// warnings about corrupted values (nil: slog.Default()).
func New(s store.Store, log *slog.Logger) *State {
	if log == nil {
		log = slog.Default()
	}
	return &State{s: s, log: log}
}

var (
	_ transport.State           = (*State)(nil)
	_ transport.CredentialStore = (*State)(nil)
)

// errUnchanged aborts an update that changed nothing, so a pure read
// writes nothing back.
var errUnchanged = errors.New("unchanged")

func key(kind string, parts ...string) string {
	var b strings.Builder
	b.WriteString(kind)
	for _, p := range parts {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(p))
	}
	return b.String()
}

// update decodes the value under k into a fresh T (reset by zero when
// absent or corrupted), runs fn on it and writes it back if it changed.
func update[T any](ctx context.Context, st *State, k string, zero func() T, fn func(*T) error) error {
	err := st.s.Update(ctx, k, func(rec *store.Record) error {
		v := zero()
		if rec.Value != nil {
			if err := json.Unmarshal(rec.Value, &v); err != nil {
				st.corrupt(k, err)
				v = zero()
			}
		}
		if err := fn(&v); err != nil {
			return err
		}
		enc, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if rec.Value != nil && string(enc) == string(rec.Value) {
			return errUnchanged
		}
		rec.Value = enc
		return nil
	})
	if errors.Is(err, errUnchanged) {
		return nil
	}
	return err
}

func (st *State) corrupt(k string, err error) {
	if _, seen := st.warned.LoadOrStore(k, struct{}{}); !seen {
		st.log.Warn("ignoring a corrupted value in the shared state; it is rebuilt from the next response", "key", k, "err", err)
	}
}

// UpdateBucket implements transport.State.
func (st *State) UpdateBucket(ctx context.Context, id transport.BucketID, fn func(*quota.Bucket) error) error {
	return update(ctx, st, key("bucket", id.Provider, id.Owner, id.Resource), quota.NewBucket, fn)
}

// UpdateOwner implements transport.State.
func (st *State) UpdateOwner(ctx context.Context, id transport.OwnerID, fn func(*quota.Owner) error) error {
	return update(ctx, st, key("owner", id.Provider, id.Owner), func() quota.Owner { return quota.Owner{} }, fn)
}

// Buckets implements transport.State.
func (st *State) Buckets(ctx context.Context) (map[transport.BucketID]quota.Bucket, error) {
	recs, err := st.s.List(ctx, "bucket/")
	if err != nil {
		return nil, err
	}
	out := make(map[transport.BucketID]quota.Bucket, len(recs))
	for _, rec := range recs {
		parts := strings.Split(strings.TrimPrefix(rec.Key, "bucket/"), "/")
		if len(parts) != 3 {
			continue
		}
		var id transport.BucketID
		var ok1, ok2, ok3 bool
		id.Provider, ok1 = unescape(parts[0])
		id.Owner, ok2 = unescape(parts[1])
		id.Resource, ok3 = unescape(parts[2])
		if !ok1 || !ok2 || !ok3 {
			continue
		}
		b := quota.NewBucket()
		if err := json.Unmarshal(rec.Value, &b); err != nil {
			st.corrupt(rec.Key, err)
			continue
		}
		b.Holders = nil
		out[id] = b
	}
	return out, nil
}

func unescape(s string) (string, bool) {
	v, err := url.PathUnescape(s)
	return v, err == nil
}

// LoadCredential implements transport.CredentialStore.
func (st *State) LoadCredential(ctx context.Context, provider, id string) (transport.CredentialRecord, bool, error) {
	k := key("cred", provider, id)
	rec, err := st.s.Get(ctx, k)
	if errors.Is(err, store.ErrNotFound) {
		return transport.CredentialRecord{}, false, nil
	}
	if err != nil {
		return transport.CredentialRecord{}, false, err
	}
	var cr transport.CredentialRecord
	if err := json.Unmarshal(rec.Value, &cr); err != nil {
		st.corrupt(k, err)
		return transport.CredentialRecord{}, false, nil
	}
	return cr, true, nil
}

// SaveCredential implements transport.CredentialStore.
func (st *State) SaveCredential(ctx context.Context, provider, id string, cr transport.CredentialRecord) error {
	return update(ctx, st, key("cred", provider, id), func() transport.CredentialRecord { return transport.CredentialRecord{} },
		func(v *transport.CredentialRecord) error {
			*v = cr
			return nil
		})
}
