package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/cache"
	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
)

// exchange is one request on its way through the transport: the request,
// its lane (what is fixed for its provider), what it spends (class), how it
// chooses its credential (route), the reservation it holds (grant), the
// attempt under way (sent, reading) and what the attempts came to
// (outcome). Its methods are the steps of RoundTrip's loop; none takes an
// argument list. Exchanges are pooled: the parameters handed to the State
// point into one (no State keeps them past the call), so the hot path
// allocates nothing for them.
type exchange struct {
	t     *Transport
	l     *lane
	ctx   context.Context
	req   *http.Request
	pool  *creds.Pool
	class provider.Request
	rt    route
	turn  *learning // the pool's learning turn, when this request holds it
	n     int       // the attempt under way, from 1
	o     outcome
	s     sent
	grant grant
	// reading is the attempt's answer, on our clock.
	reading headers.Reading
	// waited is what the request has waited so far (the learning turn
	// and quota): the max wait bounds it all.
	waited time.Duration
	// conditional: the request is likely to go as a revalidation whose
	// answer is a free 304 (see cache.Revalidatable, quota.Ask.Conditional).
	conditional bool
	// tok is what a request priced in tokens learns from (priceTokens).
	tok tokenNote
	// stale is a stored answer the caller's max-stale accepts, served if
	// the request would otherwise wait for quota.
	stale    cache.Hit
	hasStale bool
	// flight is the collapsed GETs this request leads (see flights):
	// its end wakes the identical requests that waited for its answer.
	flight    *flight
	flightKey flightKey

	// sr routes the request by its repository's owner (route.go).
	sr ownerRoute

	reserve ReserveParams
	settleP SettleParams
	cands   [4]*creds.Credential
	slots   [4]Slot
	tr      traced
}

var exchanges = sync.Pool{New: func() any { return new(exchange) }}

// newExchange starts req's exchange on lane l.
func (t *Transport) newExchange(req *http.Request, l *lane, rt route) *exchange {
	x := exchanges.Get().(*exchange)
	x.t, x.l, x.ctx, x.req, x.pool, x.rt = t, l, req.Context(), req, l.pool, rt
	x.rt.owner = &x.sr
	return x
}

// close ends the exchange on every exit, a panic in the base transport,
// the cache or an OnEvent callback included (net/http recovers a
// handler's panic and the process goes on): a reservation still held is
// given back, or its quota and concurrency slot would stay taken for the
// whole lease; the learning turn is given back.
func (x *exchange) close() {
	if x.grant.held {
		x.release()
	}
	if x.turn != nil {
		x.turn.give()
	}
	if x.flight != nil {
		x.t.flights.land(x.flightKey, x.flight)
	}
	x.releaseClaim()
	x.releaseTried()
	*x = exchange{}
	exchanges.Put(x)
}

// run is the loop over the steps: classify, route, then for each attempt
// acquire, send, read, confirm a rejection, decide — and deliver, or go
// again.
func (x *exchange) run() (*http.Response, error) {
	x.classify()
	if resp, err := x.fromCache(); resp != nil || err != nil {
		return resp, err
	}
	if err := x.route(); err != nil {
		closeBody(x.req)
		return nil, err
	}
	for x.n = 1; ; x.n++ {
		if x.turn != nil {
			// Learning: the learner's choice goes first; if it
			// cannot go now, another does, and its answer teaches
			// too.
			x.rt.first = x.turn.next()
		}
		if x.flight != nil {
			// Followers wait for an answer one round trip away only
			// while this request holds its quota.
			x.flight.sent.Store(false)
		}
		if err := x.routeOwner(); err != nil {
			closeBody(x.req)
			return nil, err
		}
		if err := x.acquire(); err != nil {
			if err == errServeStale {
				return x.serveStored(x.stale), nil
			}
			closeBody(x.req)
			return nil, err
		}
		if x.flight != nil {
			x.flight.sent.Store(true)
		}
		x.sightSent()
		err := x.send()
		if x.s.out == nil { // the request could not be built
			closeBody(x.req)
			return nil, err
		}
		x.o.attemptOutcome = attemptOutcome{sendFailed: err != nil, cancelled: x.ctx.Err() != nil}
		if err == nil {
			x.read()
			x.confirmRejection()
		}
		x.sightAnswered(err == nil)
		d := decide(x.o)
		x.traceAttempt(d, err)
		if d.verdict == deliver {
			resp, derr := x.deliver()
			if derr == nil {
				return resp, nil
			}
			// The body broke off while the cache read it: for the
			// caller a network failure like any other, retried as
			// one (its charge is already settled from the answer's
			// headers).
			err = derr
			x.o.attemptOutcome = attemptOutcome{sendFailed: true, cancelled: x.ctx.Err() != nil}
			if d = decide(x.o); d.verdict != backOffAndRetry {
				closeBody(x.req)
				return nil, err
			}
		} else if x.s.resp != nil {
			discard(x.s.resp)
		}
		switch d.verdict {
		case failWith:
			return nil, err
		case noCredentialLeft:
			// Every token is rejected: say so, as the next request would.
			closeBody(x.req)
			return nil, x.t.noCredential(x.l.p, x.pool)
		case waitAndRetry:
			x.o.limitRetries++
		case backOffAndRetry:
			if serr := x.backOff(d, err); serr != nil {
				return nil, serr
			}
		}
	}
}

