package transport

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
)

// route says how one request chooses its credential: pinned to one (the
// "who am I" request, a learner's choice), or among the pool with one put
// first.
type route struct {
	only     *creds.Credential // the one credential the request may take
	first    *creds.Credential // the credential to prefer among equals
	turnHeld bool              // the request holds its pool's learning turn
	// validating: the request is a "who am I" request (its credential
	// is not to be asked again first).
	validating bool
	// widened: while learning, the credentials the learner did not name
	// may go too, because those it did can never allow the request
	// (see learnerCannotServe).
	widened bool
	// owner keeps to the credentials that may see the request's owner
	// (route.go).
	owner *ownerRoute
}

// acquire picks the credential whose quota lets the request go soonest,
// waits until then and reserves the quota, recording the grant. Among
// credentials that can go equally soon they take turns. It returns a
// *WaitError instead of waiting longer than the max wait, and the
// context's error as soon as it ends. Every credential that is not invalid
// is a candidate, those whose quota is spent included: the state knows
// when each returns, and the request waits for the earliest.
func (x *exchange) acquire() error {
	t, l := x.t, x.l
	if l.policyErr != nil {
		return l.policyErr
	}
	x.reserve.Ask = l.ask(x.class)
	x.reserve.Ask.Conditional = x.conditional
	t.startHolding(x.ctx)
	// A wake handed to the request while it waited outside (a gateway,
	// WaitError.Await) goes on after its first decision, as a waiter's.
	baton := takeWake(x.ctx)
	var line waitKey // the line of the request's last wait (see waiters)
	for {
		if err := x.ctx.Err(); err != nil {
			t.waiters.pass(baton)
			return err
		}
		if x.repriceTokens() || x.reestimate() {
			x.reserve.Ask = l.ask(x.class)
			x.reserve.Ask.Conditional = x.conditional
		}
		// Points go where they fit tightest unless a credential is to
		// go first (the learner's, the one whose owner was just asked):
		// the learner compares the answers of those it names.
		x.reserve.Ask.Pack = x.rt.first == nil
		now := t.opts.Now()
		cands := t.candidates(x.req, x.pool, x.cands[:0], x.rt, now)
		if len(cands) == 0 {
			t.waiters.pass(baton)
			return t.noCredential(l.p, x.pool)
		}
		slots := x.slots[:0]
		for _, c := range cands {
			sl := l.slot(c, x.class)
			sl.Draws = x.drawsOf(sl)
			if !c.BucketKnown() {
				sl.Also = l.knownBuckets(x.pool, c, x.class)
			}
			slots = append(slots, sl)
		}
		x.reserve.Slots = slots
		x.reserve.Lease = quota.Lease{ID: t.leaseID(), Until: now.Add(t.opts.Lease), Holder: t.holder}
		x.reserve.Now, x.reserve.Clock = now, t.opts.Now
		x.reserve.Waited = x.waited > 0
		// The reservation runs to its end even if the context ends
		// meanwhile: a transaction cut short could have committed
		// without the caller knowing, and its lease would be held until
		// it lapsed. (A State that does I/O bounds it with a timeout of
		// its own.)
		gen := t.waiters.gen()
		d, err := t.state.Reserve(context.WithoutCancel(x.ctx), &x.reserve)
		if err != nil && x.learnerCannotServe(err) {
			continue
		}
		if err != nil {
			t.waiters.pass(baton)
			return reserveFailed(l.p, x.class, err)
		}
		c := cands[d.Index]
		if d.Wait == 0 {
			x.grant = grant{cred: c, slot: slots[d.Index], lease: x.reserve.Lease.ID, held: true, sent: now, class: x.class, waited: x.waited}
			if err := x.ctx.Err(); err != nil {
				x.release()
				return err
			}
			if !x.rt.validating && t.whoAmIDue(l.p, x.pool, c, now) {
				// The owner is to be asked first (a shared database,
				// pass-through), or an earlier "who am I" failed and
				// its time to try again has come: give the reservation
				// back, ask, and choose again.
				x.release()
				t.askOwner(x.ctx, l.p, c, x.rt.turnHeld)
				x.rt.first = c
				continue
			}
			// A wake this request used goes on too: an answer may
			// free more than one (a first probe's frees them all).
			// One that woke at its own time wakes the next of its line.
			if baton.upTo == 0 {
				t.waiters.wakeLine(line)
			}
			t.waiters.pass(baton)
			if x.waited > 0 {
				t.emit(Event{Kind: EventWaited, Provider: l.p.Name, Resource: x.class.Resource, Credential: c.Masked(), Wait: x.waited})
				t.log.Debug("waited for quota", "provider", l.p.Name, "resource", x.class.Resource, "credential", c.Masked(), "wait", x.waited)
			}
			return nil
		}
		// A wake handed to this request that it could not use goes on
		// to the next waiter that does not wait for the same (see
		// waiters).
		key := waitKeyOf(slots[d.Index], &x.reserve.Ask, d, now)
		t.waiters.passOver(baton, line, key)
		baton, line = relay{}, key
		if x.hasStale {
			// Its caller accepts the stale answer rather than a wait.
			return errServeStale
		}
		// d.Wait runs from when the decision was taken, which a State
		// that waited out a database outage took after now: a WaitError
		// counts its Until from the time read after the decision, so
		// that a caller sleeping until it does not wake early. (The
		// line's key keeps now: it only groups the waiters.)
		sleep, werr := x.nextWait(c, d, t.opts.Now(), key)
		if werr != nil {
			if we, ok := werr.(*WaitError); ok {
				we.t, we.onAnswer, we.gen = t, d.OnAnswer, gen
				we.waited = newWaitedFor(slots, x.reserve.Ask)
			}
			return werr
		}
		if baton, err = x.waitQuota(c, sleep, d, gen, key); err != nil {
			return err
		}
	}
}

