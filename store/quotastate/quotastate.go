// Package quotastate keeps the transport's quota state — buckets, owners'
// secondary limits, what is known of each credential, holders' heartbeats
// — in a shared store.Store (SQLite or PostgreSQL), so that several processes on one machine (SQLite) or many
// machines (PostgreSQL) spend one quota together, and a restarted process
// knows remaining, reset and invalid tokens without spending a request.
//
// It only encodes: each update is one store.Update (an atomic
// read-modify-write), and the pacing formula, like every rule of the
// blocks it takes ahead (quota.Block), stays in package quota. A
// value that cannot be decoded (a corrupted row) is ignored — the bucket
// starts afresh and is rebuilt from the next response — and logged once
// per key.
//
// Keys:
//
//	bucket/PROVIDER/OWNER/RESOURCE   a quota.Bucket, JSON
//	owner/PROVIDER/OWNER             a quota.Owner, JSON
//	cred/PROVIDER/ID                 a transport.CredentialRecord, JSON
//	learn/PROVIDER                   the learning turn (learning.go)
//
// with each part path-escaped; OWNER and ID are the credential package's
// identities ("user:123", "token:" and a truncated hash), never a token.
//
// Time: a State reads the time and sets its timers on one clock, the
// transport's (transport.Clocked; the system's when none is given), and
// keeps the times it shares with other processes on the database's
// (clock.go).
//
// Layer 3 of docs/architecture.md: it owns the shared encoding of quota
// state, and must not pace.
package quotastate

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/transport"
)

// State implements transport.State and transport.CredentialStore over a
// store.Store.
type State struct {
	s      store.Store
	board  store.Newsboard // s's, or nil: see news
	log    *slog.Logger
	warned sync.Map // key → struct{}: corrupted values are logged once

	// FlushDelay is the longest an answer that pauses nothing waits to
	// be written (see Settle); set it before use. Default
	// DefaultFlushDelay.
	FlushDelay time.Duration

	mu      sync.Mutex
	pending []*transport.SettleParams
	timer   *alarm // on the State's clock
	armed   bool   // timer is set and has not fired yet
	lazy    bool   // for blockFlushDelay
	closed  bool
	// writing counts every transaction carrying settles taken from
	// pending, so that Flush can wait for those already under way: once
	// pending is empty, an answer may still be in a transaction that has
	// not committed.
	writing writings

	races   atomic.Int64 // see Races
	decoded decodings    // see decodeAll
	batch   batches      // under mu; see reserveTogether
	view    view         // see look
	clk     clock        // see ClockOffset
	wake    wakes        // see OnWake
	blocks  blocks       // see ahead.go
}

// news is the store value's news (store.Newsboard): one atomic load; 0 on
// a store without.
func (st *State) news() uint64 {
	if st.board == nil {
		return 0
	}
	return st.board.News()
}

// DefaultFlushDelay is State.FlushDelay's default.
const DefaultFlushDelay = 2 * time.Millisecond

