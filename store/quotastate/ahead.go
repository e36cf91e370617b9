package quotastate

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/transport"
)

// Reservations taken ahead. A fleet's decisions a second are bounded by
// the database: each decision that goes is a transaction on its owner's
// and bucket's rows, and on a busy machine the processes and the database
// share the cores, so the more processes, the more CPU each decision
// costs (BENCHMARKS.md, "A fleet on one database"). Where a bucket is
// plentiful (quota.Plenty: half its limit and at least 1,000 units to
// spare, no pause, no pacing, no cap on the owner's requests in flight —
// `max_concurrency = 0`, as for an API that limits only its quota), a
// transaction that reserves for a request also takes a block on
// the same credential — about as many units as this process's requests
// used there in the last blockMaxAge, between minBlock and maxBlock: one
// lease standing for that many requests (quota.Lease.Requests), in the
// rows, counted in flight by every process like any requests' — and the
// State hands its units to its next requests on that credential without a
// round trip, each to one request whose lease the block outlasts, for at
// most blockMaxAge. Each answer ends one of the block's requests, in the
// transaction that writes the answer anyway; a request that ends without
// an answer gives its unit back to the block while it is open; when the
// block closes (used up, too old, a refusal on its owner, Close) the units
// it did not hand out are given back. One lease for many requests keeps
// the rows as small as a few requests in flight, which is what every
// transaction reads and writes.
//
// What it costs: the units not handed out yet are held for at most
// blockMaxAge, on a bucket with at least as much to spare.
// A refusal on an owner closes this process's blocks on it at once;
// another process's refusal reaches the units already taken as it reaches
// requests in flight, at most blockMaxAge after. A request that cannot use
// a block (paced, a write, points, a scope something is known of, a
// capped owner, a bucket not plentiful) is decided in the database as before: GitHub's REST requests
// (points per endpoint) and every provider's default cap on requests in
// flight among them.

const (
	// firstBlock is the size of a credential's first block; minBlock
	// and maxBlock bound the next ones (see shut). A transaction's cost
	// is shared by that many decisions.
	firstBlock = 32
	minBlock   = 4
	maxBlock   = 1024
	// blockMaxAge is how long a block hands out units after it was
	// taken.
	blockMaxAge = 250 * time.Millisecond
	// blockFlushDelay is how long the answers of a block's requests, and
	// what a block gives back, may wait to be written: the block keeps
	// counting its requests in flight until then, on a bucket with
	// plenty to spare, so other processes lose nothing by learning them
	// later, and a busy process writes its answers in a few transactions
	// a second instead of hundreds.
	blockFlushDelay = 50 * time.Millisecond
)

// block is a reservation of several units taken ahead.
type block struct {
	slot transport.Slot
	ask  quota.Ask
	id   uint64
	// holder is the lease's Holder: a request of another transport
	// sharing the State (another holder) cannot use it.
	holder string
	// at is when it was taken (the system's clock), dbNow the decision's
	// now on the database's clock, and room how long its lease lasts
	// from then.
	at    time.Time
	dbNow time.Time
	room  time.Duration
	units int
	// handed counts the units held by requests, uses every one given
	// (a unit given back unanswered may be given again); closed means it
	// hands out no more.
	handed, uses int
	closed       bool
}

// blocks is a State's reservations taken ahead.
type blocks struct {
	mu     sync.Mutex
	now    func() time.Time  // the system's clock; tests replace it
	open   []*block          // handing out units, oldest first
	handed map[uint64]*block // by the lease ID of the request it served
	timer  *time.Timer
	// size is the next block's size per credential, from the pace at
	// which the last one was used (see shut).
	size map[sizeKey]int64
}

type sizeKey struct {
	o transport.OwnerID
	b transport.BucketID
}

func (s *blocks) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// sameSlot reports whether a and b spend from the same rows. Only slots
// without shared buckets take blocks; a block's slot has its scope, so
// its units serve only requests of that scope.
func sameSlot(a, b transport.Slot) bool {
	return a.Owner == b.Owner && a.Bucket == b.Bucket && a.Scope == b.Scope && len(a.Also) == 0 && len(b.Also) == 0
}

// blockable reports whether a block may be taken on slot s for ask a, as
// far as the slot and the ask tell (quota.Plenty tells the rest, on
// the locked rows).
func blockable(s transport.Slot, a *quota.Ask) bool {
	return len(s.Also) == 0 && s.Owner != (transport.OwnerID{}) &&
		a.Policy.Kind == quota.Greedy && !a.Free && !a.Conditional && a.Units <= 1
}