// fromCache answers the request with a stored answer that is fresh for it
// (cache.Lookup), without quota, a credential or a request: a repeat
// within the answer's max-age costs nothing and waits for nothing, as in
// every HTTP cache. The owners the request may be sent as are those of
// its pool (the caller's own credential, when it brought one), so an
// answer kept for one owner is served only to requests that could go as
// that owner. A stale answer the caller's max-stale accepts is kept
// instead, to be served only if the request would wait for quota
// (errServeStale).
//
// A request identical to one in flight (same URL, Accept, principal and
// pool) that finds nothing waits for that one's answer and looks again,
// so a URL read by many workers at once costs one request (see flights).
func (x *exchange) fromCache() (*http.Response, error) {
	t := x.t
	if x.l.cache == nil || x.rt.validating || x.rt.only != nil {
		return nil, nil
	}
	pool := t.callerPoolFor(x.l, x.req)
	x.pool = pool
	var arr [8]string
	lookup := func() (cache.Hit, bool) {
		now := t.opts.Now()
		owners := arr[:0]
		for _, c := range pool.Eligible(now) {
			// An answer stored before the credential's owner was
			// known is kept under the credential's own identity: it
			// is that credential's, so the owner's too.
			owners = append(owners, c.BucketOwner())
			if id := c.ID(); id != owners[len(owners)-1] {
				owners = append(owners, id)
			}
		}
		return x.l.cache.Lookup(x.req, owners, now)
	}
	hit, ok := lookup()
	if !ok {
		ck, collapsible := x.l.cache.Collapsible(x.req)
		if !collapsible {
			return nil, nil
		}
		key := flightKey{pool: pool, cache: ck}
		fl, leader := t.flights.join(key)
		if leader {
			x.flight, x.flightKey = fl, key
			return nil, nil
		}
		if err := x.follow(fl); err != nil {
			closeBody(x.req)
			return nil, err
		}
		if hit, ok = lookup(); !ok {
			// The answer could not be stored, or the leader is still
			// waiting for quota: go on alone.
			return nil, nil
		}
	}
	if hit.Use == cache.ServeStale {
		x.stale, x.hasStale = hit, true
		return nil, nil
	}
	return x.serveStored(hit), nil
}

// follow waits for the answer of fl, the identical request in flight: as
// long as it takes once fl holds its quota (one round trip), and while it
// still waits for quota, at most this request's own max wait, after which
// this request goes on alone with what is left of it (the max wait bounds
// the whole wait).
func (x *exchange) follow(fl *flight) error {
	if fl.sent.Load() {
		select {
		case <-fl.done:
			return nil
		case <-x.ctx.Done():
			return x.ctx.Err()
		}
	}
	d := x.maxWait()
	if d <= 0 {
		return nil
	}
	start := x.t.opts.Now()
	timer := x.t.opts.Clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-fl.done:
	case <-timer.C():
	case <-x.ctx.Done():
		return x.ctx.Err()
	}
	x.waited += x.t.opts.Now().Sub(start)
	return nil
}