// New returns a State keeping its values in s. log receives the one-time
// warnings about corrupted values (nil: slog.Default()). Close it before
// closing s, so the answers waiting to be written are.
func New(s store.Store, log *slog.Logger) *State {
	if log == nil {
		log = slog.Default()
	}
	board, _ := s.(store.Newsboard)
	return &State{s: s, board: board, log: log, FlushDelay: DefaultFlushDelay}
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

func bucketKey(id transport.BucketID) string {
	return bucketKeys.get(id, func() string { return key("bucket", id.Provider, id.Owner, id.Resource) })
}

func ownerKey(id transport.OwnerID) string {
	return ownerKeys.get(id, func() string { return key("owner", id.Provider, id.Owner) })
}

// ownerKeys and bucketKeys remember the rows' keys: a decision and its
// answer name their rows several times, and building a key costs more than
// a decision on a block's copy (ahead.go).
var (
	ownerKeys  keyCache[transport.OwnerID]
	bucketKeys keyCache[transport.BucketID]
)

// keyCache maps IDs to their rows' keys, forgetting them all past maxKeys.
type keyCache[K comparable] struct {
	mu   sync.RWMutex
	keys map[K]string
}

const maxKeys = 4096

func (c *keyCache[K]) get(id K, build func() string) string {
	c.mu.RLock()
	k, ok := c.keys[id]
	c.mu.RUnlock()
	if ok {
		return k
	}
	k = build()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil || len(c.keys) >= maxKeys {
		c.keys = make(map[K]string)
	}
	c.keys[id] = k
	return k
}

// decode reads a record's JSON into v, which is left as the caller's zero
// value when the record is absent or corrupted.
func (st *State) decode(rec *store.Record, v any) {
	if rec.Value == nil {
		return
	}
	if err := json.Unmarshal(rec.Value, v); err != nil {
		st.corrupt(rec.Key, err)
	}
}

// encode writes v's JSON into rec; the store writes it only if it changed.
func encode(rec *store.Record, v any) error {
	enc, err := json.Marshal(v)
	if err != nil {
		return err
	}
	rec.Value = enc
	return nil
}

// loaded is the owners and buckets of one transaction, decoded from its
// records: slots of one owner share them.
type loaded struct {
	keys    []string
	owners  map[string]*quota.Owner
	buckets map[string]*quota.Bucket
}

func newLoaded(n int) *loaded {
	return &loaded{owners: make(map[string]*quota.Owner, n), buckets: make(map[string]*quota.Bucket, n)}
}

func (l *loaded) addOwner(k string) {
	if _, ok := l.owners[k]; !ok {
		l.owners[k] = nil
		l.keys = append(l.keys, k)
	}
}

func (l *loaded) addBucket(k string) {
	if _, ok := l.buckets[k]; !ok {
		l.buckets[k] = nil
		l.keys = append(l.keys, k)
	}
}

// addSettle adds the rows a settle touches; it returns their keys ("" for
// no owner).
func (l *loaded) addSettle(p *transport.SettleParams) (okey, bkey string) {
	if p.Slot.Owner != (transport.OwnerID{}) {
		okey = ownerKey(p.Slot.Owner)
		l.addOwner(okey)
	}
	bkey = bucketKey(p.Slot.Bucket)
	l.addBucket(bkey)
	if p.Slot.Scope != (transport.BucketID{}) {
		l.addBucket(bucketKey(p.Slot.Scope))
	}
	for _, id := range p.Slot.Also {
		l.addBucket(bucketKey(id))
	}
	return okey, bkey
}

// decodeAll fills l's owners and buckets from recs, each a copy of its
// own (decisions change them).
func (st *State) decodeAll(l *loaded, recs []*store.Record) {
	for _, rec := range recs {
		if _, ok := l.owners[rec.Key]; ok {
			o := cachedCopy(&st.decoded, rec, func(c *decoding) *quota.Owner { return &c.owner }, func() quota.Owner {
				var o quota.Owner
				st.decode(rec, &o)
				return o
			})
			l.owners[rec.Key] = &o
			continue
		}
		b := cachedCopy(&st.decoded, rec, func(c *decoding) *quota.Bucket { return &c.bucket }, func() quota.Bucket {
			b := quota.NewBucket()
			st.decode(rec, &b)
			return b
		})
		l.buckets[rec.Key] = &b
	}
}

// encodeAll writes every loaded value back into its record; the store
// writes only those that changed.
func encodeAll(l *loaded, recs []*store.Record) error {
	for _, rec := range recs {
		var v any
		if o, ok := l.owners[rec.Key]; ok {
			v = o
		} else {
			v = l.buckets[rec.Key]
		}
		if err := encode(rec, v); err != nil {
			return err
		}
	}
	return nil
}

// addSlots adds the rows of slots and returns each slot's keys.
func (l *loaded) addSlots(slots []transport.Slot) slotRows {
	r := slotRows{owners: make([]string, len(slots)), buckets: make([]string, len(slots))}
	for i, s := range slots {
		r.owners[i], r.buckets[i] = ownerKey(s.Owner), bucketKey(s.Bucket)
		l.addOwner(r.owners[i])
		l.addBucket(r.buckets[i])
		if s.Scope != (transport.BucketID{}) {
			l.addBucket(bucketKey(s.Scope))
		}
		for _, id := range s.Also {
			l.addBucket(bucketKey(id))
		}
		for _, d := range s.Draws {
			l.addBucket(bucketKey(d.Bucket))
		}
	}
	return r
}

// decide runs quota.Decide for p on the loaded owners and buckets (r
// holds each slot's keys).
func (l *loaded) decide(r slotRows, p *transport.ReserveParams) quota.Decision {
	opts := make([]quota.Option, len(p.Slots))
	for i, s := range p.Slots {
		opts[i] = quota.Option{Owner: l.owners[r.owners[i]], Bucket: l.buckets[r.buckets[i]]}
		if s.Scope != (transport.BucketID{}) {
			opts[i].Scope = l.buckets[bucketKey(s.Scope)]
		}
		for _, id := range s.Also {
			opts[i].Also = append(opts[i].Also, l.buckets[bucketKey(id)])
		}
		opts[i].Draws = transport.QuotaDraws(s.Draws, func(id transport.BucketID) *quota.Bucket { return l.buckets[bucketKey(id)] })
	}
	return quota.Decide(opts, &p.Ask, p.Lease, p.Now)
}

// told is what settles written in one transaction tell other processes:
// frees, that one freed what a request of another process may be waiting
// for (see freesForWaiters) or is news; news, that one is news to the
// blocks other processes hold (quota.BlockNews). Either is notified; news
// is also counted in the store value's news (store.Newsboard), which
// every block checks before each unit.
type told struct{ frees, news bool }

// applySettles runs quota.Settle for each settle on the loaded values, and
// reports what they tell other processes.
func applySettles(l *loaded, settles []*transport.SettleParams) (t told) {
	for _, p := range settles {
		var o *quota.Owner
		if p.Slot.Owner != (transport.OwnerID{}) {
			o = l.owners[ownerKey(p.Slot.Owner)]
		}
		var also []*quota.Bucket
		for _, id := range p.Slot.Also {
			also = append(also, l.buckets[bucketKey(id)])
		}
		b := l.buckets[bucketKey(p.Slot.Bucket)]
		var scope *quota.Bucket
		if p.Slot.Scope != (transport.BucketID{}) {
			scope = l.buckets[bucketKey(p.Slot.Scope)]
		}
		if quota.BlockNews(b, &p.Answer, p.Now) {
			t.news, t.frees = true, true
		}
		t.frees = t.frees || freesForWaiters(o, b, p)
		quota.SettleScoped(o, b, scope, p.Lease, &p.Answer, p.Now, also...)
	}
	return t
}

// Reserve implements transport.State. A request that has not waited may
// be decided together with others of this process (reserveTogether);
// otherwise, and when that could not send it, it is decided alone
// (reserveAlone).
func (st *State) Reserve(ctx context.Context, p *transport.ReserveParams) (transport.Decision, error) {
	if i, ok := st.fromBlock(p); ok {
		return transport.Decision{Index: i}, nil
	}
	if p.Waited {
		return st.reserveAlone(ctx, p)
	}
	return st.reserveTogether(ctx, p)
}

// reserveAlone decides one request. It locks only what it chooses:
//
//  1. it reads a snapshot of every slot's owner and bucket, locking
//     nothing (store.Snapshot), applies the settles waiting to be written,
//     and decides (quota.Decide);
//  2. a wait or an error commits nothing of its own: it is returned (the
//     settles, if any, are written in a transaction of their own);
//  3. a slot that can go now is locked alone — its owner and bucket rows
//     (and the buckets it may share), with the settles' rows — and decided
//     again on what is under the lock. When another process wrote those
//     rows since the snapshot (their versions moved) and the slot can no
//     longer go, nothing of the reservation is written, and Reserve reads
//     and chooses again, at most maxRaces times before it locks every
//     slot's rows (reserveLocked) so that a busy pool still ends.
//
// Decisions on different buckets thus lock different rows and run in
// parallel, and no lock is held while deciding on rows the transaction
// will not write (on SQLite, the one write lock of every process). When
// every slot spends from the same rows (one credential, or tokens of one
// owner) there is nothing to choose: a request that has not waited yet
// locks them at once, saving the snapshot's read.
//
// Every decision, on a snapshot or under the lock, is taken at the time it
// is taken: p.Now moved on to p.Clock's time then (see reserveOnDBClock),
// past a database outage waited out.
func (st *State) reserveAlone(ctx context.Context, p *transport.ReserveParams) (transport.Decision, error) {
	// The transport's context has no end (a reservation cut short could
	// commit unseen): bound the transaction here.
	ctx, cancel := context.WithTimeout(ctx, st.txTimeout(settleTimeout))
	defer cancel()
	off, err := st.offset(ctx)
	if err != nil {
		return transport.Decision{}, err
	}
	restore, fresh := reserveOnDBClock(p, off)
	defer restore()
	defer st.writing.begin()()
	settles := st.takePending()
	if oneChoice(p.Slots) && !p.Waited {
		// Nothing to choose among (one credential, or tokens of one
		// owner): the snapshot would only add a read. A request that
		// already waited is likely to wait again, which the snapshot
		// tells without a write transaction (on SQLite, the write lock
		// of every process).
		return st.reserveLocked(ctx, p, settles, fresh)
	}
	// A request that already waited would likely see a wait in the view
	// and read anyway.
	useView := !p.Waited
	for races := 0; races < maxRaces; {
		l, r := slotKeys(p, settles)
		snap, fromView, err := st.look(ctx, l, useView)
		useView = false
		if err != nil {
			st.requeue(settles)
			return transport.Decision{}, err
		}
		applySettles(l, settles)
		fresh()
		d, refused := transport.DecisionOf(l.decide(r, p))
		if d.Wait > 0 || refused != nil || d.Index < 0 {
			if fromView {
				// What this process last saw says wait: the rows
				// may have moved since; a read tells.
				continue
			}
			if err := st.write(ctx, settles); err != nil {
				st.requeue(settles)
				return d, err
			}
			return d, refused
		}
		won, err := st.commitChosen(ctx, []choice{{p: p, i: d.Index, fresh: fresh}}, snap, settles)
		if err != nil {
			st.requeue(settles)
			return d, err
		}
		settles = nil // written by commitChosen, won or lost
		if won[0] {
			return d, nil
		}
		races++
	}
	return st.reserveLocked(ctx, p, settles, fresh)
}

// maxRaces bounds how often Reserve chooses again after losing its chosen
// slot to another process before it locks the whole pool.
const maxRaces = 4

// Races returns how many times a Reserve lost the slot it had chosen on a
// snapshot to another writer (the rows' versions had moved and the slot
// could no longer go) and chose again.
func (st *State) Races() int64 { return st.races.Load() }

// oneChoice reports whether every slot spends from the same rows.
func oneChoice(slots []transport.Slot) bool {
	for _, s := range slots[min(1, len(slots)):] {
		if s.Owner != slots[0].Owner || s.Bucket != slots[0].Bucket || s.Scope != slots[0].Scope || !slices.Equal(s.Also, slots[0].Also) || !slices.Equal(s.Draws, slots[0].Draws) {
			return false
		}
	}
	return true
}

// slotKeys lists the rows of p's slots and of settles in a fresh loaded,
// and each slot's owner and bucket key.
func slotKeys(p *transport.ReserveParams, settles []*transport.SettleParams) (*loaded, slotRows) {
	l := newLoaded(2 * len(p.Slots))
	r := l.addSlots(p.Slots)
	for _, sp := range settles {
		l.addSettle(sp)
	}
	return l, r
}

// look decodes l's rows into l from the view when useView and the view
// holds them all fresh, else from a snapshot read; it returns each row's
// version and whether they came from the view.
func (st *State) look(ctx context.Context, l *loaded, useView bool) (map[string]int64, bool, error) {
	if useView {
		if recs, ok := st.view.get(l.keys, st.now(), store.OutageEpoch(st.s)); ok {
			return st.decodeVersions(l, recs), true, nil
		}
	}
	snap, err := st.snapshot(ctx, l)
	return snap, false, err
}

// snapshot reads l's rows without locking and decodes them into l; it
// returns each row's version.
func (st *State) snapshot(ctx context.Context, l *loaded) (map[string]int64, error) {
	var recs []store.Record
	if sn, ok := st.s.(store.Snapshot); ok {
		var err error
		if recs, err = sn.GetMany(ctx, l.keys); err != nil {
			return nil, err
		}
	} else {
		for _, k := range l.keys {
			rec, err := st.s.Get(ctx, k)
			if errors.Is(err, store.ErrNotFound) {
				rec = store.Record{Key: k}
			} else if err != nil {
				return nil, err
			}
			recs = append(recs, rec)
		}
	}
	st.view.put(recs, st.now())
	return st.decodeVersions(l, recs), nil
}

// decodeVersions decodes recs into l and returns each one's version.
func (st *State) decodeVersions(l *loaded, recs []store.Record) map[string]int64 {
	ptrs := make([]*store.Record, len(recs))
	versions := make(map[string]int64, len(recs))
	for i := range recs {
		ptrs[i] = &recs[i]
		versions[recs[i].Key] = recs[i].Version
	}
	st.decodeAll(l, ptrs)
	return versions
}

// commitChosen locks the rows of each choice's slot and the settles',
// applies the settles and reserves each chosen slot, in order, on what is
// under the lock. It reports which reservations were written; the settles
// are written either way. Rows whose versions match the snapshot decide as
// the snapshot did; only rows another writer changed can turn a decision.
func (st *State) commitChosen(ctx context.Context, chosen []choice, snap map[string]int64, settles []*transport.SettleParams) ([]bool, error) {
	l := newLoaded(2 * len(chosen))
	ones := make([]transport.ReserveParams, len(chosen))
	rows := make([]slotRows, len(chosen))
	for k, ch := range chosen {
		ones[k] = *ch.p
		ones[k].Slots = ch.p.Slots[ch.i : ch.i+1]
		rows[k] = l.addSlots(ones[k].Slots)
	}
	for _, sp := range settles {
		l.addSettle(sp)
	}
	won := make([]bool, len(chosen))
	raced, told := 0, told{}
	news := st.news() // before the rows are read: see keepBlock
	var last []*store.Record
	var olds [][]byte
	var ahead []*block
	err := st.s.UpdateMany(st.notifying(ctx, settles, &told), l.keys, func(recs []*store.Record) error {
		raced, ahead = 0, nil
		for k, ch := range chosen {
			if ch.fresh != nil {
				ch.fresh()
				ones[k].Now, ones[k].Lease = ch.p.Now, ch.p.Lease
			}
		}
		st.decodeAll(l, recs)
		told = applySettles(l, settles)
		wasMoved := moved(recs, snap)
		for k := range ones {
			d := l.decide(rows[k], &ones[k])
			won[k] = d.Wait == 0 && d.Err == nil && d.Index == 0
			if !won[k] && wasMoved {
				raced++
			}
		}
		for k := range ones {
			if won[k] && !slices.ContainsFunc(ones[:k], func(o transport.ReserveParams) bool { return sameSlot(&o.Slots[0], &ones[k].Slots[0]) }) {
				ahead = append(ahead, st.takeAhead(l, rows[k], &ones[k]))
			}
		}
		last, olds = recs, make([][]byte, len(recs))
		for i, r := range recs {
			olds[i] = r.Value
		}
		return encodeAll(l, recs)
	})
	if err != nil {
		st.view.forget(l.keys)
	} else {
		st.view.written(last, olds, st.now())
		st.keepBlock(news, ahead...)
	}
	st.races.Add(int64(raced))
	return won, err
}

// moved reports whether any of recs changed since the snapshot.
func moved(recs []*store.Record, snap map[string]int64) bool {
	for _, r := range recs {
		if v, ok := snap[r.Key]; !ok || v != r.Version {
			return true
		}
	}
	return false
}

// reserveLocked decides p with every slot's owner and bucket rows locked,
// in one transaction that also writes settles: the way every decision was
// taken before Reserve locked only its choice, kept for a pool whose
// chosen rows keep changing under it. fresh moves p's times on to the
// time the transaction decides (see reserveOnDBClock).
func (st *State) reserveLocked(ctx context.Context, p *transport.ReserveParams, settles []*transport.SettleParams, fresh func()) (transport.Decision, error) {
	l, r := slotKeys(p, settles)
	var d transport.Decision
	var refused error // the decision's own error: the settles are still written
	var told told
	news := st.news() // before the rows are read: see keepBlock
	var ahead *block
	err := st.s.UpdateMany(st.notifying(ctx, settles, &told), l.keys, func(recs []*store.Record) error {
		ahead = nil
		st.decodeAll(l, recs)
		told = applySettles(l, settles)
		fresh()
		d, refused = transport.DecisionOf(l.decide(r, p))
		if d.Wait == 0 && refused == nil && d.Index >= 0 {
			one := *p
			one.Slots = p.Slots[d.Index : d.Index+1]
			ahead = st.takeAhead(l, slotRows{owners: r.owners[d.Index : d.Index+1], buckets: r.buckets[d.Index : d.Index+1]}, &one)
		}
		return encodeAll(l, recs)
	})
	st.view.forget(l.keys) // written here, not recorded: read again
	if err != nil {
		st.requeue(settles)
		return d, err
	}
	st.keepBlock(news, ahead)
	return d, refused
}

// Settle implements transport.State. An answer that pauses nothing (a
// success, or a release without answer) is not written at once: it waits
// for this process's next reservation, whose transaction writes it first,
// or for FlushDelay, whichever comes first. A request on SQLite then costs
// one write transaction instead of two, other processes see the answer at
// most FlushDelay later (and until then count its request as still in
// flight, which errs on the safe side), and a crash loses only what the
// leases give back when they lapse. A refusal or a Retry-After is written
// at once, with whatever waits, so that every process stops at once; so is
// an answer that closes one of this process's blocks (ahead.go), with what
// the block gives back.
func (st *State) Settle(ctx context.Context, p *transport.SettleParams) error {
	if st.recycle(p.Lease, p.Answer.Reading == nil) {
		// A unit of an open block (ahead.go), back unanswered: the
		// block holds it again, and nothing changed in the rows.
		return nil
	}
	// The transport's context has no end (the request's cancellation must
	// not stop a settle): bound what does I/O here — the clock's first
	// measurement, a write.
	bounded := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, st.txTimeout(settleTimeout))
	}
	mctx, mcancel := ctx, context.CancelFunc(func() {})
	if !st.clockKnown() {
		mctx, mcancel = bounded()
	}
	off, err := st.offset(mctx)
	mcancel()
	if err != nil {
		return err
	}
	p = settleOnDBClock(p, off)
	// p is a copy from here on.
	block, served, lazy, closed := st.settleBlocks(p)
	if served {
		p.Lease = block // its answer ends one of the block's requests
	}
	r := p.Answer.Reading
	refusal := r != nil && (r.Limited != headers.NotLimited || r.HasRetryAfter)
	if !refusal && len(closed) == 0 && st.queue(p, lazy) {
		return nil
	}
	ctx, cancel := bounded()
	defer cancel()
	defer st.writing.begin()()
	settles := st.takePending()
	// What this process took ahead and the answer closed goes back
	// first, in the same transaction, so that the answer counts only the
	// requests really in flight (an owner's learnt cap is lowered from
	// them).
	settles = append(settles, closed...)
	if refusal {
		// What this process took ahead on the refused owner stops
		// being handed out, and goes back with the refusal.
		settles = append(settles, st.closeBlocks(p.Slot.Owner)...)
	}
	settles = append(settles, p)
	if err := st.write(ctx, settles); err != nil {
		st.requeue(settles[:len(settles)-1])
		return err
	}
	return nil
}

