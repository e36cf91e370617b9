package quota

import (
	"maps"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// PlentyFloor is the least budget Plenty leaves: below it a bucket is
// never plentiful, however large its limit.
const PlentyFloor = 1000

// Block sizes: a credential's first block has FirstBlock units, the next
// ones are sized by the pace at which the last was used (Block.NextSize),
// within MinBlock and MaxBlock. A transaction's cost is shared by that
// many decisions.
const (
	FirstBlock = 32
	MinBlock   = 4
	MaxBlock   = 1024
)

// BlockMaxAge is how long a block hands out units after it was taken:
// what it did not hand out is then given back. It also bounds how late
// another process's news reaches a block when no notification carries it
// (see Block.Heard).
const BlockMaxAge = 250 * time.Millisecond

// Plenty is how many units requests asking a may take from owner o,
// bucket b and scope (nil for none; see Option.Scope) at now with so much
// to spare that taking them ahead of time can make no other request wait,
// 0 for none: after them, at least half of b's limit and PlentyFloor units
// stay unspent, unreserved and beyond the policy's reserve, and nothing
// can hold them back: no penalty, no pause, no scope anything is known
// of, no cap on the owner's requests in flight — where one applies, its
// slots are what the processes share most tightly, and one holding them
// ahead would make the others wait — and a taking that commits nothing
// but its lease (see takesOnlyLease): a unit of a block stands for one
// request of one unit, and a request that moves a schedule others decide
// on (a write spaced, pacing, points, content) must write it where they
// read it.
func Plenty(o *Owner, b, scope *Bucket, a *Ask, now time.Time) int64 {
	return max(0, plentyLeft(o, b, scope, a, now))
}

// plentyLeft is Plenty before the floor at 0: negative when the bucket is
// below the line, and -1 when something else holds the units back.
func plentyLeft(o *Owner, b, scope *Bucket, a *Ask, now time.Time) int64 {
	if o == nil || b == nil {
		return -1
	}
	f := factsOf(o, b, a, now)
	return plentyWith(o, b, scope, a, now, &f)
}

// plentyWith is plentyLeft on o and b (not nil) given f, their unitFacts
// for a at now.
func plentyWith(o *Owner, b, scope *Bucket, a *Ask, now time.Time, f *unitFacts) int64 {
	switch {
	case !takesOnlyLease(a, b, now):
		return -1
	case f.held:
		return -1
	case !b.Known(), b.Silent, b.Learnt, b.Configured, now.Before(b.BlockedUntil):
		return -1
	}
	if scope != nil {
		// Only a scope nothing is known of — no limit written down or
		// learnt, no pause — costs nothing and holds nothing back.
		v := *scope
		v.seedScope(a.Scope, now)
		if v.scopeActive(now) {
			return -1
		}
	}
	return f.budget - max(PlentyFloor, b.Limit/2)
}

// takesOnlyLease reports whether a reservation asking a on bucket b at now
// commits nothing but its lease: one request in flight of its owner and
// one unit of b — no write spacing, points or content budget of the owner
// (see Owner.take), no pacing of b (see Bucket.take: a greedy policy
// without MinDelay), no units beyond one, no conditional or free request
// (whose lease holds no unit).
func takesOnlyLease(a *Ask, b *Bucket, now time.Time) bool {
	return !a.Free && !a.Conditional && a.Units <= 1 &&
		!a.Secondary.spacesWrite(a.Cost) && !a.Secondary.countsPoints(a.Cost) && !a.Secondary.countsContent(a.Cost) &&
		b.interval(a.Policy, now) == 0
}

// Block is a block taken ahead on one owner and bucket (and scope), and
// this process's copy of their state, on which each unit is decided.
//
// A State shared by several processes decides each request in a
// transaction on its owner's and bucket's rows; where a bucket has plenty
// to spare, one transaction may also take a block: a lease standing for
// several requests (Lease.Requests), held in the rows like any requests in
// flight, whose units the State then hands to its next requests without a
// round trip (see store/quotastate). Every rule of a block is here: which
// asks and buckets may take one (Plenty), how large (FirstBlock, MinBlock,
// MaxBlock, NextSize) and for how long (BlockMaxAge), and the decision
// that hands out each unit (Take), which is Decide itself, run on the
// copy.
//
// The copy is the rows as the block's transaction left them, less the
// block's own lease: what every other decision would see if the block's
// units not handed out were not held (the other leases in flight summed in
// one: see Leases.others). Take runs Decide on it for each request, so a
// block's unit goes only where a request decided in the database would go,
// on the same facts; Settle folds in every answer this process reads on
// the owner or bucket, at once; Heard checks the rows as another process
// left them. A block no longer plentiful for its units not handed out
// (Plentiful) is to be closed, and what it did not hand out given back.
type Block struct {
	// Lease is the block's lease in the shared rows.
	Lease Lease
	ask   Ask
	owner Owner
	// bucket and scope are the copies; scope nil for none.
	bucket Bucket
	scope  *Bucket
	// handed counts the units held by requests (answered or not; a unit
	// given back unanswered is not); used every one handed out, so a
	// unit given back and handed again counts twice.
	handed, used int64
}

// TakeBlock takes a block of up to size units for requests asking a on
// owner o, bucket b and scope (nil for none) at now, under lease l (its ID,
// Until and Holder): as many as Plenty allows, decided by Decide for them
// all at once. It returns nil, changing nothing, when fewer than 2 would
// go.
func TakeBlock(o *Owner, b, scope *Bucket, a *Ask, l Lease, size int64, now time.Time) *Block {
	units := min(size, Plenty(o, b, scope, a, now))
	if units < 2 {
		return nil
	}
	q := *a
	q.Units = units
	l.Requests = units
	if d := Decide([]Option{{Owner: o, Bucket: b, Scope: scope}}, &q, l, now); d.Wait > 0 || d.Err != nil || d.Index != 0 {
		return nil
	}
	held, _ := b.Leases.find(l.ID)
	k := &Block{Lease: held, ask: *a, owner: *o, bucket: *b}
	k.owner.Leases = o.Leases.others(l.ID, now)
	k.bucket.Leases = b.Leases.others(l.ID, now)
	k.owner.Points = maps.Clone(o.Points)
	if scope != nil {
		c := *scope
		c.Leases = scope.Leases.others(l.ID, now)
		k.scope = &c
	}
	return k
}

// others is what of ls a block's copy keeps, less the block's own lease
// id: the others' requests and units in flight, in one lease (ID 0, which
// no settle names) lapsing with the last of them — a few more counted in
// flight for the block's life (those answered meanwhile), so that each
// decision on the copy reads a couple of leases rather than a fleet's.
func (ls Leases) others(id uint64, now time.Time) Leases {
	var all Lease
	for i := range ls {
		if l := &ls[i]; l.ID != id && now.Before(l.Until) {
			all.Requests += l.requests()
			all.Units += l.units()
			if l.Until.After(all.Until) {
				all.Until = l.Until
			}
		}
	}
	out := make(Leases, 0, 8)
	if all.Requests > 0 {
		out = append(out, all)
	}
	return out
}

// Left is how many units the block has not handed out.
func (k *Block) Left() int64 { return k.Lease.requests() - k.handed }

// Take decides a request asking a under lease l at now on the block: it
// goes on one of the block's units when Decide lets it go now on the copy,
// the block's lease outlasts l, and the copy stays plentiful for a (Plenty)
// by the units not handed out — which also says a's reservation commits
// nothing but its lease. Otherwise Take changes nothing and reports false:
// the request is for the shared rows to decide. *l is the caller's copy,
// which Take may change: a unit's lease is not copied once more.
func (k *Block) Take(a *Ask, l *Lease, now time.Time) bool {
	left := k.Left()
	if left <= 0 || l.Until.After(k.Lease.Until) {
		return false
	}
	// The plenty check and the decision read the owner's hold and the
	// bucket's budget of the same copy at the same now: once.
	f := factsOf(&k.owner, &k.bucket, a, now)
	if plentyWith(&k.owner, &k.bucket, k.scope, a, now, &f) < left {
		return false
	}
	d := decideWith([]Option{{Owner: &k.owner, Bucket: &k.bucket, Scope: k.scope}}, a, l, now, &f)
	if d.Wait > 0 || d.Err != nil || d.Index != 0 {
		return false
	}
	k.handed++
	k.used++
	return true
}

// Part says which of a block's rows an answer concerns: its owner, its
// bucket, its scope.
type Part struct{ Owner, Bucket, Scope bool }

// Settle folds an answer this process read into the block's copy, as
// SettleScoped does into the rows — on the parts the answer concerns; id
// is the request's own lease — and reports whether the block is still
// plentiful (see Plentiful). An answer of one of the block's units ends
// that unit's request in the copy; the unit stays handed.
func (k *Block) Settle(p Part, id uint64, ans *Answer, now time.Time) bool {
	var o *Owner
	var b, scope *Bucket
	if p.Owner {
		o = &k.owner
	}
	if p.Bucket {
		b = &k.bucket
		if p.Scope {
			scope = k.scope
		}
	}
	SettleScoped(o, b, scope, id, ans, now)
	return k.Plentiful(now)
}

// GiveBack takes back the unit of the request of lease id, which ended
// without an answer: the block may hand it out again.
func (k *Block) GiveBack(id uint64) {
	k.owner.Release(id)
	k.bucket.Release(id)
	if k.scope != nil {
		k.scope.Release(id)
	}
	k.handed--
}

// Plentiful reports whether the copy still has plenty to spare beyond the
// block's units not handed out, for the ask it was taken for: nothing
// paused, penalised or capped since, and no reading that brought the
// bucket down to the line.
func (k *Block) Plentiful(now time.Time) bool {
	return plentyLeft(&k.owner, &k.bucket, k.scope, &k.ask, now) >= k.Left()
}

// Heard reports whether the block may go on handing out units given the
// rows as they are in the shared store (read after another process wrote
// them): o, b and scope hold the block's lease, its units counted in
// flight as every other process counts them, and must still be plentiful
// with them — no refusal, pause or penalty written since, no reading that
// brought the bucket below the line.
func (k *Block) Heard(o *Owner, b, scope *Bucket, now time.Time) bool {
	return plentyLeft(o, b, scope, &k.ask, now) >= 0
}

// NextSize is the size of the credential's next block after this one
// closed, age after it was taken: what its requests used of it per
// BlockMaxAge — a block used up sooner is followed by a larger one (at
// most four times), one that expired by as many as it handed out — within
// MinBlock and MaxBlock.
func (k *Block) NextSize(age time.Duration) int64 {
	age = max(age, time.Millisecond)
	next := k.used
	if age < BlockMaxAge {
		next = min(k.Lease.requests()*4, int64(float64(k.used)*float64(BlockMaxAge)/float64(age)))
	}
	return min(max(next, MinBlock), MaxBlock)
}

// BlockNews reports whether an answer, settled on bucket b as it was
// before, is news a block held on b by any process must hear at once: b
// holds a block (a live lease standing for several requests), and the
// answer is a refusal, a pause, or a reading that leaves b below the line
// Plenty keeps. A State shared by processes notifies them of such a
// settle (see store/quotastate).
func BlockNews(b *Bucket, ans *Answer, now time.Time) bool {
	r := ans.Reading
	if b == nil || r == nil || !b.Leases.holdsBlock(now) {
		return false
	}
	if r.Limited != headers.NotLimited || r.HasRetryAfter {
		return true
	}
	return r.Remaining != UnknownCount && r.Remaining-b.InFlight(now) < max(PlentyFloor, max(r.Limit, b.Limit)/2)
}

// holdsBlock reports whether a live lease of ls stands for several
// requests: a block taken ahead.
func (ls Leases) holdsBlock(now time.Time) bool {
	for _, l := range ls {
		if l.Requests > 1 && now.Before(l.Until) {
			return true
		}
	}
	return false
}
