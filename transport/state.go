package transport

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
)

// BucketID names one server-side quota: a resource of one owner at one
// provider. Tokens of one owner share it. Provider is the provider's name
// and API root, "github https://api.github.com", so a name moved to another
// server (a simulator, a new Enterprise host) does not inherit the old
// server's quota in shared state.
type BucketID struct {
	Provider, Owner, Resource string
}

// String returns "provider/owner/resource", the key shared stores use.
func (id BucketID) String() string { return id.Provider + "/" + id.Owner + "/" + id.Resource }

// OwnerID names one credential owner at one provider: the scope of
// secondary limits.
type OwnerID struct {
	Provider, Owner string
}

// String returns "provider/owner".
func (id OwnerID) String() string { return id.Provider + "/" + id.Owner }

// State keeps bucket and owner state. Each update runs fn atomically on
// the current value; fn may be called more than once by stores that retry
// on conflict, so it must only change the value it is given. The memory
// State serves one process; shared stores let several processes spend one
// quota together.
type State interface {
	UpdateBucket(ctx context.Context, id BucketID, fn func(*quota.Bucket) error) error
	UpdateOwner(ctx context.Context, id OwnerID, fn func(*quota.Owner) error) error
	// Buckets returns a copy of every bucket known, for status displays.
	Buckets(ctx context.Context) (map[BucketID]quota.Bucket, error)
}

// CredentialRecord is what a shared store remembers of a credential, so
// a restarted process knows invalid tokens and owners without spending a
// request. It never holds the token.
type CredentialRecord struct {
	Invalid     bool      `json:"invalid,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	OwnerID     string    `json:"owner_id,omitempty"`
	OwnerName   string    `json:"owner_name,omitempty"`
	ValidatedAt time.Time `json:"validated_at,omitzero"`
}

// CredentialStore keeps CredentialRecords by provider and credential ID
// (creds.Credential.ID).
type CredentialStore interface {
	LoadCredential(ctx context.Context, provider, id string) (CredentialRecord, bool, error)
	SaveCredential(ctx context.Context, provider, id string, rec CredentialRecord) error
}

// NewMemoryState returns a State held in this process's memory.
func NewMemoryState() State {
	return &memoryState{buckets: map[BucketID]*quota.Bucket{}, owners: map[OwnerID]*quota.Owner{}}
}

// memoryState guards every bucket and owner with one mutex: each update is
// a few hundred nanoseconds of arithmetic, far below what a finer lock
// would save.
type memoryState struct {
	mu      sync.Mutex
	buckets map[BucketID]*quota.Bucket
	owners  map[OwnerID]*quota.Owner
}

func (m *memoryState) UpdateBucket(_ context.Context, id BucketID, fn func(*quota.Bucket) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.buckets[id]
	if !ok {
		nb := quota.NewBucket()
		b = &nb
		m.buckets[id] = b
	}
	return fn(b)
}

func (m *memoryState) UpdateOwner(_ context.Context, id OwnerID, fn func(*quota.Owner) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.owners[id]
	if !ok {
		o = &quota.Owner{}
		m.owners[id] = o
	}
	return fn(o)
}

// The memory state's fast paths: owner and bucket under one lock, no
// closures, so a request costs no allocations here.

func (m *memoryState) entries(sp *spend) (*quota.Owner, *quota.Bucket) {
	o, ok := m.owners[sp.owner]
	if !ok {
		o = &quota.Owner{}
		m.owners[sp.owner] = o
	}
	b, ok := m.buckets[sp.bucket]
	if !ok {
		nb := quota.NewBucket()
		b = &nb
		m.buckets[sp.bucket] = b
	}
	return o, b
}

func (m *memoryState) wait(sp *spend, now time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, b := m.entries(sp)
	w := o.Wait(sp.sec, sp.cost, now)
	if !sp.free {
		w = max(w, b.Wait(sp.policy, now))
	}
	return w
}

func (m *memoryState) reserve(sp *spend, now time.Time, holder string, lease time.Duration) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, b := m.entries(sp)
	if w := o.Wait(sp.sec, sp.cost, now); w > 0 {
		return w
	}
	if sp.free {
		b.Holders = ensureHolder(b.Holders, holder, now.Add(lease))
	} else if w := b.Reserve(sp.policy, now, holder, lease); w > 0 {
		return w
	}
	o.Reserve(sp.sec, sp.cost, now, holder, lease)
	return 0
}

func (m *memoryState) settle(sp *spend, r *headers.Reading, now time.Time, holder string, counted bool, def quota.Default, jitter float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, b := m.entries(sp)
	if sp.sec.MaxConcurrent > 0 {
		o.Release(holder, 1)
	}
	if r == nil {
		b.Release(holder, 1)
		return
	}
	o.Observe(r, now, jitter)
	b.Observe(r, now, holder, 1, counted, def)
}

func (m *memoryState) Buckets(context.Context) (map[BucketID]quota.Bucket, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[BucketID]quota.Bucket, len(m.buckets))
	for id, b := range m.buckets {
		c := *b
		c.Holders = nil
		out[id] = c
	}
	return out, nil
}

// sortedBucketIDs orders ids for stable output.
func sortedBucketIDs(m map[BucketID]quota.Bucket) []BucketID {
	ids := make([]BucketID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		a, b := ids[i], ids[j]
		if a.Provider != b.Provider {
			return a.Provider < b.Provider
		}
		if a.Owner != b.Owner {
			return a.Owner < b.Owner
		}
		return a.Resource < b.Resource
	})
	return ids
}