// write applies settles in one transaction.
func (st *State) write(ctx context.Context, settles []*transport.SettleParams) error {
	if len(settles) == 0 {
		return nil
	}
	l := newLoaded(2 * len(settles))
	for _, sp := range settles {
		l.addSettle(sp)
	}
	var told told
	var last []*store.Record
	var olds [][]byte
	err := st.s.UpdateMany(st.notifying(ctx, settles, &told), l.keys, func(recs []*store.Record) error {
		st.decodeAll(l, recs)
		told = applySettles(l, settles)
		last, olds = recs, make([][]byte, len(recs))
		for i, r := range recs {
			olds[i] = r.Value
		}
		return encodeAll(l, recs)
	})
	// What was written under the lock is the rows as they now are: the
	// view keeps it, so that answers written on the timer (FlushDelay)
	// do not send the next decision to read rows this process just left.
	if err != nil {
		st.view.forget(l.keys)
	} else {
		st.view.written(last, olds, st.now())
	}
	return err
}

// maxPending bounds the settles waiting to be written; past it a settle
// is written at once.
const maxPending = 1024

// queue queues p to be written later, and reports whether it did; p and
// its reading are the queue's from then on (each caller's own copy). lazy marks a settle that may wait blockFlushDelay rather than
// FlushDelay (ahead.go): while only such settles wait, and fewer than
// lazyPending, the timer is set for the longer delay.
func (st *State) queue(p *transport.SettleParams, lazy bool) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed || len(st.pending) >= maxPending {
		return false
	}
	st.pending = append(st.pending, p)
	if lazy && len(st.pending) < lazyPending {
		st.armLocked(blockFlushDelay)
	} else {
		st.armLocked(st.FlushDelay)
	}
	return true
}

