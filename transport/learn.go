package transport

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
)

// learning is one pool's learning of which credentials share a bucket (see
// creds.Learner): while it lasts, the pool's requests go one at a time,
// each with the credential the learner names, so the server's counters in
// their answers tell the buckets apart. It costs no request: the requests
// are the caller's own work.
type learning struct {
	turn chan struct{} // holds one token while a request has the turn
	done atomic.Bool   // nothing left to learn: no turns taken

	// On a shared state that orders turns (LearningTurns), the request
	// holding this process's turn also holds the shared one; these are
	// guarded by turn.
	t          *Transport
	key        string // the provider's state key
	sharedHeld bool
	seq        uint64 // the shared turn's sequence number when last taken
	// keep is how long a shared turn is kept once its request ends (see
	// give), and kept counts the keepings, so that a timer of an earlier
	// one does nothing.
	keep time.Duration
	kept uint64

	settled []*creds.Credential // observed, to be remembered (learnFrom); guarded by mu

	mu sync.Mutex
	l  *creds.Learner
}

// learningFor returns pool's learning, starting it (once the credential
// store's memory is applied) on first use; nil when there is nothing to
// learn: a single token is its own bucket whoever owns it.
func (t *Transport) learningFor(ctx context.Context, p *provider.Provider, pool *creds.Pool) *learning {
	if v, ok := t.learnings.Load(pool); ok {
		return v.(*learning)
	}
	t.restore(ctx, p, pool)
	var static []*creds.Credential
	now := t.opts.Now()
	for _, c := range pool.Credentials() {
		if c.Kind() != creds.Anonymous && c.Eligible(now) {
			static = append(static, c)
		}
	}
	lg := &learning{turn: make(chan struct{}, 1), l: creds.NewLearner(static), t: t, key: t.stateKey(p)}
	if len(static) < 2 || !lg.l.Learning() || t.opts.Credentials != nil && t.turns == nil || p.OwnerInHeader() {
		// With a shared database that cannot order the learning turn
		// among processes, other processes spend the same buckets at
		// any moment, and counters cannot prove that two tokens count
		// together: each token's owner is asked once per database
		// instead (see askFirst). An API that names the owner in a
		// header is asked too: continuous buckets refill between two
		// answers, so their counters cannot prove a share.
		lg.done.Store(true)
	}
	v, _ := t.learnings.LoadOrStore(pool, lg)
	return v.(*learning)
}

// give frees this process's turn. The shared one, if held, is kept for
// lg.keep while something is left to learn, and given back then unless a
// request of this process took it again meanwhile. A process that takes
// the shared turn after another had it forgets the counters it saw
// (catchUp), and refreshes them before it can probe: 8 fetch processes
// taking the turn in turns spent every turn refreshing, learnt nothing
// for windows on end, left tokens unused and took twice their ideal.
// Kept, one process learns in a row what the others adopt from the
// credential store; its turn's lease is renewed at each taking.
func (lg *learning) give() {
	if lg.t != nil && lg.t.turns != nil && lg.sharedHeld {
		if lg.done.Load() || lg.keep <= 0 {
			lg.t.giveShared(lg, lg.key)
		} else {
			lg.kept++
			kept := lg.kept
			lg.t.afterFunc(lg.keep, func() { lg.giveKept(kept) })
		}
	}
	<-lg.turn
}

// giveKept gives back the shared turn kept by the keeping numbered kept,
// if no request holds this process's turn (its give decides then) and it
// was not kept again since.
func (lg *learning) giveKept(kept uint64) {
	select {
	case lg.turn <- struct{}{}:
		if lg.kept == kept {
			lg.t.giveShared(lg, lg.key)
		}
		<-lg.turn
	default:
	}
}

// keepShared bounds how long a shared learning turn is kept for this
// process's next request (see learning.give).
const keepShared = time.Second

// next is the credential the learner wants the next request to take.
func (lg *learning) next() *creds.Credential {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	return lg.l.Next()
}