// errServeStale tells run that the request would wait for quota and its
// caller accepts the stale answer it has (exchange.stale).
var errServeStale = errors.New("ratekeeper: serve the stale answer")

// serveStored returns a stored answer served without a request, marked as
// such (X-Ratekeeper-Cache: fresh or stale, Age), and tells the event and
// the metrics.
func (x *exchange) serveStored(hit cache.Hit) *http.Response {
	t := x.t
	closeBody(x.req)
	resp := x.l.cache.Serve(x.req, hit)
	// The stored rate-limit fields are as old as the answer: like every
	// answer delivered, it says what the pool can do now.
	x.showPool(resp)
	kind := resp.Header.Get(HeaderCache)
	if m := t.opts.Metrics; m != nil {
		m.served.WithLabelValues(x.l.p.Name, x.class.Resource, kind).Inc()
	}
	t.emit(Event{Kind: EventServedFromCache, Provider: x.l.p.Name, Resource: x.class.Resource, Status: resp.StatusCode,
		Cache: kind, Wait: hit.Age, URL: redactURL(x.req.URL)})
	return resp
}

// classify works out what the request spends — its resource, whether it
// is free or a write, its points for secondary limits (provider.Classify),
// and a GraphQL query's cost (priceQuery) — and what the retry policy may
// do with it: replay its body, send it twice.
func (x *exchange) classify() {
	req, t := x.req, x.t
	x.class = x.l.p.Classify(req.Method, req.URL)
	if x.class.Resource == provider.ResourceGraphQL {
		x.priceQuery()
	} else {
		x.class.Scope = x.l.p.ScopeOf(req.Method, req.URL)
		x.priceTokens()
	}
	x.conditional = !x.rt.validating && x.l.cache.Revalidatable(req)
	x.o = outcome{replayable: req.Body == nil || req.Body == http.NoBody || req.GetBody != nil, idempotent: isIdempotent(req),
		maxRetries: t.opts.MaxRetries, maxLimitRetries: t.opts.MaxRateLimitRetries, retryCap: t.opts.RetryCap}
}

// priceQuery gives a GraphQL query the cost it reserves (see graphqlCosts):
// the one learnt for its shape, else the provider's formula. The body is
// read through req.GetBody, never from req.Body, so the caller's request
// stays as it was; a request without GetBody reserves 1.
func (x *exchange) priceQuery() {
	req := x.req
	if req.GetBody == nil || req.ContentLength > maxGraphQLBody {
		return
	}
	body, err := req.GetBody()
	if err != nil {
		return
	}
	b, err := io.ReadAll(io.LimitReader(body, maxGraphQLBody+1))
	body.Close()
	if err != nil || len(b) > maxGraphQLBody || !x.l.p.ClassifyGraphQL(&x.class, b) {
		return
	}
	if c, ok := x.t.costs.learnt(x.l.key + "\x00" + x.class.Shape); ok {
		x.class.Units = int(c)
	}
	if n, ok := costsOf(req).pacing("points"); ok {
		x.class.Units = int(n)
	}
}

// isIdempotent reports whether a request may be sent twice: RFC 9110's
// idempotent methods, or any request carrying an Idempotency-Key.
func isIdempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// route works out how the request chooses its credential: pinned (the
// "who am I" request), the caller's own (see callerPoolFor), or from the
// lane's pool. While that pool is learning which credentials share a
// bucket, it waits for the pool's turn (one request at a time), within
// the max wait like any wait for quota.
func (x *exchange) route() error {
	if x.rt.only == nil {
		x.pool = x.t.callerPoolFor(x.l, x.req)
	}
	lg := x.t.learningFor(x.ctx, x.l.p, x.pool)
	if lg.done.Load() || x.rt.turnHeld {
		return nil
	}
	if err := x.takeTurn(lg); err != nil {
		return err
	}
	if err := x.takeSharedTurn(lg); err != nil {
		lg.give()
		return err
	}
	if lg.done.Load() {
		// Learnt while this request waited for its turn.
		lg.give()
		return nil
	}
	x.rt.turnHeld, x.turn = true, lg
	// Two round trips: the time for this process's next request (one
	// that waited for the turn, retried by its scheduler) to take it.
	lg.keep = min(2*x.l.roundTrip(), keepShared)
	return nil
}

