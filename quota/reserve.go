package quota

import (
	"slices"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// This file is the one algorithm every state store runs: whether a request
// may go (its owner's secondary limits and its bucket's quota, decided
// together), and what its answer changes. A store only loads the owner and
// bucket, calls these functions under its lock or in its transaction, and
// writes back what changed.

// Ask is what one request needs: the owner's permission under its
// secondary limits, and one unit of its bucket's quota under the policy.
type Ask struct {
	Policy    Policy
	Secondary Secondary
	Cost      Cost
	// Free marks a request the server does not charge (GitHub's
	// /rate_limit): it needs no budget, only the owner's permission.
	Free bool
	// Units is how much of the bucket the request takes: 0 or 1 for a
	// request, a GraphQL query's predicted points. The budget must hold
	// them all (at most the bucket's limit less the reserve), and the
	// lease holds them until the answer.
	Units int64
	// Pack says the caller's order of the options is only taking turns,
	// not a preference (a credential a learner names, one whose cached
	// answer makes the request free): a request of several units then
	// goes to the option it leaves least of among those that let it go
	// now (see tighter).
	Pack bool
	// Conditional marks a request likely to be answered with a free 304
	// (a revalidation): it waits only until the server's own remaining,
	// less the counted requests in flight, is above zero (see
	// Bucket.waitConditional), and its lease holds no quota.
	Conditional bool
	// Scope is the limit the user wrote for the request's scope (see
	// Option.Scope), zero for none: a scope nothing else is known of
	// starts from it.
	Scope Default
}

// units is what a asks of its bucket: at least 1.
func (a *Ask) units() int64 { return max(a.Units, 1) }

// Option is one credential a request could go with: its owner's and its
// bucket's state. Credentials of one owner share both.
type Option struct {
	Owner  *Owner
	Bucket *Bucket
	// Also are buckets the request may turn out to spend from as well: a
	// credential whose owner is not known yet may share any known bucket
	// of its provider. Each must allow the request too, and holds its
	// lease until the answer tells, so a first request of an unknown
	// token never goes into a bucket already spent.
	Also []*Bucket
	// Scope is the bucket of the request's scope (see scope.go), nil for
	// none: the part of the API a refusal the announced buckets cannot
	// explain pauses. It must allow the request too once anything is
	// known of it, and holds its lease until the answer.
	Scope *Bucket
	// Draws are the other buckets the request spends from at once, each
	// its own units (a language model's request: 1 of requests, its
	// prompt of input tokens, its max_tokens of output tokens, beside
	// the bucket that paces it). The request goes only when every one
	// allows it, and then takes from all of them in the same decision,
	// or from none. Each is settled on its own (see Settle with no
	// owner), from what the answer says of that bucket.
	Draws []Draw
}

// Draw is a bucket an option spends from beside its Bucket, and how
// much of it.
type Draw struct {
	Bucket *Bucket
	// Units is what the request takes of it; 0 means 1.
	Units int64
}

// units is what d asks of its bucket: at least 1.
func (d *Draw) units() int64 { return max(d.Units, 1) }

// Wait returns how long from now until a request asking a may go on owner
// o and bucket b: the longer of the owner's and the bucket's waits. It
// changes nothing.
func Wait(o *Owner, b *Bucket, a *Ask, now time.Time) time.Duration {
	var w waitFor
	w.add(o.wait(a.Secondary, a.Cost, now))
	if !a.Free {
		w.add(b.waitUnits(a.Policy, a.units(), now))
	}
	return w.d
}

// waitFor is the longest of several waits, and whether that one is on
// requests in flight (which an answer may end sooner).
type waitFor struct {
	d        time.Duration
	onAnswer bool
	// scoped: the longest wait is a scope's (see Decision.Scoped).
	scoped bool
}

func (w *waitFor) add(d time.Duration, onAnswer bool) {
	switch {
	case d > w.d:
		w.d, w.onAnswer, w.scoped = d, onAnswer, false
	case d == w.d && d > 0:
		w.onAnswer = w.onAnswer && onAnswer
	}
}

// addScope is add for a scope's wait.
func (w *waitFor) addScope(d time.Duration, onAnswer bool) {
	if d > w.d {
		w.d, w.onAnswer, w.scoped = d, onAnswer, true
	}
}

// waitOption is Wait for an option, its Also buckets included.
func waitOption(opt *Option, a *Ask, now time.Time) waitFor {
	var w waitFor
	w.add(opt.Owner.wait(a.Secondary, a.Cost, now))
	switch {
	case a.Free:
	case a.Conditional:
		w.add(opt.Bucket.waitConditional(now))
		w.addScope(scopeWait(opt.Scope, a, now)) // a refused scope's pause holds for every request
		for _, b := range opt.Also {
			w.add(b.waitConditional(now))
		}
		for i := range opt.Draws {
			w.add(opt.Draws[i].Bucket.waitConditional(now))
		}
	default:
		w.add(opt.Bucket.waitUnits(a.Policy, a.units(), now))
		w.addScope(scopeWait(opt.Scope, a, now))
		for i := range opt.Draws {
			d := &opt.Draws[i]
			w.add(d.Bucket.waitUnits(a.Policy, d.units(), now))
		}
		for _, b := range opt.Also {
			// A bucket the reserve leaves nothing of would make the wait
			// never end; the answer will tell whether the credential
			// shares it (and then that credential gets the
			// *ReserveError).
			if a.Policy.reachable(b) == nil {
				w.add(b.waitUnits(a.Policy, a.units(), now))
			}
		}
	}
	return w
}

// Reserve decides where and when a request asking a may go, in the manner
// of x/time/rate's reserveN: it finds among opts the option (credential)
// that allows the request soonest — the earliest moment any of them does,
// never the latest; among equals the first, so the caller's order breaks
// ties (taking turns, preferring a credential whose cached answer makes
// the request free) — and only when that moment is now does it commit:
// lease l is held in both that option's owner and bucket and the owner's
// secondary budgets are spent, all together. It returns the option's index
// and 0. Otherwise it changes nothing and returns the index of the soonest
// option and how long until it allows the request. It returns -1 for no
// options.
//
// An option whose bucket the policy's reserve leaves nothing of (a count
// reserve at or above the bucket's limit) can never allow the request;
// when every option is such, Reserve returns -1 and a *ReserveError rather
// than a wait that would never end.
func Reserve(opts []Option, a *Ask, l Lease, now time.Time) (int, time.Duration, error) {
	d := Decide(opts, a, l, now)
	return d.Index, d.Wait, d.Err
}

// Decision is what Decide decided.
type Decision struct {
	// Index is the chosen option (Wait 0, committed) or the soonest one;
	// -1 for none.
	Index int
	// Wait is how long until the soonest option allows the request.
	Wait time.Duration
	// OnAnswer says an answer may end the wait sooner: some option
	// waits on requests in flight — a concurrency slot, the first probe
	// of an unknown bucket, a bucket spent only by its requests in
	// flight (see Bucket.wait) — which may return what it lacks when
	// they answer. Wait is then only the latest moment, and a waiter
	// should try again at each answer.
	OnAnswer bool
	// Scoped says the soonest option's wait is its scope's: a pause or
	// learnt limit of a part of the API the server does not announce
	// (see scope.go), while its bucket could serve. A caller that has
	// other work may set such a request aside rather than hold a worker.
	Scoped bool
	// Err is a *ReserveError when no option could ever allow it.
	Err error
}

// Decide is Reserve with the whole decision: see Reserve and Decision.
func Decide(opts []Option, a *Ask, l Lease, now time.Time) Decision { return decide(opts, a, &l, now) }

// decide is Decide on *l, a copy of the lease that is the caller's own to
// change: a unit of a block (Block.Take, through decideWith) hands its own
// rather than have a lease of 128 bytes copied once more at each call.
func decide(opts []Option, a *Ask, l *Lease, now time.Time) Decision {
	return decideWith(opts, a, l, now, nil)
}

// decideWith is decide given what of the one option's owner and bucket
// the caller already read at now for a (f; nil when it read nothing): a
// unit of a block (Block.Take) reads them for its plenty check, and the
// decision would read them again.
func decideWith(opts []Option, a *Ask, l *Lease, now time.Time, f *unitFacts) Decision {
	if len(opts) == 1 && goesAtOnceWith(&opts[0], a, now, f) {
		commitAtOnce(&opts[0], a, l, now)
		return Decision{Index: 0}
	}
	return weigh(opts, a, *l, now)
}

// commitAtOnce is commit for a request goesAtOnce lets go: no scope, no
// other bucket, no write, points or content, one unit, and a bucket that
// neither refills continuously nor reaches its refill time, so the window
// has nothing to roll. What is left of commit is the leases, the owner's
// peak and the bucket's pacing; TestGoesAtOnceAgreesWithTheWaits holds it
// to commit's result.
func commitAtOnce(opt *Option, a *Ask, l *Lease, now time.Time) {
	l.Conditional = false
	o, b := opt.Owner, opt.Bucket
	o.refresh(now)
	o.Leases = append(o.Leases, *l)
	if o.Peak < int64(len(o.Leases)) {
		o.Peak = max(o.Peak, o.Leases.sent(now))
	}
	b.prune(now)
	if l.Spacing = b.interval(a.Policy, now); l.Spacing > 0 {
		b.TAT = maxTime(b.TAT, now).Add(l.Spacing)
	}
	b.Leases = append(b.Leases, *l)
}

// weigh is Decide weighing every wait of every option.
func weigh(opts []Option, a *Ask, l Lease, now time.Time) Decision {
	best := -1
	var bestWait waitFor
	var never error
	onAnswer := false
	// A request of several units that more than one bucket lets go now
	// goes where it fits tightest (see tighter), not merely the first.
	packs := a.Pack && a.Units > 1 && !a.Free && !a.Conditional && len(opts) > 1
	for i := range opts {
		if !a.Free {
			if err := opts[i].reachable(a.Policy); err != nil {
				never = err
				continue
			}
		}
		w := waitOption(&opts[i], a, now)
		if best < 0 || w.d < bestWait.d || w.d == bestWait.d && w.onAnswer && !bestWait.onAnswer {
			best, bestWait = i, w
			if w.d == 0 && !packs {
				break
			}
		} else if packs && w.d == 0 && bestWait.d == 0 && tighter(&opts[i], &opts[best], a, now) {
			best = i
		}
		// An answer may end any option's wait on requests in flight
		// long before the soonest known time: the decision's wait
		// is then on answers too.
		onAnswer = onAnswer || w.onAnswer
	}
	if best < 0 {
		return Decision{Index: -1, Err: never}
	}
	if bestWait.d > 0 {
		return Decision{Index: best, Wait: bestWait.d, OnAnswer: onAnswer, Scoped: bestWait.scoped}
	}
	commit(&opts[best], a, l, now)
	return Decision{Index: best}
}

// tighter reports whether a request asking a leaves less of opt's bucket
// than of best's, both known and both letting it go now: best fit. Points
// (GitHub GraphQL) and tokens are spent in pieces of different sizes, and
// a piece never splits across buckets: requests spread evenly leave every
// bucket a little at a window's end (30 and 31 points of two, say) and the
// next request of 33 waits a whole window that the buckets' sum could
// have paid. Filling the fullest bucket that fits keeps the largest room
// whole for a larger request. Options of one bucket, or of a bucket
// nothing is known of, keep the caller's order (taking turns).
func tighter(opt, best *Option, a *Ask, now time.Time) bool {
	if opt.Bucket == best.Bucket {
		return false
	}
	left, ok := opt.Bucket.budgetNow(a.Policy, now)
	bestLeft, bestOK := best.Bucket.budgetNow(a.Policy, now)
	return ok && bestOK && left < bestLeft
}

// commit takes what a request asking a holds of opt at now, under lease l:
// Decide's decision to let it go.
func commit(opt *Option, a *Ask, l Lease, now time.Time) {
	if a.Units > 1 {
		l.Units = a.Units
	}
	l.Conditional = a.Conditional
	opt.Owner.take(a.Secondary, a.Cost, l, now)
	if !a.Free {
		opt.Bucket.take(a.Policy, l, now)
		takeScope(opt.Scope, a, l, now)
		for _, x := range opt.Also {
			x.take(a.Policy, l, now)
		}
		for _, d := range opt.Draws {
			dl := l
			dl.Units = 0
			if d.Units > 1 {
				dl.Units = d.Units
			}
			d.Bucket.take(a.Policy, dl, now)
		}
	}
}

// goesAtOnce reports, cheaply, that waitOption would find no wait for a on
// opt at now and that its bucket is reachable: the common case of a
// request on an owner and a known bucket that nothing limits but the
// budget (a unit of a block, most of all), where Decide need not weigh
// each wait. It reports false whenever it cannot tell, and Decide then
// weighs them all; TestGoesAtOnceAgreesWithTheWaits holds the two to the
// same answer.
func goesAtOnce(opt *Option, a *Ask, now time.Time) bool { return goesAtOnceWith(opt, a, now, nil) }

// goesAtOnceWith is goesAtOnce reading the owner's hold and the bucket's
// budget from f when the caller has them (nil: it reads them itself).
func goesAtOnceWith(opt *Option, a *Ask, now time.Time, f *unitFacts) bool {
	o, b := opt.Owner, opt.Bucket
	if opt.Scope != nil || len(opt.Also) != 0 || len(opt.Draws) != 0 || a.Free || a.Conditional || a.Units > 1 ||
		a.Cost.Write || a.Cost.CreatesContent || a.Secondary.countsPoints(a.Cost) {
		return false
	}
	if f != nil && f.held || f == nil && ownerHolds(o, a, now) {
		return false
	}
	if b.Remaining == UnknownCount || b.Refill > 0 || now.Before(b.BlockedUntil) || b.TAT.After(now) ||
		a.Policy.reachable(b) != nil {
		return false
	}
	if b.refilledBy(now) {
		return false // the window rolls first
	}
	var budget int64
	if f != nil {
		budget = f.budget
	} else {
		budget, _ = b.Budget(a.Policy.reserveFor(b), now)
	}
	return budget >= b.fits(a.Policy, 1)
}

// unitFacts is what both a block's plenty check (plentyLeft) and the
// decision's shortcut (goesAtOnce) read of one owner and bucket for one
// ask at one now: read once (factsOf) for a unit of a block, which runs
// both in turn on a copy nothing changes between them.
type unitFacts struct {
	// held: a penalty or a cap on requests in flight applies to the
	// owner (ownerHolds).
	held bool
	// budget is the bucket's Budget under the ask's policy; 0 when
	// nothing is known of the bucket, which both check first.
	budget int64
}

// factsOf reads unitFacts of o and b for a at now.
func factsOf(o *Owner, b *Bucket, a *Ask, now time.Time) unitFacts {
	f := unitFacts{held: ownerHolds(o, a, now)}
	f.budget, _ = b.Budget(a.Policy.reserveFor(b), now)
	return f
}

// ownerHolds reports whether owner o is penalised at now or has a cap on
// its requests in flight for a: either may hold a request back.
func ownerHolds(o *Owner, a *Ask, now time.Time) bool {
	return now.Before(o.PenaltyUntil) || o.ConcurrencyCap(a.Secondary, now) > 0
}

// reachable reports a bucket of opt, its own or one it draws from, that
// policy p's reserve leaves nothing of.
func (opt *Option) reachable(p Policy) error {
	if err := p.reachable(opt.Bucket); err != nil {
		return err
	}
	for i := range opt.Draws {
		if err := p.reachable(opt.Draws[i].Bucket); err != nil {
			return err
		}
	}
	return nil
}

// Answer is what a request's outcome tells the quota state.
type Answer struct {
	// Reading is the response's rate-limit reading, on the local clock;
	// nil when there was no response (never sent, a network error, a
	// cancelled request): the reservation is then only released.
	Reading *headers.Reading
	// Counted says whether the server charged the request (see
	// Bucket.Observe).
	Counted bool
	// Default is what to assume of a bucket whose server states nothing.
	Default Default
	// Jitter, in [0, 1), picks the point of an exponential penalty.
	Jitter float64
	// Sent is when the request was sent (zero when unknown):
	// a refusal of a request sent before the owner's current penalty
	// began belongs to the episode that penalty already answers.
	Sent time.Time
	// Secondary is the owner's secondary limits: the configured max in
	// flight its learnt cap moves within, and the first pause after a
	// refusal that does not say when to come back.
	Secondary Secondary
	// MaxPause caps every pause the answer stores — a bucket's Retry-After
	// on any status, an owner's penalty — so that a proxy's
	// "Retry-After: 86400" stops nothing for a day; zero means
	// DefaultMaxPause. A refusal past the pause only starts another.
	MaxPause time.Duration
	// Units is what the request really cost, when more than 1 (a GraphQL
	// query's points, known from its answer); 0 means what its lease
	// held. It matters only when the reading states no remaining: the
	// bucket then counts the units itself. A stated remaining already
	// counts them.
	Units int64
	// Succeeded counts the requests of the answer's scope this process
	// saw succeed since a time: the best a refusal of a scope nothing
	// was known of can learn, a lower bound of the fleet's count, so
	// its limit is provisional (see Bucket.Provisional); nil when
	// unknown.
	Succeeded func(since time.Time) int64
	// Returned, with no Reading, ends that many of the requests the
	// lease stands for (see Lease.Requests), none of them sent; 0 means
	// 1.
	Returned int64
	// BareWait is the provider's first pause after a bare refusal that
	// names no time (see headers.Bare): GitHub's "at least a minute";
	// zero means ScopeBackoff (1 s). Each fresh bare refusal in a row
	// doubles it (see Bucket.pauseBare).
	BareWait time.Duration
	// Continuous says the bucket refills continuously, a token bucket
	// whose reset is when it is full again (see Bucket.Refill).
	Continuous bool
}

// Settle is SettleScoped for a request with no scope.
func Settle(o *Owner, b *Bucket, id uint64, ans *Answer, now time.Time, also ...*Bucket) {
	SettleScoped(o, b, nil, id, ans, now, also...)
}

// SettleScoped ends the reservation of lease id on owner o, bucket b and the
// request's scope (nil for none; see Option.Scope) — and the buckets also
// held: their lease is returned and a counted request counted in them as
// well — and applies the answer: the request's concurrency and in-flight
// quota are returned, and the reading (if any) updates o and b, or, for a
// refusal b's state cannot explain (see refusalOfScope), pauses and
// teaches the scope instead, leaving b as it was. Either of o and b may be
// nil when there is nothing to apply to it; id 0 settles no reservation (a
// reading learnt outside one, such as a status endpoint's). Settling a
// lease that lapsed is harmless: the reading still applies.
func SettleScoped(o *Owner, b, scope *Bucket, id uint64, ans *Answer, now time.Time, also ...*Bucket) {
	if n := ans.Returned - 1; n > 0 && ans.Reading == nil {
		// All but the one released below.
		if o != nil {
			o.Leases, _, _ = o.Leases.less(id, n)
		}
		if b != nil {
			b.Leases, _, _ = b.Leases.less(id, n)
		}
	}
	spent := ans.spent(id, b, also)
	for _, x := range also {
		x.Release(id)
		if r := ans.Reading; r != nil && ans.Counted && r.Limited == headers.NotLimited {
			// The request may have been counted in it: count it
			// there too, until the bucket's own answers speak (the
			// extra is at most one request per unknown credential).
			x.spentElsewhere(spent, now)
		}
	}
	scoped := false
	if scope != nil {
		holder := scope.Leases.holderOf(id)
		uncounted := len(scope.Uncounted) > 0 && slices.Contains(scope.Uncounted, id)
		scope.Release(id)
		if r := ans.Reading; r != nil {
			// A bare refusal says nothing of b: the narrowest part of
			// the API known to have refused is the request's scope.
			scoped = r.Limited == headers.Bare ||
				r.Limited == headers.Primary && (b == nil || refusalOfScope(b, r, now))
			scope.observeScope(ans, scoped, holder, uncounted, now)
		}
	}
	// An answer the server did not charge (a 304 to a conditional
	// request) gives back the pacing and points its reservation took, as
	// well as the quota: free repeats are not paced as if spent.
	free := ans.Reading != nil && !ans.Counted && ans.Reading.Limited == headers.NotLimited && ans.Reading.Status < 500
	if o != nil {
		inFlight := o.InFlight(now) // this request's lease still counted
		if free {
			o.refund(id)
		} else {
			o.Release(id)
		}
		o.refresh(now)
		if ans.Reading != nil {
			o.Observe(ans, max(inFlight, 1), now)
		}
	}
	if b != nil {
		if free {
			b.refund(id)
		} else {
			b.Release(id)
		}
		switch {
		case ans.Reading == nil || scoped:
			b.prune(now)
		case ans.Reading.Limited == headers.Bare:
			b.pauseBare(ans, now)
		default:
			b.clearBare(ans, now)
			b.observe(ans.Reading, now, ans.Sent, ans.Counted, ans.Default, ans.MaxPause)
			b.countUnits(ans, spent)
			if ans.Continuous {
				b.learnRefill(ans.Reading, now)
			}
		}
	}
}

// countUnits counts the spent units of a charged request beyond the one
// observe counted, when the server stated no remaining.
func (b *Bucket) countUnits(ans *Answer, spent int64) {
	if spent > 1 && ans.Counted && ans.Reading.Remaining == UnknownCount && b.Remaining != UnknownCount {
		b.Remaining = max(b.Remaining-(spent-1), 0)
	}
}

// spent is what the request of lease id cost if charged: the units its
// answer states, else those its reservation held (in b or a bucket also
// held), so that an answer which does not say gives back no points its
// query held in flight.
func (ans *Answer) spent(id uint64, b *Bucket, also []*Bucket) int64 {
	if ans.Units > 0 {
		return ans.Units
	}
	if b != nil {
		if l, ok := b.Leases.find(id); ok {
			return max(l.units()/l.requests(), 1)
		}
	}
	for _, x := range also {
		if l, ok := x.Leases.find(id); ok {
			return max(l.units(), 1)
		}
	}
	return 1
}
