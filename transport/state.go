package transport

import (
	"context"
	"sort"
	"sync"
	"time"

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

// Slot names what one credential spends from: its owner (secondary
// limits) and its bucket for the request's resource. Credentials of one
// owner share both.
type Slot struct {
	Owner  OwnerID
	Bucket BucketID
	// Also are the buckets a credential whose owner is not known yet may
	// share (see quota.Option.Also).
	Also []BucketID
	// Scope is the bucket of the request's scope (see quota.Option.Scope):
	// the zero BucketID for none. Its Resource is the scope's pattern.
	Scope BucketID
	// Draws are the other buckets of the owner the request spends from
	// at once (see quota.Option.Draws): a language model's requests and
	// input tokens beside the bucket that paces it. Each is settled on
	// its own, as a slot with no owner and that bucket.
	Draws []Draw
}

// Draw is a bucket a slot spends from beside its Bucket, and how much of
// it (see quota.Draw).
type Draw struct {
	Bucket BucketID
	Units  int64
}

// QuotaDraws loads ds into quota.Draws, each bucket by bucket.
func QuotaDraws(ds []Draw, bucket func(BucketID) *quota.Bucket) []quota.Draw {
	if len(ds) == 0 {
		return nil
	}
	out := make([]quota.Draw, len(ds))
	for i, d := range ds {
		out[i] = quota.Draw{Bucket: bucket(d.Bucket), Units: d.Units}
	}
	return out
}

// ReserveParams describe one reservation.
type ReserveParams struct {
	// Slots are the request's credentials in the caller's order of
	// preference: among slots that can go equally soon the first wins.
	Slots []Slot
	// Ask is what the request needs of its owner and bucket.
	Ask quota.Ask
	// Lease is the reservation's own lease: its ID settles it, and it
	// lapses at its Until if the request never reports back.
	Lease quota.Lease
	// Now is the time of the decision.
	Now time.Time
	// Clock, if set, reads the time on Now's clock: a State whose
	// decision waits (a database outage waited out, a turn behind other
	// transactions) decides at the time it reads then, not at Now, so
	// that what it commits (a write's spacing, a lease's end) runs from
	// when the request goes.
	Clock func() time.Time
	// Waited says the request already waited once: it is likely to wait
	// again, so a State that must lock to decide may first look without
	// locking (see store/quotastate), and lock only when the request can go.
	Waited bool
}

// Decision is what State.Reserve decided: the slot it chose and
// committed (Wait 0), or the slot that can go soonest and how long that
// is, nothing changed.
type Decision struct {
	// Index is the slot's, in ReserveParams.Slots.
	Index int
	// Wait is 0 for a reservation made, else how long until Index can go.
	Wait time.Duration
	// OnAnswer says the wait is on requests in flight
	// (quota.Decision.OnAnswer): Wait is only the latest moment, and an
	// answer may end it.
	OnAnswer bool
	// Scoped says the wait is a scope's (quota.Decision.Scoped).
	Scoped bool
}

// DecisionOf splits quota's decision into State.Reserve's two results: the
// decision, and the *quota.ReserveError of a request no slot could ever
// allow.
func DecisionOf(d quota.Decision) (Decision, error) {
	return Decision{Index: d.Index, Wait: d.Wait, OnAnswer: d.OnAnswer, Scoped: d.Scoped}, d.Err
}

// SettleParams describe the end of one reservation.
type SettleParams struct {
	// Slot is where the reservation was taken. A zero Owner leaves the
	// owner alone (a reading that concerns only a bucket).
	Slot Slot
	// Lease is the reservation's lease ID; 0 for a reading learnt
	// outside any reservation.
	Lease uint64
	// Answer is what the request's outcome tells; a nil Reading only
	// releases the reservation.
	Answer quota.Answer
	// Now is when the outcome arrived.
	Now time.Time
}

// State keeps bucket and owner state and runs package quota's one
// algorithm on it atomically. Every implementation — this process's memory
// (NewMemoryState), SQLite and PostgreSQL (package store/quotastate) — does
// exactly this, and passes the same suite (package transport/statetest):
//
//   - Reserve loads the owner and bucket of every slot and runs
//     quota.Reserve on them, within one lock or one transaction, so no
//     other reservation can slip in between the decision and its commit.
//     The transport passes a context without cancellation here too (a
//     transaction cut short could commit without the caller knowing), and
//     gives the reservation back if the request ended meanwhile.
//     It returns its Decision: the chosen slot, or the slot that can go
//     soonest and how long that is, having changed nothing; its error is
//     the state's failure, or a *quota.ReserveError.
//   - Settle runs quota.Settle on one slot's owner and bucket, atomically.
//     The transport passes a context that the request's cancellation does
//     not end (context.WithoutCancel), so a cancelled or timed-out request
//     still gives back what it took; a State that does I/O bounds it with a
//     timeout of its own. It may write the answer later (see store/quotastate),
//     provided its next Reserve sees it.
//   - Buckets and Owners return a copy of every bucket and owner known,
//     for status displays and tests.
//   - FreeHolders releases, in every owner and bucket, the reservations
//     whose holder (quota.Lease.Holder) gone reports as gone, and returns
//     how many it released: a process killed with its requests in flight
//     holds no quota or concurrency slot beyond the moment another
//     process proves it gone.
type State interface {
	Reserve(ctx context.Context, p *ReserveParams) (Decision, error)
	Settle(ctx context.Context, p *SettleParams) error
	Buckets(ctx context.Context) (map[BucketID]quota.Bucket, error)
	Owners(ctx context.Context) (map[OwnerID]quota.Owner, error)
	FreeHolders(ctx context.Context, gone func(holder string) bool) (int, error)
}

// Heartbeats is implemented by a State that processes on several machines
// share (see package store/quotastate): each process beats regularly, and a
// holder of another machine whose beat is older than HolderTimeout is
// gone (a holder of this machine is proven gone by its process, see
// package internal/holder).
type Heartbeats interface {
	Beat(ctx context.Context, holder string, now time.Time) error
	Beats(ctx context.Context) (map[string]time.Time, error)
}

// Clocked is implemented by a State that reads the time or sets timers
// of its own (store/quotastate: shared times kept on the database's clock,
// so machines whose clocks differ agree; the age of what it saw; its
// write-batching and expiry timers): New gives it the transport's Clock,
// before any use, so that it reads and waits on the transport's one clock
// (and measures that clock's offset to the database's). Without it such a
// State uses the system's clock (SystemClock).
type Clocked interface {
	UseClock(c Clock)
}

// Waker is implemented by a State shared with other processes that can
// tell when another process's settle may have freed quota or a
// concurrency slot (store/quotastate: PostgreSQL's LISTEN/NOTIFY, SQLite's
// data_version). New registers the transport's waiters: fn wakes the
// oldest, which passes the wake on; waiting reports whether any request
// waits, for a State that must poll to notice. With a Waker, a request
// waiting on requests in flight sleeps until the time its decision gave
// (the earliest lease lapse), woken early by an answer in any process,
// instead of asking again every round trip.
type Waker interface {
	OnWake(fn func(), waiting func() bool)
}

// CredentialRecord is what a shared store remembers of a credential, so
// a restarted process knows invalid tokens and owners without spending a
// request. It never holds the token.
type CredentialRecord struct {
	Invalid bool   `json:"invalid,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// RetryAt is when an invalid mark is tried again (zero in records
	// written before marks expired: ValidatedAt plus the transport's
	// InvalidRetry).
	RetryAt   time.Time `json:"retry_at,omitzero"`
	OwnerID   string    `json:"owner_id,omitempty"`
	OwnerName string    `json:"owner_name,omitempty"`
	// Bucket is the bucket owner learnt from answers' counters when the
	// owner itself is not known: another token's identity (one bucket
	// with it) or the token's own.
	Bucket      string    `json:"bucket,omitempty"`
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

// memoryState guards every bucket and owner with one mutex: each decision
// is a few hundred nanoseconds of arithmetic, far below what a finer lock
// would save.
type memoryState struct {
	mu      sync.Mutex
	buckets map[BucketID]*quota.Bucket
	owners  map[OwnerID]*quota.Owner
}

func (m *memoryState) owner(id OwnerID) *quota.Owner {
	o, ok := m.owners[id]
	if !ok {
		o = &quota.Owner{}
		m.owners[id] = o
	}
	return o
}

func (m *memoryState) bucket(id BucketID) *quota.Bucket {
	b, ok := m.buckets[id]
	if !ok {
		nb := quota.NewBucket()
		b = &nb
		m.buckets[id] = b
	}
	return b
}

func (m *memoryState) Reserve(_ context.Context, p *ReserveParams) (Decision, error) {
	var buf [8]quota.Option
	opts := buf[:0]
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range p.Slots {
		opt := quota.Option{Owner: m.owner(s.Owner), Bucket: m.bucket(s.Bucket)}
		if s.Scope != (BucketID{}) {
			opt.Scope = m.bucket(s.Scope)
		}
		for _, id := range s.Also {
			opt.Also = append(opt.Also, m.bucket(id))
		}
		opt.Draws = QuotaDraws(s.Draws, m.bucket)
		opts = append(opts, opt)
	}
	return DecisionOf(quota.Decide(opts, &p.Ask, p.Lease, p.Now))
}

func (m *memoryState) Settle(_ context.Context, p *SettleParams) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var o *quota.Owner
	if p.Slot.Owner != (OwnerID{}) {
		o = m.owner(p.Slot.Owner)
	}
	var also []*quota.Bucket
	for _, id := range p.Slot.Also {
		also = append(also, m.bucket(id))
	}
	var scope *quota.Bucket
	if p.Slot.Scope != (BucketID{}) {
		scope = m.bucket(p.Slot.Scope)
	}
	quota.SettleScoped(o, m.bucket(p.Slot.Bucket), scope, p.Lease, &p.Answer, p.Now, also...)
	return nil
}

func (m *memoryState) FreeHolders(_ context.Context, gone func(string) bool) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, o := range m.owners {
		n += o.FreeHolders(gone)
	}
	for _, b := range m.buckets {
		n += b.FreeHolders(gone)
	}
	return n, nil
}

func (m *memoryState) Buckets(context.Context) (map[BucketID]quota.Bucket, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copies(m.buckets, func(b *quota.Bucket) { *b = b.Clone() }), nil
}

func (m *memoryState) Owners(context.Context) (map[OwnerID]quota.Owner, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copies(m.owners, func(o *quota.Owner) { *o = o.Clone() }), nil
}

// copies copies every value of a state map, and with deepen what the value
// shares with its original (slices, maps), so a caller reads them while
// requests go on.
func copies[K comparable, V any](from map[K]*V, deepen func(*V)) map[K]V {
	out := make(map[K]V, len(from))
	for k, v := range from {
		c := *v
		deepen(&c)
		out[k] = c
	}
	return out
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