// blockAsk is what of a decides whether a unit of a block serves it: the
// ask less its cost, which a block's ask can only carry when no points
// are counted (quota.Plenty) — so requests to every endpoint share one
// block.
func blockAsk(a quota.Ask) quota.Ask {
	a.Cost = quota.Cost{}
	return a
}

// fromBlock gives p a unit of a block on the first of its slots that has
// one it can use, and reports the slot's index.
func (st *State) fromBlock(p *transport.ReserveParams) (int, bool) {
	s := &st.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.open) == 0 {
		return 0, false
	}
	now := s.clock()
	needs := p.Lease.Until.Sub(p.Now)
	ask := blockAsk(p.Ask)
	for i, slot := range p.Slots {
		for _, b := range s.open {
			age := now.Sub(b.at)
			if b.handed >= b.units || age < 0 || age >= blockMaxAge || b.room-age < needs ||
				!sameSlot(b.slot, slot) || b.ask != ask || b.holder != p.Lease.Holder {
				continue
			}
			b.handed++
			b.uses++
			if s.handed == nil {
				s.handed = make(map[uint64]*block)
			}
			s.handed[p.Lease.ID] = b
			if b.handed == b.units {
				s.closeLocked(b)
			}
			p.OnAnswer, p.Scoped = false, false
			return i, true
		}
	}
	return 0, false
}

// closeLocked stops b handing out units. Called with mu held.
func (s *blocks) closeLocked(b *block) {
	s.shut(b, s.clock())
	s.open = slices.DeleteFunc(s.open, func(x *block) bool { return x == b })
}

// shut marks b closed at now, and sizes the next block of its
// credential for what its requests used of b per blockMaxAge: a block
// used up sooner is followed by a larger one (at most four times), one
// that expired by as many as it handed out.
func (s *blocks) shut(b *block, now time.Time) {
	b.closed = true
	age := max(now.Sub(b.at), time.Millisecond)
	next := int64(b.uses)
	if age < blockMaxAge {
		next = min(int64(b.units)*4, int64(float64(b.uses)*float64(blockMaxAge)/float64(age)))
	}
	if s.size == nil {
		s.size = make(map[sizeKey]int64)
	}
	s.size[sizeKey{b.slot.Owner, b.slot.Bucket}] = min(max(next, minBlock), maxBlock)
}

// nextSize is the size of the next block on slot.
func (st *State) nextSize(slot transport.Slot) int64 {
	s := &st.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.size[sizeKey{slot.Owner, slot.Bucket}]; ok {
		return n
	}
	return firstBlock
}

// returned is the settle that gives back the units b did not hand out,
// timed at now (the system's clock) on the database's clock; nil when it
// handed them all.
func (b *block) returned(now time.Time) *transport.SettleParams {
	if b.handed >= b.units {
		return nil
	}
	return &transport.SettleParams{Slot: b.slot, Lease: b.id, Now: b.dbNow.Add(now.Sub(b.at)),
		Answer: quota.Answer{Returned: int64(b.units - b.handed)}}
}

// servedByBlock returns the lease of the block that served the request
// whose lease is id, if one did, and forgets the request. A request that
// ended without an answer (noAnswer) gives its unit back to the block
// while the block is open: then recycled is true and there is nothing to
// write.
func (st *State) servedByBlock(id uint64, noAnswer bool) (lease uint64, served, recycled bool) {
	s := &st.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.handed[id]
	if !ok {
		return 0, false, false
	}
	delete(s.handed, id)
	if noAnswer && !b.closed {
		b.handed--
		return b.id, true, true
	}
	return b.id, true, false
}

// blockWanted reports whether slot has no open block for ask.
func (st *State) blockWanted(slot transport.Slot, a *quota.Ask) bool {
	s := &st.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.open {
		if sameSlot(b.slot, slot) && b.ask == blockAsk(*a) {
			return false
		}
	}
	return true
}