// takeTurn waits for the pool's learning turn within the max wait, which
// it spends, returning a *WaitError beyond it. The turn comes back when
// the request holding it is answered, about one round trip from now.
func (x *exchange) takeTurn(lg *learning) (err error) {
	select {
	case lg.turn <- struct{}{}:
		return nil
	default:
	}
	t := x.t
	start := t.opts.Now()
	timer := t.opts.Clock.NewTimer(x.maxWait())
	defer timer.Stop()
	span := x.waitSpan(WaitLearning, 0, nil)
	defer func() { x.endWait(span, t.opts.Now().Sub(start), false, err) }()
	select {
	case lg.turn <- struct{}{}:
		x.waited = t.opts.Now().Sub(start)
		return nil
	case <-x.ctx.Done():
		return x.ctx.Err()
	case <-timer.C():
		now := t.opts.Now()
		rtt := x.l.roundTrip()
		return &WaitError{Provider: x.l.p.Name, Resource: x.class.Resource, Until: now.Add(rtt), Wait: rtt, MaxWait: x.maxWait()}
	}
}

// sent is one attempt's request as sent and what came back.
type sent struct {
	out   *http.Request // nil when it could not be built
	entry *cache.Entry  // the stored answer its validators came from
	// callerTag is the caller's own If-None-Match tag when translate
	// added the tag for the credential sent.
	callerTag string
	cached    bool // the cache takes part ("who am I" is asked afresh)
	gql       graphqlSend
	resp      *http.Response
	prefix    []byte // the body's first bytes, for the dialects that need them
	sentAt    time.Time
	now       time.Time // when the answer (or the error) came
}

// send builds the attempt's request (the credential's token, the cache's
// validators) and sends it through the base transport. On an error the
// reservation is given back; x.s.out is nil when the request could not be
// built at all.
func (x *exchange) send() error {
	t, g := x.t, &x.grant
	x.s = sent{}
	out, err := t.outgoing(x.ctx, x.req, x.l.p, g, x.n)
	if err != nil {
		x.release()
		return err
	}
	out = x.traceOut(out)
	s := &x.s
	s.out = out
	s.cached = t.cache != nil && !x.rt.validating
	if s.cached {
		s.entry = x.l.cache.Prepare(out, g.slot.Owner.Owner)
	}
	if s.entry == nil && !x.rt.validating {
		s.callerTag = t.translate(out, x.l.p)
	}
	if g.class.Shape != "" {
		s.gql = t.costs.sent(g.slot.Bucket)
	}
	s.sentAt = t.opts.Now()
	// The answer's request went now, not when its reservation was asked
	// for: a reservation may wait out a database outage for seconds,
	// and an answer judged as sent before a pause began when it went
	// during it would lengthen nothing (quota.Owner.Observe).
	g.sent = s.sentAt
	s.resp, err = t.base.RoundTrip(out)
	s.now = t.opts.Now()
	if err != nil {
		t.costs.answered(g.slot.Bucket, "", s.gql, nil, 0)
		x.release()
	}
	return err
}