// lazyPending is how many settles may wait for blockFlushDelay.
const lazyPending = 256

// armLocked makes the timer write what waits within d, unless it is set
// already for as soon. Called with mu held.
func (st *State) armLocked(d time.Duration) {
	if st.closed {
		return
	}
	if st.armed {
		if st.lazy && d < blockFlushDelay {
			st.lazy = false
			st.timer.Reset(d)
		}
		return
	}
	st.armed, st.lazy = true, d >= blockFlushDelay
	if st.timer == nil {
		st.timer = afterFunc(st.clock(), d, st.flushLater)
	} else {
		st.timer.Reset(d)
	}
}

func (st *State) takePending() []*transport.SettleParams {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := st.pending
	st.pending = nil
	return out
}

// requeue puts back settles a failed transaction did not write, ahead of
// newer ones, within maxPending.
func (st *State) requeue(settles []*transport.SettleParams) {
	if len(settles) == 0 {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return
	}
	st.pending = append(settles, st.pending...)
	st.armLocked(st.FlushDelay)
	if len(st.pending) > maxPending {
		st.log.Warn("quota state: dropping answers that could not be written; their reservations lapse with their leases", "dropped", len(st.pending)-maxPending)
		st.pending = st.pending[:maxPending]
	}
}

// flushLater is the timer's flush. After a failure it tries again a
// second later (the next reservation also tries); a closed store ends it.
func (st *State) flushLater() {
	st.mu.Lock()
	st.armed = false
	if st.closed {
		// Close writes what waits itself; a timer that fired as it
		// began writes nothing after it.
		st.mu.Unlock()
		return
	}
	if st.batch.running >= maxTransactions {
		// A reservation of this process is under way: the one queued
		// next writes what waits first; if none is, passTurn sets the
		// timer again as the turn is given back (not a timer every
		// FlushDelay while transactions follow one another). Checked
		// and marked under one lock, so a turn given back meanwhile
		// cannot miss it.
		st.batch.flushDue = true
		st.mu.Unlock()
		return
	}
	st.batch.running++
	// Counted as under way before the lock is let go: a Close that marks
	// the State closed after this waits for it (Flush), so nothing is
	// written after Close returns.
	endWrite := st.writing.begin()
	st.mu.Unlock()
	defer st.passTurn()
	ctx, cancel := context.WithTimeout(context.Background(), st.txTimeout(flushTimeout))
	defer cancel()
	err := st.flush(ctx)
	endWrite()
	switch {
	case err == nil:
	case errors.Is(err, store.ErrClosed):
		st.mu.Lock()
		st.closed, st.pending = true, nil
		st.mu.Unlock()
	default:
		st.log.Warn("quota state: writing answers failed; retrying", "err", err)
		st.mu.Lock()
		st.armLocked(flushRetry)
		st.mu.Unlock()
	}
}