// nextWait says how long the request, which cannot go yet, sleeps before
// it asks again, or the *WaitError to return instead. The max wait bounds
// the whole wait, not each step: a wait that keeps coming back (a bucket
// refilled at each reset but never enough) still ends.
//
// A wait until a known time (a reset, a penalty, pacing) that ends past
// the max wait returns at once, carrying that time. A wait on requests in
// flight (a concurrency slot, a first probe: Decision.OnAnswer) ends at
// an answer, which wakes the request, and at the latest when their
// earliest lease lapses (d.Wait): it is waited for until the max wait
// runs out, and its WaitError then carries when an answer is expected,
// one round trip from now. On a State whose other processes' answers wake waiters
// here (Waker), such a wait sleeps until then, at most maxOnAnswerSleep:
// a wake lost (a listener reconnecting, a wake between a decision and
// its sleep that the spare did not catch) costs at most that. Otherwise
// it asks again every round trip: on a state shared with other processes
// their answers wake nobody here.
func (x *exchange) nextWait(c *creds.Credential, d Decision, decided time.Time, key waitKey) (time.Duration, error) {
	w := d.Wait
	maxWait := x.maxWait()
	if sw := x.t.opts.ScopeMaxWait; d.Scoped && sw > 0 && sw < maxWait {
		maxWait = sw
	}
	waitErr := func(d time.Duration) error {
		return &WaitError{Provider: x.l.p.Name, Resource: x.class.Resource, Scope: x.class.Scope.Key, Credential: c.Masked(),
			Until: decided.Add(d), Wait: d, MaxWait: maxWait, Latest: decided.Add(max(d, w))}
	}
	if !d.OnAnswer {
		if x.waited+w > maxWait {
			return 0, waitErr(w)
		}
		// The waiters already in line for the same time go first: the
		// first that goes wakes the next (wakeLine); the k-th in line
		// sleeps k times maxOnAnswerSleep longer, in case that chain
		// ends, so that a line of N does not all ask again at once.
		extra := maxOnAnswerSleep * time.Duration(x.t.waiters.ahead(key))
		return w + min(extra, maxWait-x.waited-w), nil
	}
	rtt := x.l.roundTrip()
	left := maxWait - x.waited
	if left <= 0 {
		return 0, waitErr(min(rtt, w))
	}
	if x.t.waiters.across {
		// The waiters already waiting on answers for the same go first
		// (an answer wakes the oldest): the k-th in line sleeps k times
		// maxOnAnswerSleep, so that a line of N asks again about once
		// a second in all, not N times.
		return min(w, left, maxOnAnswerSleep*time.Duration(1+x.t.waiters.ahead(key))), nil
	}
	// Asked again every round trip: an answer wakes one waiter, which
	// suits an answer that frees one slot, but a first probe's answer
	// opens the bucket to all of them, and on a shared state other
	// processes' answers wake nobody here.
	return min(w, left, rtt), nil
}