// read takes what the answer says: its reading (on our clock) is settled
// into the quota state, recorded in the metrics, and, while the pool is
// learning, taught to the learner; then the rate-limit refusal is told.
func (x *exchange) read() {
	t, g, s := x.t, &x.grant, &x.s
	switch {
	case needsBody(s.resp.StatusCode):
		s.prefix, s.resp.Body = peekBody(s.resp.Body, 8<<10)
	case s.gql.traced && s.resp.StatusCode == http.StatusOK:
		// A spent GraphQL budget is a 200 with an error of type
		// RATE_LIMITED; the body also tells the query's cost.
		s.prefix, s.resp.Body = readGraphQLAnswer(s.resp.Body)
	}
	x.reading = x.l.read(s.resp.StatusCode, s.resp.Header, s.prefix, s.sentAt, s.now, x.class.Meter)
	r, settled := &x.reading, &x.reading
	if x.class.Meter != "" {
		settled = x.readTokens(s)
		if !x.settleFromUsage(s.resp, settled) {
			x.teachTokens(s.resp)
		}
	}
	x.l.noteOpenAIHeaders(s.resp.Header)
	learning := x.turn != nil && !x.rt.validating
	if learning {
		// While the pool learns which tokens share a bucket, another
		// token's queries may have counted in this one's under another
		// bucket: the rise of used is no query's cost.
		s.gql.alone = false
	}
	t.learnGraphQL(x.l.p, g, s, r)
	counted := s.resp.StatusCode != http.StatusNotModified && !x.class.Free
	if learning {
		x.observeLearning(counted && r.Limited == headers.NotLimited && s.resp.StatusCode < 500)
	}
	x.settle(settled, s.now, counted)
	t.view.observe(g.slot, &x.settleP.Answer, s.now)
	t.record(x.l.p, g, s.resp.StatusCode, cacheOutcome(s.out.Method, s.entry != nil, s.resp.StatusCode), r)
	if learning {
		t.learnFrom(x.ctx, x.l.p, x.turn, s.now)
	}
	x.o.status, x.o.limited = s.resp.StatusCode, r.Limited != headers.NotLimited
	x.o.notProcessed = notProcessed(s.resp.StatusCode, s.prefix)
	x.o.retryAfter, x.o.hasRetryAfter = r.RetryAfter, r.HasRetryAfter
	if r.Limited != headers.NotLimited {
		t.emit(Event{Kind: EventRateLimited, Provider: x.l.p.Name, Resource: x.class.Resource, Credential: g.cred.Masked(),
			Status: s.resp.StatusCode, Limit: r.Limited.String(), Wait: r.Wait, Attempt: x.n})
	}
}

// confirmRejection decides whether a 401 is about the credential the
// transport sent (see rejected), and whether the pool has any other left.
func (x *exchange) confirmRejection() {
	t, g, s := x.t, &x.grant, &x.s
	x.o.rejected, x.o.noneLeft = false, false
	if s.resp.StatusCode != http.StatusUnauthorized || x.rt.validating || g.cred.Kind() == creds.Anonymous || !t.sentOwnToken(x.ctx, x.req, x.l.p, g) {
		return
	}
	x.o.rejected = x.rejected()
	x.o.noneLeft = x.o.rejected && len(x.pool.Eligible(t.opts.Now())) == 0
}

// rejected decides what a 401 to a request sent with the credential's own
// token means. The provider says whether it may be about the token at all
// (Hugging Face answers 401 for a missing repository); if so, the "who am
// I" request confirms it before the credential is marked invalid, for
// Options.InvalidRetry. It reports whether the credential was rejected
// (the request may then go again with another); otherwise the 401 is the
// request's answer.
func (x *exchange) rejected() bool {
	t, p, c, s := x.t, x.l.p, x.grant.cred, &x.s
	if !p.MayRejectCredential(s.resp.StatusCode, s.resp.Header, s.prefix) {
		return false
	}
	if _, ok := p.ValidationURL(); ok && !t.opts.SkipValidation && c.Kind() == creds.Static {
		t.whoAmI(x.ctx, p, c, x.rt.turnHeld)
		return c.State(t.opts.Now()) == creds.Invalid
	}
	reason := fmt.Sprintf("%s %s answered 401", x.req.Method, redactURL(x.req.URL))
	if c.MarkInvalid(reason, s.now, s.now.Add(t.opts.InvalidRetry)) {
		t.unlearn(p, c)
		t.remember(x.ctx, p, c, s.now)
		t.emit(Event{Kind: EventCredentialInvalid, Provider: p.Name, Credential: c.Masked(), Status: http.StatusUnauthorized})
		t.log.Warn("credential rejected", "provider", p.Name, "credential", c.Masked(), "retry_at", s.now.Add(t.opts.InvalidRetry))
	}
	return true
}