// flushRetry is how soon a failed timer flush tries again.
const flushRetry = time.Second

// flushTimeout bounds a timer's flush, and settleTimeout a reservation's
// or a settle's transaction.
const (
	flushTimeout  = 10 * time.Second
	settleTimeout = 10 * time.Second
)

// txTimeout is d, the bound of one transaction, plus the time the store
// waits out an outage of its database (store.WaitOutages): a transaction
// that waited for the database to come back still has d to run.
func (st *State) txTimeout(d time.Duration) time.Duration {
	return d + store.OutageTimeoutOf(st.s)
}

// Flush writes the settles waiting to be written, and returns once those
// that other transactions had taken are written too.
func (st *State) Flush(ctx context.Context) error {
	err := st.flush(ctx)
	// Wait for the transactions under way (each counted in writing).
	if werr := st.writing.wait(ctx); err == nil {
		err = werr
	}
	return err
}

// flush writes the settles waiting to be written.
func (st *State) flush(ctx context.Context) error {
	defer st.writing.begin()()
	settles := st.takePending()
	if err := st.write(ctx, settles); err != nil {
		st.requeue(settles)
		return err
	}
	return nil
}

// Close writes what waits and stops writing later; it does not close the
// store, which the caller owns. Once it returns the State writes nothing
// more, so the caller may close the store at once: the timer is stopped
// and the State marked closed before the last flush, which waits for a
// timer's flush already under way (settles that come meanwhile are
// written at once, as a closed State queues nothing).
func (st *State) Close(ctx context.Context) error {
	st.stopListening()
	st.stopBlocks()
	st.mu.Lock()
	st.closed = true
	if st.timer != nil {
		st.timer.Stop()
	}
	st.mu.Unlock()
	return st.Flush(ctx)
}