// maxOnAnswerSleep bounds a wait on requests in flight when answers of
// every process wake it (see nextWait).
const maxOnAnswerSleep = time.Second

// candidates lists the credentials the request may go with, in the order
// that breaks ties: taking turns (Pool.AppendTurn), except that the route's
// first credential comes first, and that for a repeated GET the
// credentials whose owner holds an answer of its own come next: any
// credential revalidates a shared answer (see package cache), but where
// validators differ per credential (GitHub's ETags) only the owner's own
// makes the repeat a free 304. A pinned route has its one credential, if
// it is not invalid.
func (t *Transport) candidates(req *http.Request, pool *creds.Pool, dst []*creds.Credential, rt route, now time.Time) []*creds.Credential {
	if rt.only != nil {
		if rt.only.Eligible(now) {
			dst = append(dst, rt.only)
		}
		return dst
	}
	dst = pool.AppendTurn(dst, now)
	if rt.owner != nil {
		dst = rt.owner.filter(dst)
	}
	if rt.turnHeld && !rt.widened {
		// Learning: a credential whose bucket is unknown goes only when
		// the learner names it, so its first answer is compared with
		// the others' in the order the server counted them.
		k := 0
		for _, c := range dst {
			if c == rt.first || c.BucketKnown() {
				dst[k] = c
				k++
			}
		}
		dst = dst[:k]
	}
	if len(dst) < 2 {
		return dst
	}
	front := 0
	if rt.first != nil {
		if i := slices.Index(dst, rt.first); i >= 0 {
			moveToFront(dst, i, front)
			front++
		}
	}
	if t.cache != nil && req.Method == http.MethodGet {
		seen := ""
		for i := front; i < len(dst); i++ {
			owner := dst[i].BucketOwner()
			if owner == seen {
				continue
			}
			seen = owner
			if t.cache.Holds(req, owner) {
				moveToFront(dst, i, front)
				break
			}
		}
	}
	return dst
}

// moveToFront moves s[i] to s[front], shifting what was between one place
// back, so the rest keep their order.
func moveToFront(s []*creds.Credential, i, front int) {
	if i <= front {
		return
	}
	c := s[i]
	copy(s[front+1:i+1], s[front:i])
	s[front] = c
}

