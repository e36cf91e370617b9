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

// blockFlushDelay is how long the answers of a block's requests, and what
// a block gives back, may wait to be written: the block keeps counting
// its requests in flight until then, on a bucket with plenty to spare, so
// other processes lose nothing by learning them later, and a busy process
// writes its answers in a few transactions a second instead of hundreds.
// An answer that closes one of this process's blocks, or a refusal, is
// written at once.
const blockFlushDelay = 50 * time.Millisecond

// block is a reservation taken ahead: a quota.Block held by this State.
//
// A fleet's decisions a second are bounded by the database: each decision
// that goes is a transaction on its owner's and bucket's rows (BENCHMARKS.md, "A fleet on one database"). Where a
// bucket is plentiful (quota.Plenty), a transaction that reserves for a
// request also takes a block on the same credential (quota.TakeBlock): one
// lease standing for several requests, in the rows, counted in flight by
// every process like any requests'. The State hands its units to its next
// requests on that credential without a round trip, each decided by the
// engine's own decision on the block's copy of the rows (quota.Block.Take),
// for at most quota.BlockMaxAge.
//
// How news reaches a block's units:
//   - an answer this process reads is folded into the copy at once
//     (quota.Block.Settle); a block it leaves short of plenty (a reading
//     saying few remain, a refusal, a pause) closes before the next unit;
//   - another process's refusal, or a reading of its that leaves a bucket
//     holding a block below the line, is news (quota.BlockNews): its
//     transaction counts it in the store value's news (store.Newsboard)
//     and notifies. A block hands out a unit only while the news it has
//     heard is the store value's (one atomic load): else its requests go
//     to the rows, and the State reads its blocks' rows again (hear) and
//     closes those they no longer allow (quota.Block.Heard); the others
//     have heard the news. So processes sharing a store value (every one
//     of a memory store's) hear it at their next decision; others on a
//     notification, which has them read the rows again too: within a
//     round trip of the database on PostgreSQL, sqlite.DataVersionPoll on
//     SQLite, and in any case quota.BlockMaxAge.
//
// Each answer ends one of the block's requests, in the transaction that
// writes the answer anyway; a request that ends without an answer gives
// its unit back to the block while it is open; when the block closes (used
// up, too old, no longer plentiful, Close) the units it did not hand out
// are given back.
type block struct {
	k    *quota.Block
	slot transport.Slot
	// holder is the lease's Holder: a request of another transport
	// sharing the State (another holder) cannot use it.
	holder string
	// at is when it was taken (the State's clock), dbNow the decision's
	// now on the database's clock, and off the offset of the transport's
	// clock to the database's then (ClockOffset), which its requests'
	// times are moved by: measured again at most every ClockCheck, it
	// changes by little within the block's life.
	at    time.Time
	dbNow time.Time
	off   time.Duration
	// heard is the store value's news (State.news) its rows are known to
	// include: read before the transaction that took it, or the read
	// that heard it last. It hands out units only while it is the news.
	heard uint64
	// closed means it hands out no more.
	closed bool
}

// blocks is a State's reservations taken ahead.
type blocks struct {
	mu     sync.Mutex
	now    func() time.Time // nil: the State's clock; tests replace it
	open   []*block         // handing out units, oldest first
	handed handouts         // by the lease ID of the request it served
	timer  *alarm           // expires the open blocks, on the State's clock
	// stopped: Close stopped the timer, which is set no more.
	stopped bool
	// size is the next block's size per credential (quota.Block.NextSize).
	size map[sizeKey]int64
	// hearing: a read of the open blocks' rows is under way (hear);
	// again: news came since it began, so it reads once more.
	hearing, again bool
}

type sizeKey struct {
	o transport.OwnerID
	b transport.BucketID
}

// blockNow is the time of st's blocks: the State's clock's.
func (st *State) blockNow() time.Time {
	if st.blocks.now != nil {
		return st.blocks.now()
	}
	return st.now()
}

// dbTime is the time now (blockNow) on the database's clock, as b's
// decisions count it.
func (b *block) dbTime(now time.Time) time.Time { return b.dbNow.Add(now.Sub(b.at)) }

// sameSlot reports whether a and b spend from the same rows. Only slots
// without shared buckets take blocks; a block's slot has its scope, so
// its units serve only requests of that scope. The owners' names are
// compared first: a request looks through every open block of its
// process, and they differ by owner most of all.
func sameSlot(a, b *transport.Slot) bool {
	return a.Owner.Owner == b.Owner.Owner && len(a.Also) == 0 && len(b.Also) == 0 && len(a.Draws) == 0 && len(b.Draws) == 0 &&
		a.Owner.Provider == b.Owner.Provider && a.Bucket == b.Bucket && a.Scope == b.Scope
}