// Buckets implements transport.State, its times on the transport's clock.
func (st *State) Buckets(ctx context.Context) (map[transport.BucketID]quota.Bucket, error) {
	off := st.ClockOffset(ctx)
	out := map[transport.BucketID]quota.Bucket{}
	err := st.each(ctx, "bucket/", 3, func(parts []string, rec store.Record) {
		b := quota.NewBucket()
		if st.unmarshal(rec, &b) {
			out[transport.BucketID{Provider: parts[0], Owner: parts[1], Resource: parts[2]}] = bucketOnLocalClock(b, off)
		}
	})
	return out, err
}

// Owners implements transport.State, its times on the transport's clock.
func (st *State) Owners(ctx context.Context) (map[transport.OwnerID]quota.Owner, error) {
	off := st.ClockOffset(ctx)
	out := map[transport.OwnerID]quota.Owner{}
	err := st.each(ctx, "owner/", 2, func(parts []string, rec store.Record) {
		var o quota.Owner
		if st.unmarshal(rec, &o) {
			out[transport.OwnerID{Provider: parts[0], Owner: parts[1]}] = ownerOnLocalClock(o, off)
		}
	})
	return out, err
}

// each calls fn with every record under prefix, after writing what waits,
// with the n path-escaped parts of its key after prefix; keys of another
// shape are skipped.
func (st *State) each(ctx context.Context, prefix string, n int, fn func(parts []string, rec store.Record)) error {
	if err := st.Flush(ctx); err != nil {
		return err
	}
	recs, err := st.s.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		parts := strings.Split(strings.TrimPrefix(rec.Key, prefix), "/")
		if len(parts) != n {
			continue
		}
		ok := true
		for i := range parts {
			if parts[i], ok = unescape(parts[i]); !ok {
				break
			}
		}
		if ok {
			fn(parts, rec)
		}
	}
	return nil
}

// unmarshal decodes rec's JSON into v and reports whether it could; a
// corrupted value is logged once.
func (st *State) unmarshal(rec store.Record, v any) bool {
	if err := json.Unmarshal(rec.Value, v); err != nil {
		st.corrupt(rec.Key, err)
		return false
	}
	return true
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