// takeAhead takes a block on the loaded rows for requests like p (whose
// one slot is r's), as large as the slot stays plentiful for, up to
// the slot's next size; p's times are on the database's clock. It returns the
// block, to be kept (keepBlock) once the transaction commits, or nil.
func (st *State) takeAhead(l *loaded, r slotRows, p *transport.ReserveParams) *block {
	slot := p.Slots[0]
	if !blockable(slot, &p.Ask) || !st.blockWanted(slot, &p.Ask) {
		return nil
	}
	var scope *quota.Bucket
	if slot.Scope != (transport.BucketID{}) {
		scope = l.buckets[bucketKey(slot.Scope)]
	}
	units := min(st.nextSize(slot), quota.Plenty(l.owners[r.owners[0]], l.buckets[r.buckets[0]], scope, &p.Ask, p.Now))
	if units < 2 {
		return nil
	}
	room := p.Lease.Until.Sub(p.Now) + blockMaxAge
	q := *p
	q.Ask.Units = units
	q.Lease = quota.Lease{ID: leaseID(), Until: p.Now.Add(room), Holder: p.Lease.Holder, Requests: units}
	if d := l.decide(r, &q); d.Wait > 0 || d.Err != nil || d.Index != 0 {
		return nil
	}
	return &block{slot: slot, ask: blockAsk(p.Ask), id: q.Lease.ID, holder: p.Lease.Holder, dbNow: p.Now, room: room, units: int(units)}
}

// leaseID draws a lease ID: random, like the transport's, so that no two
// processes' collide; never 0, which settles no lease.
func leaseID() uint64 {
	for {
		if id := rand.Uint64(); id != 0 {
			return id
		}
	}
}

// keepBlock keeps blocks taken by a committed transaction, and makes sure
// they stop handing out units in time.
func (st *State) keepBlock(taken ...*block) {
	s := &st.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	for _, b := range taken {
		if b != nil {
			b.at = now
			s.open = append(s.open, b)
		}
	}
	if len(s.open) > 0 && s.timer == nil {
		s.timer = time.AfterFunc(blockMaxAge, st.expireBlocks)
	}
}

// expireBlocks closes the blocks too old to hand out units, gives back
// what they did not hand out, and runs again while any are open.
func (st *State) expireBlocks() {
	s := &st.blocks
	s.mu.Lock()
	now := s.clock()
	releases := s.closeWhere(func(b *block) bool { return now.Sub(b.at) >= blockMaxAge }, now)
	s.timer = nil
	if len(s.open) > 0 {
		// When the oldest still open is due.
		s.timer = time.AfterFunc(s.open[0].at.Add(blockMaxAge).Sub(now), st.expireBlocks)
	}
	s.mu.Unlock()
	st.giveBack(releases)
}

// closeWhere closes the open blocks for which close says so and returns
// the settles that give back what they did not hand out, timed at now.
// Called with mu held.
func (s *blocks) closeWhere(close func(*block) bool, now time.Time) []*transport.SettleParams {
	var out []*transport.SettleParams
	s.open = slices.DeleteFunc(s.open, func(b *block) bool {
		if !close(b) {
			return false
		}
		s.shut(b, now)
		if r := b.returned(now); r != nil {
			out = append(out, r)
		}
		return true
	})
	return out
}

// closeBlocks closes this process's blocks on owner (every one for the
// zero owner) and returns the settles that give back what they did not
// hand out.
func (st *State) closeBlocks(owner transport.OwnerID) []*transport.SettleParams {
	s := &st.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.open) == 0 {
		return nil
	}
	return s.closeWhere(func(b *block) bool { return owner == (transport.OwnerID{}) || b.slot.Owner == owner }, s.clock())
}

// giveBack queues releases of blocks, to be written
// like any answer that pauses nothing; past maxPending they are written
// at once.
func (st *State) giveBack(releases []*transport.SettleParams) {
	if len(releases) == 0 {
		return
	}
	var rest []*transport.SettleParams
	for _, p := range releases {
		if !st.queue(p, true) {
			rest = append(rest, p)
		}
	}
	st.mu.Lock()
	closed := st.closed
	st.mu.Unlock()
	if len(rest) == 0 || closed {
		return // after Close: they lapse with their leases
	}
	ctx, cancel := context.WithTimeout(context.Background(), st.txTimeout(settleTimeout))
	defer cancel()
	defer st.writing.begin()()
	if err := st.write(ctx, rest); err != nil {
		st.log.Warn("quota state: giving back quota taken ahead failed; it lapses with its lease", "err", err)
	}
}

// stopBlocks closes every block, gives back what they did not hand out,
// and stops the timer that expires them (Close). The requests in flight
// on a block end it with their answers, or it lapses with its lease.
func (st *State) stopBlocks() {
	s := &st.blocks
	s.mu.Lock()
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.mu.Unlock()
	st.giveBack(st.closeBlocks(transport.OwnerID{}))
}