// handouts are the requests a State's blocks served whose units are out,
// each by its lease ID: the first few in a slice, scanned, the others in
// a map. A process has few such requests out at once, mostly: a map's
// insert and delete for each unit cost as much as the rest of its
// bookkeeping.
type handouts struct {
	few  []handout
	many map[uint64]*block
}

type handout struct {
	id uint64
	b  *block
}

// fewHandouts is how many handouts keeps in its slice: a scan of them
// costs less than a map's lookup.
const fewHandouts = 8

// get returns the block that served the request of lease id.
func (h *handouts) get(id uint64) (*block, bool) {
	for i := range h.few {
		if h.few[i].id == id {
			return h.few[i].b, true
		}
	}
	if len(h.many) == 0 {
		return nil, false
	}
	b, ok := h.many[id]
	return b, ok
}

// put records that b served the request of lease id, in place of any
// block recorded for it.
func (h *handouts) put(id uint64, b *block) {
	for i := range h.few {
		if h.few[i].id == id {
			h.few[i].b = b
			return
		}
	}
	if _, ok := h.many[id]; ok || len(h.few) >= fewHandouts {
		if h.many == nil {
			h.many = make(map[uint64]*block)
		}
		h.many[id] = b
		return
	}
	h.few = append(h.few, handout{id, b})
}

// drop forgets the request of lease id.
func (h *handouts) drop(id uint64) {
	for i := range h.few {
		if h.few[i].id == id {
			last := len(h.few) - 1
			h.few[i] = h.few[last]
			h.few[last] = handout{} // keeps no closed block alive
			h.few = h.few[:last]
			return
		}
	}
	delete(h.many, id)
}

// fromBlock gives p a unit of a block on the first of its slots that has
// one the engine lets it take (quota.Block.Take), and reports the slot's
// index. p's times are on the transport's clock.
//
// A block that has not heard the store value's news hands out nothing:
// the request is decided on the rows, and the blocks read them again
// (hear).
//
// The block's age is counted to p.Now, the time the request asks on the
// same clock (the transport reads it just before it reserves), rather than
// to a clock read here: a read of the clock is a good part of what a unit
// costs. A request that asked before the block was kept (another
// goroutine's transaction took it meanwhile) asked within its age.
func (st *State) fromBlock(p *transport.ReserveParams) (int, bool) {
	s := &st.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.open) == 0 {
		return 0, false
	}
	age := p.Now
	news := st.news()
	for i := range p.Slots {
		slot := &p.Slots[i]
		for _, b := range s.open {
			if !sameSlot(&b.slot, slot) || b.holder != p.Lease.Holder {
				continue
			}
			if b.heard != news {
				if !s.hearing {
					st.hearLocked()
				}
				continue
			}
			lease := p.Lease
			lease.Until = shift(lease.Until, b.off)
			if age.Sub(b.at) >= quota.BlockMaxAge || !b.k.Take(&p.Ask, &lease, shift(p.Now, b.off)) {
				continue
			}
			s.handed.put(p.Lease.ID, b)
			if b.k.Left() == 0 {
				s.closeLocked(b, age)
			}
			return i, true
		}
	}
	return 0, false
}

// closeLocked stops b handing out units at now. Called with mu held.
func (s *blocks) closeLocked(b *block, now time.Time) {
	s.shut(b, now)
	s.open = slices.DeleteFunc(s.open, func(x *block) bool { return x == b })
}

// shut marks b closed at now, and sizes the next block of its credential.
func (s *blocks) shut(b *block, now time.Time) {
	b.closed = true
	if s.size == nil {
		s.size = make(map[sizeKey]int64)
	}
	s.size[sizeKey{b.slot.Owner, b.slot.Bucket}] = b.k.NextSize(now.Sub(b.at))
}

// nextSize is the size of the next block on slot.
func (st *State) nextSize(slot transport.Slot) int64 {
	s := &st.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.size[sizeKey{slot.Owner, slot.Bucket}]; ok {
		return n
	}
	return quota.FirstBlock
}

// returned is the settle that gives back the units b did not hand out,
// timed at now (the State's clock) on the database's clock; nil when it
// handed them all.
func (b *block) returned(now time.Time) *transport.SettleParams {
	left := b.k.Left()
	if left <= 0 {
		return nil
	}
	return &transport.SettleParams{Slot: b.slot, Lease: b.k.Lease.ID, Now: b.dbTime(now),
		Answer: quota.Answer{Returned: left}}
}