// observeLearning feeds one answer, received while holding the turn, to
// the learner, before the answer is settled: the credential's reservation
// also holds a lease in each known bucket it might share (Slot.Also), where
// its counted answer would count too. The buckets the learner now knows it
// was not counted in are released without counting it, so a probe of a
// token that turns out to spend a bucket of its own costs the others
// nothing (with an exact fit, that one unit cost a window).
func (x *exchange) observeLearning(counted bool) {
	t, g, lg := x.t, &x.grant, x.turn
	u := usageOf(&x.reading, x.class.Resource, x.s.now)
	u.Units = x.class.Units // a GraphQL query counts its points
	lg.mu.Lock()
	lg.settled = append(lg.settled, lg.l.Observe(g.cred, u, counted)...)
	keep := lg.l.MayShare(g.cred)
	lg.mu.Unlock()
	if keep == nil || len(g.slot.Also) == 0 {
		return
	}
	also := make([]BucketID, 0, len(g.slot.Also))
	for _, id := range g.slot.Also {
		if slices.Contains(keep, id.Owner) {
			also = append(also, id)
			continue
		}
		sp := &SettleParams{Slot: Slot{Bucket: id}, Lease: g.lease, Now: x.s.now}
		if err := t.state.Settle(context.WithoutCancel(x.ctx), sp); err != nil {
			t.log.Warn("quota state update failed; the reservation lapses with its lease", "bucket", id.String(), "err", err)
		}
	}
	g.slot.Also = also
}

// learnFrom follows the answers the learner observed (observeLearning):
// it remembers what they settled; asks "who am I" about credentials the
// answers cannot place (with the turn still held, so nothing else goes in
// between); and ends the learning when nothing is left.
func (t *Transport) learnFrom(ctx context.Context, p *provider.Provider, lg *learning, now time.Time) {
	lg.mu.Lock()
	settled := lg.settled
	lg.settled = nil
	ask := lg.l.NeedsWhoAmI()
	lg.mu.Unlock()
	for _, s := range settled {
		t.log.Debug("bucket learnt from answers", "provider", p.Name, "credential", s.Masked(), "bucket", s.BucketOwner())
		t.remember(ctx, p, s, now)
	}
	_, canAsk := p.ValidationURL()
	for _, a := range ask {
		if !canAsk || t.opts.SkipValidation {
			// Nothing can tell: a bucket of its own.
			a.KeepOwnBucket()
			t.remember(ctx, p, a, now)
			continue
		}
		t.askOwner(ctx, p, a, true)
		if !a.BucketKnown() && a.State(t.opts.Now()) != creds.Invalid {
			// Nothing tells: it counts as a bucket of its own; the
			// "who am I" request is tried again before later uses.
			t.log.Warn("cannot tell whose bucket a credential spends; counting it as its own", "provider", p.Name, "credential", a.Masked())
		}
	}
	lg.mu.Lock()
	if !lg.l.Learning() {
		lg.done.Store(true)
	}
	lg.mu.Unlock()
}

// unlearn drops a rejected credential from its pool's learning: there is
// nothing to learn of it, and waiting for it would keep the pool's
// requests one at a time.
func (t *Transport) unlearn(p *provider.Provider, c *creds.Credential) {
	pool, err := t.poolFor(p)
	if err != nil {
		return
	}
	v, ok := t.learnings.Load(pool)
	if !ok {
		return
	}
	lg := v.(*learning)
	lg.mu.Lock()
	lg.l.Drop(c)
	if !lg.l.Learning() {
		lg.done.Store(true)
	}
	lg.mu.Unlock()
}

// usageOf is what an answer says of its bucket's counters: used as stated
// (GitHub's x-ratelimit-used, GitLab's RateLimit-Observed) or limit −
// remaining; -1 where it says nothing.
func usageOf(r *headers.Reading, resource string, now time.Time) creds.Usage {
	used := r.Used
	if used == quota.UnknownCount && r.Limit != quota.UnknownCount && r.Remaining != quota.UnknownCount {
		used = r.Limit - r.Remaining
	}
	u := creds.Usage{Resource: r.Resource, Limit: int(r.Limit), Used: int(used), At: now}
	if r.HasReset() {
		u.Reset, u.ServerReset, u.ServerAt = r.Reset, r.ServerReset, r.ServerTime
	}
	if u.Resource == "" {
		u.Resource = resource
	}
	if r.Limit == quota.UnknownCount {
		u.Limit = -1
	}
	if used == quota.UnknownCount {
		u.Used = -1
	}
	return u
}