// knownBuckets are the buckets of the pool's credentials whose bucket is
// known, other than c's, for the resource: those c may turn out to share
// while its own is unknown, which its requests must not overspend either.
func (l *lane) knownBuckets(pool *creds.Pool, c *creds.Credential, class provider.Request) []BucketID {
	var out []BucketID
	key := l.key
	for _, o := range pool.Credentials() {
		if o == c || !o.BucketKnown() || o.Kind() == creds.Anonymous {
			continue
		}
		id := BucketID{Provider: key, Owner: o.BucketOwner(), Resource: class.Resource}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func (l *lane) slot(c *creds.Credential, class provider.Request) Slot {
	owner := c.BucketOwner()
	key := l.key
	s := Slot{Owner: OwnerID{Provider: key, Owner: owner}, Bucket: BucketID{Provider: key, Owner: owner, Resource: class.Resource}}
	if class.Scope.Key != "" {
		s.Scope = BucketID{Provider: key, Owner: owner, Resource: class.Scope.Key}
	}
	return s
}

// leaseID returns a new reservation's lease ID: this process's random base
// plus a counter, so IDs never repeat here and collide across processes
// only by a 2⁻⁶⁴ chance.
func (t *Transport) leaseID() uint64 {
	for {
		if id := t.leaseBase + t.leaseSeq.Add(1); id != 0 {
			return id
		}
	}
}

// waitFor sleeps d, or less when an answer may have freed what the request
// waits for (see waiters), or until ctx ends; it adds the time slept to
// *waited. It returns the baton of a wake it received, to be passed on if
// the request still cannot go. gen is the waiters' wakes count taken
// before the decision to wait, key what it waits on answers for (see
// waiters.join).
func (t *Transport) waitFor(ctx context.Context, d time.Duration, waited *time.Duration, gen uint64, key waitKey) (relay, error) {
	w := t.waiters.join(gen, key)
	start := t.opts.Now()
	timer := t.opts.Clock.NewTimer(d)
	defer timer.Stop()
	defer func() { *waited += t.opts.Now().Sub(start) }()
	select {
	case baton := <-w.woken:
		return baton, nil
	case <-timer.C():
	case <-ctx.Done():
	}
	if !t.waiters.leave(w) {
		// A wake was handed over just as the wait ended: keep it.
		baton := <-w.woken
		if err := ctx.Err(); err != nil {
			t.waiters.pass(baton)
			return relay{}, err
		}
		return baton, nil
	}
	return relay{}, ctx.Err()
}

func (t *Transport) noCredential(p *provider.Provider, pool *creds.Pool) error {
	e := &NoCredentialError{Provider: p.Name}
	now := t.opts.Now()
	for _, c := range pool.Credentials() {
		st := c.Status(now)
		e.Invalid = append(e.Invalid, c.Masked()+": "+st.Reason)
	}
	return e
}

// restore applies, once per pool, what the credential store remembers:
// rejected tokens stay rejected until their retry time, and known owners
// and buckets need not be learnt again.
func (t *Transport) restore(ctx context.Context, p *provider.Provider, pool *creds.Pool) {
	if t.opts.Credentials == nil {
		return
	}
	v, _ := t.restored.LoadOrStore(pool, &sync.Once{})
	v.(*sync.Once).Do(func() {
		now := t.opts.Now()
		for _, c := range pool.Credentials() {
			if c.Kind() == creds.Anonymous {
				continue
			}
			rec, ok, err := t.opts.Credentials.LoadCredential(ctx, t.stateKey(p), c.ID())
			if err != nil {
				t.log.Warn("reading remembered credential state", "provider", p.Name, "credential", c.Masked(), "err", err)
				continue
			}
			if !ok {
				continue
			}
			switch {
			case rec.OwnerID != "" || rec.OwnerName != "":
				c.SetOwner(provider.Owner{ID: rec.OwnerID, Name: rec.OwnerName})
			case rec.Bucket != "":
				c.SetBucketOwner(rec.Bucket)
			}
			if rec.Invalid {
				retry := rec.RetryAt
				if retry.IsZero() {
					retry = rec.ValidatedAt.Add(t.opts.InvalidRetry)
				}
				c.MarkInvalid(rec.Reason, rec.ValidatedAt, retry)
			} else if rec.OwnerID != "" || rec.OwnerName != "" {
				c.MarkValidated(now)
			}
		}
	})
}

// remember saves what is known of c for other processes and restarts.
func (t *Transport) remember(ctx context.Context, p *provider.Provider, c *creds.Credential, now time.Time) {
	if t.opts.Credentials == nil || c.Kind() == creds.Anonymous {
		return
	}
	st := c.Status(now)
	rec := CredentialRecord{ValidatedAt: now}
	if st.State == creds.Invalid {
		rec.Invalid, rec.Reason, rec.RetryAt = true, st.Reason, st.Until
	}
	if o := c.Owner(); o.Key() != "" {
		rec.OwnerID, rec.OwnerName = o.ID, o.Name
	} else if c.BucketKnown() {
		rec.Bucket = c.BucketOwner()
	}
	if !rec.Invalid && rec.OwnerID == "" && rec.OwnerName == "" && rec.Bucket == "" {
		return
	}
	if err := t.opts.Credentials.SaveCredential(ctx, t.stateKey(p), c.ID(), rec); err != nil {
		t.log.Warn("saving credential state", "provider", p.Name, "credential", c.Masked(), "err", err)
	}
}