// recycle gives the unit of the request of lease id back to the open
// block that served it, when that request ended unanswered, and reports
// whether it did: then there is nothing to write.
func (st *State) recycle(id uint64, unanswered bool) bool {
	if !unanswered {
		return false
	}
	s := &st.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.handed.get(id)
	if !ok || b.closed {
		return false
	}
	s.handed.drop(id)
	b.k.GiveBack(id)
	return true
}

// settleBlocks folds the answer p (on the database's clock) into every
// open block it concerns, and closes those it leaves short of plenty; it
// returns the lease of the block that served p's request, if one did
// (served), and the settles that give back what the closed blocks did not
// hand out. A request that ended unanswered on an open block is recycle's.
//
// lazy says the answer may wait blockFlushDelay to be written: the block
// that served it judged that it leaves the bucket plentiful
// (Block.Settle). A block that has closed (used up, too old) still judges
// the answers of the units it handed out, on its own copy, which nothing
// else reads any more: an answer it does not find plentiful (a few
// remaining, a window's end) is written within FlushDelay, so that other
// processes hear it within that bound. Before, such an answer stating 0
// remaining waited up to 50 ms while another process's request went
// (fleetsim memory seed 269775).
func (st *State) settleBlocks(p *transport.SettleParams) (lease uint64, served, lazy bool, releases []*transport.SettleParams) {
	s := &st.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.handed.get(p.Lease); ok {
		s.handed.drop(p.Lease)
		lease, served, lazy = b.k.Lease.ID, true, true
		if b.closed {
			lazy = b.k.Settle(partOf(b, p), p.Lease, &p.Answer, p.Now)
		}
	}
	var short []*block // no longer plentiful
	for _, b := range s.open {
		part := partOf(b, p)
		if (part.Owner || part.Bucket) && !b.k.Settle(part, p.Lease, &p.Answer, p.Now) {
			short = append(short, b)
		}
	}
	if len(short) == 0 {
		return lease, served, lazy, nil
	}
	return lease, served, false, s.closeWhere(func(b *block) bool { return slices.Contains(short, b) }, st.blockNow())
}

// partOf says which of b's rows the answer p concerns.
func partOf(b *block, p *transport.SettleParams) quota.Part {
	return quota.Part{Owner: b.slot.Owner == p.Slot.Owner && p.Slot.Owner != (transport.OwnerID{}),
		Bucket: b.slot.Bucket == p.Slot.Bucket, Scope: b.slot.Scope == p.Slot.Scope}
}

// takeAhead takes a block on the loaded rows for requests like p (whose
// one slot is r's), as large as the slot stays plentiful for, up to the
// slot's next size; p's times are on the database's clock. It returns the
// block, to be kept (keepBlock) once the transaction commits, or nil.
func (st *State) takeAhead(l *loaded, r slotRows, p *transport.ReserveParams) *block {
	slot := p.Slots[0]
	if len(slot.Also) != 0 || len(slot.Draws) != 0 || slot.Owner == (transport.OwnerID{}) || !st.blockWanted(slot, p.Lease.Holder) {
		return nil
	}
	var scope *quota.Bucket
	if slot.Scope != (transport.BucketID{}) {
		scope = l.buckets[bucketKey(slot.Scope)]
	}
	// The block hands out units for BlockMaxAge from about now, each to a
	// request whose lease runs as long as p's from when it asks; the
	// block's lease must outlast theirs (quota.Block.Take). p's times are
	// when it asked: one that waited its turn behind other transactions,
	// or for the rows' locks, asked long before (a second or more on a
	// busy database), and a block whose lease ran from then would refuse
	// most of its units.
	off := st.knownOffset()
	now := shift(st.blockNow(), off)
	if now.Before(p.Now) {
		now = p.Now
	}
	lease := quota.Lease{ID: leaseID(), Until: now.Add(p.Lease.Until.Sub(p.Now) + quota.BlockMaxAge), Holder: p.Lease.Holder}
	k := quota.TakeBlock(l.owners[r.owners[0]], l.buckets[r.buckets[0]], scope, &p.Ask, lease, st.nextSize(slot), p.Now)
	if k == nil {
		return nil
	}
	return &block{k: k, slot: slot, holder: p.Lease.Holder, dbNow: p.Now, off: off}
}