// deliver hands the answer to the caller: a 304 to a revalidation becomes
// the stored answer, a new GET answer is stored, and the response carries
// the credential's masked name and the attempt count.
func (x *exchange) deliver() (*http.Response, error) {
	t, g, s := x.t, &x.grant, &x.s
	resp := s.resp
	if resp.StatusCode < 400 {
		g.cred.MarkValidated(s.now)
	}
	if s.callerTag != "" && resp.StatusCode == http.StatusNotModified {
		// The caller keeps the tag it sent: the 304 names the one
		// computed for this credential.
		resp.Header["Etag"] = []string{s.callerTag}
	}
	if s.cached {
		if s.entry != nil && resp.StatusCode == http.StatusNotModified {
			resp = x.l.cache.RevalidatedAt(s.entry, resp, s.sentAt, s.now)
		} else if s.out.Method == http.MethodGet {
			// Store reads the body whole; when that read fails the
			// answer is lost like any failed round trip, and is
			// reported as one.
			var err error
			if resp, err = x.l.cache.StoreAt(s.out, g.slot.Owner.Owner, resp, s.sentAt, s.now); err != nil {
				return nil, err
			}
		}
	}
	// A slice of its own: a caller writing into one response's header
	// must not change another's.
	resp.Header[HeaderCredential] = []string{t.credInfo(x.l.p, g.cred, "").masked}
	if x.n > 1 {
		resp.Header.Set(HeaderAttempts, strconv.Itoa(x.n))
	}
	x.showPool(resp)
	// The base transport's request carries the token; the caller gets
	// its own back.
	resp.Request = x.req
	return resp, nil
}

// backOff counts an error retry and sleeps its delay: the decision's, or a
// full-jitter backoff.
func (x *exchange) backOff(d decision, err error) error {
	t := x.t
	x.o.errRetries++
	delay := d.delay
	if d.jitter {
		delay = t.backoff(x.o.errRetries)
	}
	t.emit(Event{Kind: EventRetried, Provider: x.l.p.Name, Resource: x.class.Resource, Credential: x.grant.cred.Masked(),
		Status: x.o.status, Wait: delay, Attempt: x.n, Err: err})
	return x.pause(delay)
}

// settle gives the grant's reservation back and applies its answer's
// reading (r nil: release only), on a context the request's cancellation
// does not end (a State that does I/O bounds it with a timeout of its
// own): a request cut short by its deadline or its caller still returns
// what it took.
func (x *exchange) settle(r *headers.Reading, now time.Time, counted bool) {
	t, g := x.t, &x.grant
	g.held = false
	x.settleP = SettleParams{Slot: g.slot, Lease: g.lease, Now: now, Answer: x.l.answer(r, counted, g.sent, t.opts.Rand())}
	x.settleP.Answer.Units = g.units
	x.settleP.Answer.Continuous = x.class.Meter != ""
	if id := g.slot.Scope; id != (BucketID{}) && r != nil {
		x.settleP.Answer.Succeeded = x.l.scopes.answered(id, r, counted, now)
	}
	if err := t.state.Settle(context.WithoutCancel(x.ctx), &x.settleP); err != nil {
		t.log.Warn("quota state update failed; the reservation lapses with its lease", "bucket", g.slot.Bucket.String(), "err", err)
	}
	x.settleDraws(r != nil, now, counted)
	t.waiters.wake()
}

// release gives the grant's reservation back unused.
func (x *exchange) release() { x.settle(nil, x.t.opts.Now(), false) }

// pinned sends req with credential c alone, as its own exchange — the
// "who am I" request, a status endpoint's — reserved, paced and read like
// any other, and returns the answer with its reading on our clock.
func (t *Transport) pinned(req *http.Request, l *lane, c *creds.Credential, turnHeld bool) (*http.Response, headers.Reading, error) {
	if l.poolErr != nil {
		return nil, headers.Reading{}, l.poolErr
	}
	x := t.newExchange(req, l, route{only: c, turnHeld: turnHeld, validating: true})
	defer x.close()
	resp, err := x.runTraced()
	return resp, x.reading, err
}