// whoAmI asks the provider who owns c with its "who am I" request, sent
// as an exchange of its own pinned to c (see Transport.pinned): reserved,
// paced and read like any other request, so learning an owner never
// overspends a bucket. A 401 marks c invalid until Options.InvalidRetry
// from now. It returns Validate's error.
func (t *Transport) whoAmI(ctx context.Context, p *provider.Provider, c *creds.Credential, turnHeld bool) error {
	// The answer was settled into c's bucket as it stood when the request
	// went: its own, not yet its owner's. Its reading (read once, by the
	// exchange) is kept to be applied to the owner's bucket once the
	// answer names the owner, which the request spent too.
	l := t.laneFor(p)
	var answer struct {
		reading    headers.Reading
		got        bool
		resource   string
		wasUnknown bool
	}
	rt := rtFunc(func(req *http.Request) (*http.Response, error) {
		unknown := !c.BucketKnown()
		resp, r, err := t.pinned(req, l, c, turnHeld)
		if err == nil {
			answer.reading, answer.got = r, true
			answer.resource, answer.wasUnknown = p.Classify(req.Method, req.URL).Resource, unknown
		}
		return resp, err
	})
	_, err := creds.ValidateAt(ctx, rt, p, c, t.opts.Now)
	now := t.opts.Now()
	switch {
	case err == nil:
		t.validations.Delete(c)
		if answer.got && answer.wasUnknown && c.BucketKnown() {
			r := answer.reading
			t.observe(ctx, p, Slot{Bucket: BucketID{Provider: l.key, Owner: c.BucketOwner(), Resource: answer.resource}}, &r, now, true)
		}
	case errors.Is(err, creds.ErrInvalid):
		c.RetryInvalidAt(now.Add(t.opts.InvalidRetry))
		t.unlearn(p, c)
		t.emit(Event{Kind: EventCredentialInvalid, Provider: p.Name, Credential: c.Masked(), Status: http.StatusUnauthorized})
		t.log.Warn("credential rejected", "provider", p.Name, "credential", c.Masked(), "retry_at", now.Add(t.opts.InvalidRetry))
		t.validations.Delete(c)
	default:
		// Not an answer about the credential (a network error, a 403
		// for a token without the scope, a 5xx): try again later,
		// backing off.
		v, _ := t.validations.LoadOrStore(c, &validationRetry{})
		vr := v.(*validationRetry)
		vr.mu.Lock()
		vr.fails++
		vr.next = now.Add(min(time.Second<<min(vr.fails-1, 9), 10*time.Minute))
		vr.mu.Unlock()
		t.log.Debug("asking who owns a credential failed", "provider", p.Name, "credential", c.Masked(), "err", err)
	}
	t.remember(ctx, p, c, now)
	return err
}

// askOwner learns c's owner once for all the requests that need it: the
// first asks (unless the shared database already knows, from another
// process), the others wait for its answer or their own end.
func (t *Transport) askOwner(ctx context.Context, p *provider.Provider, c *creds.Credential, turnHeld bool) {
	done := make(chan struct{})
	if v, loaded := t.asking.LoadOrStore(c, done); loaded {
		select {
		case <-v.(chan struct{}):
		case <-ctx.Done():
		}
		return
	}
	defer func() {
		t.asking.Delete(c)
		close(done)
		t.waiters.wake()
	}()
	if t.adopt(ctx, p, c) && c.BucketOwner() != c.ID() {
		// (A bucket of its own, remembered, is what the asking
		// doubts: see creds.Learner.retry.)
		return
	}
	t.whoAmI(ctx, p, c, turnHeld)
}

// adopt takes c's owner or bucket from the credential store if another
// process learnt it since this one started, and reports whether c's
// bucket is now known.
func (t *Transport) adopt(ctx context.Context, p *provider.Provider, c *creds.Credential) bool {
	if t.opts.Credentials == nil {
		return false
	}
	rec, ok, err := t.opts.Credentials.LoadCredential(ctx, t.stateKey(p), c.ID())
	if err != nil || !ok {
		return false
	}
	switch {
	case rec.OwnerID != "" || rec.OwnerName != "":
		c.SetOwner(provider.Owner{ID: rec.OwnerID, Name: rec.OwnerName})
		c.MarkValidated(t.opts.Now())
	case rec.Bucket != "":
		c.SetBucketOwner(rec.Bucket)
	}
	return c.BucketKnown()
}

// validationRetry is when a failed "who am I" request may be tried again.
type validationRetry struct {
	mu    sync.Mutex
	fails int
	next  time.Time
}

// whoAmIDue reports whether c, whose bucket is not known, should be asked
// "who am I" before this use: at its first use where nothing else can tell
// (see askFirst); after a failed request, once its backoff is over.
func (t *Transport) whoAmIDue(p *provider.Provider, pool *creds.Pool, c *creds.Credential, now time.Time) bool {
	if t.opts.SkipValidation || c.Kind() != creds.Static || c.BucketKnown() {
		return false
	}
	if _, ok := p.ValidationURL(); !ok {
		return false
	}
	v, ok := t.validations.Load(c)
	if !ok {
		return t.askFirst(pool) || p.OwnerInHeader() && countTokens(pool) > 1
	}
	vr := v.(*validationRetry)
	vr.mu.Lock()
	defer vr.mu.Unlock()
	return !now.Before(vr.next)
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