// blockWanted reports whether slot has no open block of holder.
func (st *State) blockWanted(slot transport.Slot, holder string) bool {
	s := &st.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.open {
		if sameSlot(&b.slot, &slot) && b.holder == holder {
			return false
		}
	}
	return true
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

// keepBlock keeps blocks taken by a committed transaction, makes sure
// they stop handing out units in time, and listens for other processes'
// news while any is open. news is the store value's news read before the
// transaction read its rows, which hold at least that news.
func (st *State) keepBlock(news uint64, taken ...*block) {
	s := &st.blocks
	s.mu.Lock()
	now := st.blockNow()
	kept := false
	for _, b := range taken {
		if b != nil {
			b.at, b.heard = now, news
			s.open = append(s.open, b)
			kept = true
		}
	}
	if len(s.open) > 0 && s.timer == nil && !s.stopped {
		s.timer = afterFunc(st.clock(), quota.BlockMaxAge, st.expireBlocks)
	}
	s.mu.Unlock()
	if kept {
		st.listen()
	}
}

// blocksOpen reports whether any block hands out units.
func (st *State) blocksOpen() bool {
	s := &st.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open) > 0
}

// expireBlocks closes the blocks too old to hand out units, gives back
// what they did not hand out, and runs again while any are open.
func (st *State) expireBlocks() {
	s := &st.blocks
	s.mu.Lock()
	now := st.blockNow()
	releases := s.closeWhere(func(b *block) bool { return now.Sub(b.at) >= quota.BlockMaxAge }, now)
	s.timer = nil
	if len(s.open) > 0 && !s.stopped {
		// When the oldest still open is due.
		s.timer = afterFunc(st.clock(), s.open[0].at.Add(quota.BlockMaxAge).Sub(now), st.expireBlocks)
	}
	s.mu.Unlock()
	st.giveBack(releases)
}

// hear has the open blocks hear their rows again (hearBlocks) on a
// goroutine of its own, so that the listener goes on waking waiters: news
// that comes during a read is heard by one more read after it, however
// much came.
func (st *State) hear() {
	s := &st.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	st.hearLocked()
}

// hearLocked is hear with the blocks' mu held.
func (st *State) hearLocked() {
	s := &st.blocks
	if len(s.open) == 0 {
		return
	}
	if s.hearing {
		s.again = true
		return
	}
	s.hearing = true
	go func() {
		for {
			st.hearBlocks()
			s.mu.Lock()
			if !s.again || len(s.open) == 0 {
				s.hearing, s.again = false, false
				s.mu.Unlock()
				return
			}
			s.again = false
			s.mu.Unlock()
		}
	}()
}

// hearBlocks reads the rows of every open block again, after another
// process wrote (a notification), and closes the blocks they no longer
// allow (quota.Block.Heard), giving back what those did not hand out.
// The blocks that may go on have heard the news counted before the read.
func (st *State) hearBlocks() {
	s := &st.blocks
	news := st.news()
	s.mu.Lock()
	slots := make([]transport.Slot, 0, len(s.open))
	heard := slices.Clone(s.open) // those opened later are not judged here
	for _, b := range s.open {
		slots = append(slots, b.slot)
	}
	s.mu.Unlock()
	if len(slots) == 0 {
		return
	}
	l := newLoaded(2 * len(slots))
	l.addSlots(slots)
	ctx, cancel := context.WithTimeout(context.Background(), st.txTimeout(settleTimeout))
	defer cancel()
	if _, err := st.snapshot(ctx, l); err != nil {
		return // the block lapses at its age; a failed read tells nothing new
	}
	s.mu.Lock()
	now := st.blockNow()
	releases := s.closeWhere(func(b *block) bool {
		if !slices.Contains(heard, b) {
			return false
		}
		var scope *quota.Bucket
		if b.slot.Scope != (transport.BucketID{}) {
			scope = l.buckets[bucketKey(b.slot.Scope)]
		}
		if !b.k.Heard(l.owners[ownerKey(b.slot.Owner)], l.buckets[bucketKey(b.slot.Bucket)], scope, b.dbTime(now)) {
			return true
		}
		b.heard = max(b.heard, news)
		return false
	}, now)
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
	return s.closeWhere(func(b *block) bool { return owner == (transport.OwnerID{}) || b.slot.Owner == owner }, st.blockNow())
}

// giveBack queues releases of blocks, to be written like any answer that
// pauses nothing; past maxPending they are written at once.
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
	s.stopped = true
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.mu.Unlock()
	st.giveBack(st.closeBlocks(transport.OwnerID{}))
}
