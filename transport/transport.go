package transport

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper/cache"
	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/internal/holder"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
)

// Headers the transport adds to the responses it returns.
const (
	// HeaderCredential names the masked credential that sent the request.
	HeaderCredential = "X-Ratekeeper-Credential"
	// HeaderAttempts counts the sends the request took.
	HeaderAttempts = "X-Ratekeeper-Attempts"
	// HeaderCache is set by the cache: "miss" (stored) or "revalidated"
	// (a free 304 answered with the stored body).
	HeaderCache = cache.HeaderName
)

// Defaults of Options.
const (
	DefaultMaxWait             = 5 * time.Minute
	DefaultMaxRetries          = 3
	DefaultRetryBase           = 2 * time.Second
	DefaultRetryCap            = 60 * time.Second
	DefaultMaxRateLimitRetries = 10
	DefaultLease               = 5 * time.Minute
	DefaultInvalidRetry        = time.Hour
)

// Options configure a Transport. The zero value works: built-in providers,
// tokens from the environment, memory state and cache.
type Options struct {
	// Providers are the APIs the transport paces; nil means
	// provider.Defaults(). A URL no provider owns gets a generic provider
	// of its host on first use (see NoAutoProviders).
	Providers *provider.Registry
	// NoAutoProviders: a host no provider owns gets no token from a
	// variable named after it (GIT_EXAMPLE_COM_TOKEN, GIT_TOKEN) and no
	// default pacing (60 a minute when it states no limit); only its
	// answers' rate-limit headers pace it.
	NoAutoProviders bool
	// Pools hold the credentials by provider name. A provider without a
	// pool gets one from its environment variables (creds.Load) on first
	// use.
	Pools map[string]*creds.Pool
	// Base sends the requests; nil means a clone of http.DefaultTransport.
	Base http.RoundTripper
	// State keeps bucket and owner state; nil means this process's memory.
	State State
	// Credentials remembers tokens' owners and invalidity across
	// processes and restarts; nil: nothing is remembered.
	Credentials CredentialStore
	// OnClose runs when the transport is closed (closing a shared store).
	OnClose func() error
	// Cache answers repeated GETs with conditional requests; nil means a
	// memory cache of 64 MiB. DisableCache turns caching off.
	Cache        *cache.Cache
	DisableCache bool
	// Policy paces providers whose configuration names none; the zero
	// value means quota.DefaultPolicy().
	Policy quota.Policy
	// MaxWait is the longest a request waits for quota; beyond it
	// RoundTrip returns a *WaitError carrying when the quota returns.
	// A provider's configured max wait overrides it.
	MaxWait time.Duration
	// MaxPause caps every pause a server's answer imposes — a bucket's
	// Retry-After on any status, an owner's secondary penalty — so that a
	// proxy's "Retry-After: 86400" stops nothing for a day: past the cap
	// the request is tried again, and a refusal starts another pause.
	// Default quota.DefaultMaxPause (an hour); a provider's max_pause
	// overrides it.
	MaxPause time.Duration
	// SecondaryWait is the first pause after a secondary refusal that
	// does not say when to come back (no Retry-After); it doubles, with
	// jitter, at each new strike (a refusal of a request sent after the
	// last pause). Default quota.SecondaryBase, GitHub's documented
	// minute; a provider's secondary_wait overrides it.
	SecondaryWait time.Duration
	// MaxRetries bounds resends after network errors and 5xx responses,
	// for idempotent requests (GET, HEAD, OPTIONS, PUT, DELETE, or any
	// request with an Idempotency-Key). Negative disables them.
	MaxRetries int
	// RetryBase and RetryCap shape the exponential backoff with full
	// jitter between such resends: a random wait up to RetryBase·2^(n−1),
	// at most RetryCap. A Retry-After above RetryCap is not waited for: the
	// response is returned.
	RetryBase, RetryCap time.Duration
	// MaxRateLimitRetries bounds resends after rate-limit refusals.
	MaxRateLimitRetries int
	// Lease is how long a reservation stays counted when its request
	// never reports back (its process crashed). Each reservation has its
	// own lease; none renews another.
	Lease time.Duration
	// Holder names this process in the leases it holds, so that another
	// process can free them once it proves this one gone (see
	// HolderTimeout); default: this process's identity from package
	// internal/holder (host, boot, PID, start).
	Holder string
	// SkipValidation turns off the provider's "who am I" request. It is
	// needed only where the answers carry no counters to learn from which
	// tokens share a bucket (see creds.Learner), and to confirm a 401
	// before a token is marked invalid; without it such tokens count as
	// buckets of their own, and a 401 marks a token invalid at once.
	SkipValidation bool
	// AskOwnerFirst sends the provider's "who am I" request before a
	// token's first use, as the only way to learn its owner, where its
	// pool cannot tell (a pool of one token whose owner may also own
	// others elsewhere: the gateway's pass-through tokens). The request is
	// reserved and read like any other.
	AskOwnerFirst bool
	// InvalidRetry is how long a rejected token stays unused before it is
	// tried again (default 1 h): a refusal can be a provider's passing
	// trouble, and a token can be fixed without being replaced.
	InvalidRetry time.Duration
	// Logger receives debug logs (masked credentials only); nil: none.
	Logger *slog.Logger
	// OnEvent is called for waits, refusals, invalid credentials and
	// retries. It must not block.
	OnEvent func(Event)
	// Metrics records Prometheus metrics; nil: none.
	Metrics *Metrics
	// Clock is where the transport, and the credential validation it
	// runs, read the time and set their timers; nil means the system's
	// (with Now, when set, as its time). Tests give a fake one.
	Clock Clock
	// Now is the clock's time alone, kept for callers that set only that;
	// when Clock is set, Now is Clock.Now.
	Now func() time.Time
	// Rand returns numbers in [0, 1) for jitter; nil means math/rand/v2.
	Rand func() float64
}

// Transport is an http.RoundTripper that paces requests to rate-limited
// APIs: for each request it picks the credential that can go soonest,
// waits for quota, sends, reads the answer's rate-limit headers and
// retries what is worth retrying. It is safe for concurrent use.
type Transport struct {
	opts   Options
	base   http.RoundTripper
	reg    *provider.Registry
	state  State
	cache  *cache.Cache
	log    *slog.Logger
	holder string

	keys map[*provider.Provider]string // state keys, fixed at New
	// caches are the cache's views for each provider's entity-tag rule
	// (see cacheFor), fixed at New.
	caches map[*provider.Provider]*cache.Cache

	mu    sync.Mutex
	auto  map[string]*provider.Provider // origin → generic provider made on first use
	pools map[string]*creds.Pool
	skews map[string]*quota.Skew

	learnings   sync.Map // *creds.Pool → *learning
	validations sync.Map // *creds.Credential → *validationRetry
	asking      sync.Map // *creds.Credential → chan struct{}, closed once its owner is asked
	restored    sync.Map // *creds.Pool → *sync.Once
	creds       sync.Map // *creds.Credential → *credInfo
	callers     callerCredentials

	shared    bool        // the state is shared with other processes (Heartbeats)
	rtts      sync.Map    // *provider.Provider → *rttEstimate
	holding   sync.Once   // startHolding
	beatTimer *time.Timer // the heartbeat on a shared state
	beats     int
	closed    bool

	waiters   waiters
	costs     graphqlCosts // GraphQL queries' costs, learnt per shape
	leaseBase uint64
	leaseSeq  atomic.Uint64
}

// New returns a Transport. It fails when a provider's credentials cannot be
// loaded (an empty or whitespace-padded token, an unreadable App key) or a
// policy is invalid.
func New(opts Options) (*Transport, error) {
	t := &Transport{opts: opts, pools: map[string]*creds.Pool{}, skews: map[string]*quota.Skew{}}
	if t.opts.Providers == nil {
		t.opts.Providers = provider.Defaults()
	}
	t.reg = t.opts.Providers
	t.base = opts.Base
	if t.base == nil {
		t.base = http.DefaultTransport.(*http.Transport).Clone()
	}
	t.state = opts.State
	if t.state == nil {
		t.state = NewMemoryState()
	}
	_, t.shared = t.state.(Heartbeats)
	if !opts.DisableCache {
		t.cache = opts.Cache
		if t.cache == nil {
			t.cache = cache.New(cache.Options{Logger: opts.Logger})
		}
	}
	if t.opts.Policy.Kind == "" {
		t.opts.Policy = quota.DefaultPolicy()
	}
	if err := t.opts.Policy.Validate(); err != nil {
		return nil, err
	}
	if t.opts.MaxWait <= 0 {
		t.opts.MaxWait = DefaultMaxWait
	}
	if t.opts.MaxRetries == 0 {
		t.opts.MaxRetries = DefaultMaxRetries
	}
	if t.opts.RetryBase <= 0 {
		t.opts.RetryBase = DefaultRetryBase
	}
	if t.opts.RetryCap <= 0 {
		t.opts.RetryCap = DefaultRetryCap
	}
	if t.opts.MaxRateLimitRetries == 0 {
		t.opts.MaxRateLimitRetries = DefaultMaxRateLimitRetries
	}
	if t.opts.Lease <= 0 {
		t.opts.Lease = DefaultLease
	}
	if t.opts.InvalidRetry <= 0 {
		t.opts.InvalidRetry = DefaultInvalidRetry
	}
	if t.opts.MaxPause <= 0 {
		t.opts.MaxPause = quota.DefaultMaxPause
	}
	if t.opts.SecondaryWait <= 0 {
		t.opts.SecondaryWait = quota.SecondaryBase
	}
	if t.opts.Clock == nil {
		now := t.opts.Now
		if now == nil {
			now = time.Now
		}
		t.opts.Clock = systemClock{now: now}
	}
	t.opts.Now = t.opts.Clock.Now
	if t.opts.Rand == nil {
		t.opts.Rand = mrand.Float64
	}
	t.holder = opts.Holder
	if t.holder == "" {
		t.holder = holder.Self().String()
	}
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	t.leaseBase = binary.LittleEndian.Uint64(seed[:])
	t.log = opts.Logger
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	for name, pool := range opts.Pools {
		t.pools[provider.CanonicalName(name)] = pool
	}
	t.keys = map[*provider.Provider]string{}
	t.caches = map[*provider.Provider]*cache.Cache{}
	for _, p := range t.reg.Providers() {
		t.keys[p] = p.Name + " " + p.BaseURL().String()
		t.caches[p] = t.cache.WithTagRule(p)
	}
	for _, p := range t.reg.Providers() {
		if _, err := t.policyFor(p); err != nil {
			return nil, err
		}
		if _, ok := t.pools[p.Name]; ok {
			continue
		}
		if _, err := t.poolFor(p); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// stateKey is the provider's part of bucket and owner keys.
func (t *Transport) stateKey(p *provider.Provider) string {
	if k, ok := t.keys[p]; ok {
		return k
	}
	return p.Name + " " + p.BaseURL().String()
}

// cacheFor is the cache as seen by requests to p: through p's entity-tag
// rule (GitHub's tags mix the token in), so that a stored answer is
// revalidated with the tag the server would give the credential sent.
func (t *Transport) cacheFor(p *provider.Provider) *cache.Cache {
	if c, ok := t.caches[p]; ok {
		return c
	}
	return t.cache.WithTagRule(p)
}

// Close releases what the transport holds (a shared store's connections).
func (t *Transport) Close() error {
	t.mu.Lock()
	t.closed = true
	if t.beatTimer != nil {
		t.beatTimer.Stop()
	}
	t.mu.Unlock()
	if t.opts.OnClose != nil {
		return t.opts.OnClose()
	}
	return nil
}

// CloseIdleConnections closes the base transport's idle connections, when
// it has any (an *http.Client made by NewClient calls this from its own
// CloseIdleConnections).
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Registry returns the providers the transport knows.
func (t *Transport) Registry() *provider.Registry { return t.reg }

// Pool returns the credentials of the named provider, loading them from
// the environment if needed.
func (t *Transport) Pool(name string) (*creds.Pool, error) {
	p, err := t.reg.Get(name)
	if err != nil {
		return nil, err
	}
	return t.poolFor(p)
}

func (t *Transport) poolFor(p *provider.Provider) (*creds.Pool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if pool, ok := t.pools[p.Name]; ok {
		return pool, nil
	}
	pool, notes, err := creds.Load(p, creds.Options{})
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", p.Name, err)
	}
	for _, n := range notes {
		t.log.Debug("credentials", "provider", p.Name, "note", n)
	}
	t.pools[p.Name] = pool
	return pool, nil
}

func (t *Transport) policyFor(p *provider.Provider) (quota.Policy, error) {
	pol := t.opts.Policy
	if p.Limits.Policy != "" {
		k, err := quota.ParseKind(p.Limits.Policy)
		if err != nil {
			return pol, fmt.Errorf("provider %s: %w", p.Name, err)
		}
		pol.Kind = k
	}
	if p.Limits.Reserve > 0 || p.Limits.ReservePercent > 0 {
		pol.Reserve, pol.ReservePercent = int64(p.Limits.Reserve), p.Limits.ReservePercent
	}
	pol.Velocity = cmp.Or(p.Limits.Velocity, pol.Velocity)
	pol.MinDelay = cmp.Or(p.Limits.MinInterval, pol.MinDelay)
	pol.MaxDelay = cmp.Or(p.Limits.MaxInterval, pol.MaxDelay)
	pol.Burst = cmp.Or(p.Limits.Burst, pol.Burst)
	if err := pol.Validate(); err != nil {
		return pol, fmt.Errorf("provider %s: %w", p.Name, err)
	}
	return pol, nil
}

func (t *Transport) maxWait(p *provider.Provider) time.Duration {
	if p.Limits.MaxWait > 0 {
		return p.Limits.MaxWait
	}
	return t.opts.MaxWait
}

// maxPause is the cap on the pauses p's answers impose.
func (t *Transport) maxPause(p *provider.Provider) time.Duration {
	return cmp.Or(p.Limits.MaxPause, t.opts.MaxPause)
}

func (t *Transport) secondaryFor(p *provider.Provider, class provider.Request) (quota.Secondary, quota.Cost) {
	s := quota.Secondary{
		MaxConcurrent:    int64(p.Secondary.MaxConcurrency),
		Wait:             cmp.Or(p.Secondary.Wait, t.opts.SecondaryWait),
		WriteSpacing:     p.Secondary.WriteSpacing,
		PointsPerMinute:  int64(p.Secondary.EndpointPointsPerMinute),
		ContentPerMinute: int64(p.Secondary.ContentCreationPerMinute),
		ContentPerHour:   int64(p.Secondary.ContentCreationPerHour),
	}
	if class.Resource == provider.ResourceGraphQL && p.Secondary.GraphQLPointsPerMinute > 0 {
		s.PointsPerMinute = int64(p.Secondary.GraphQLPointsPerMinute)
	}
	return s, quota.Cost{Write: class.Write, Points: int64(class.Points), Endpoint: class.Endpoint, CreatesContent: class.CreatesContent}
}

func defaultsFor(p *provider.Provider) quota.Default {
	return quota.Default{Limit: int64(p.Limits.DefaultLimit), Window: p.Limits.DefaultWindow}
}

// grant is a reservation: the credential chosen for one send, and the
// quota it holds.
type grant struct {
	cred   *creds.Credential
	slot   Slot
	lease  uint64
	held   bool      // the reservation is not settled yet
	sent   time.Time // when the reservation was taken
	class  provider.Request
	waited time.Duration
	// units is the real cost of the attempt's GraphQL query, once its
	// answer told it (see learnGraphQL); 0 otherwise.
	units int64
}

// RoundTrip implements http.RoundTripper. It does not modify req; the
// response's Request is req. A request to a URL no provider owns goes to
// the base transport without a credential, paced only by its host's own
// rate-limit headers (see roundTripUnmatched).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.reg.Match(req.URL)
	if p == nil {
		if p = t.autoProvider(req.URL); p == nil {
			closeBody(req)
			return nil, fmt.Errorf("ratekeeper: %s: no provider owns this URL and none can be made for it (want an http or https URL with a host)", redactURL(req))
		}
	}
	ctx := req.Context()
	pool, err := t.poolFor(p)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	pool = t.callerPoolFor(p, req, pool)
	class := p.Classify(req.Method, req.URL)
	t.classifyGraphQL(req, p, &class)
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	at := getAttempt()
	defer putAttempt(at)
	// Runs on every exit, a panic in the base transport, the cache or an
	// OnEvent callback included (net/http recovers a handler's panic and
	// the process goes on): a reservation still held is given back, or
	// its quota and concurrency slot would stay taken for the whole lease.
	defer t.giveBack(ctx, p, at)
	g := &at.grant
	rt, turn, err := t.route(ctx, p, pool, class, at)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	if turn != nil {
		defer turn.give()
	}
	o := outcome{replayable: replayable, idempotent: isIdempotent(req), maxRetries: t.opts.MaxRetries,
		maxLimitRetries: t.opts.MaxRateLimitRetries, retryCap: t.opts.RetryCap}
	for attempt := 1; ; attempt++ {
		if turn != nil {
			// Learning: the learner's choice goes first; if it
			// cannot go now, another does, and its answer teaches
			// too.
			rt.first = turn.next()
		}
		if err := t.acquire(ctx, req, p, pool, class, rt, at); err != nil {
			closeBody(req)
			return nil, err
		}
		s, err := t.send(ctx, req, p, rt, at, attempt)
		if s.out == nil { // the request could not be built
			closeBody(req)
			return nil, err
		}
		o.attemptOutcome = attemptOutcome{sendFailed: err != nil, cancelled: ctx.Err() != nil}
		if err == nil {
			t.read(ctx, p, class, rt, turn, at, &s, attempt)
			o.status, o.limited = s.resp.StatusCode, at.reading.Limited != headers.NotLimited
			o.retryAfter, o.hasRetryAfter = at.reading.RetryAfter, at.reading.HasRetryAfter
			o.rejected, o.noneLeft = t.confirmRejection(ctx, req, p, pool, rt, g, &s)
		}
		d := decide(o)
		switch d.verdict {
		case failWith:
			return nil, err
		case noCredentialLeft:
			// Every token is rejected: say so, as the next request would.
			discard(s.resp)
			closeBody(req)
			return nil, t.noCredential(p, pool)
		case anotherCredential:
			discard(s.resp)
			continue
		case waitAndRetry:
			o.limitRetries++
			discard(s.resp)
			continue
		case backOffAndRetry:
			if s.resp != nil {
				discard(s.resp)
			}
			if serr := t.backOff(ctx, p, &o, d, g, attempt, err); serr != nil {
				return nil, serr
			}
			continue
		}
		resp, err := t.deliver(req, p, g, &s, attempt)
		if err == nil {
			return resp, nil
		}
		// The body broke off while the cache read it: for the caller a
		// network failure like any other, retried as one (its charge
		// is already settled from the answer's headers).
		o.attemptOutcome = attemptOutcome{sendFailed: true, cancelled: ctx.Err() != nil}
		if d := decide(o); d.verdict == backOffAndRetry {
			if serr := t.backOff(ctx, p, &o, d, g, attempt, err); serr != nil {
				return nil, serr
			}
			continue
		}
		closeBody(req)
		return nil, err
	}
}

// backOff counts an error retry and sleeps its delay: the decision's, or a
// full-jitter backoff.
func (t *Transport) backOff(ctx context.Context, p *provider.Provider, o *outcome, d decision, g *grant, attempt int, err error) error {
	o.errRetries++
	delay := d.delay
	if d.jitter {
		delay = t.backoff(o.errRetries)
	}
	t.emit(Event{Kind: EventRetried, Provider: p.Name, Resource: g.class.Resource, Credential: g.cred.Masked(), Status: o.status, Wait: delay, Attempt: attempt, Err: err})
	return t.sleep(ctx, delay)
}

// confirmRejection decides whether a 401 is about the credential the
// transport sent (see rejected), and whether the pool has any other left.
func (t *Transport) confirmRejection(ctx context.Context, req *http.Request, p *provider.Provider, pool *creds.Pool, rt route, g *grant, s *sent) (rejected, noneLeft bool) {
	if s.resp.StatusCode != http.StatusUnauthorized || rt.validating || g.cred.Kind() == creds.Anonymous || !t.sentOwnToken(ctx, req, p, g) {
		return false, false
	}
	rejected = t.rejected(ctx, p, g.cred, req, s.resp, s.prefix, rt.turnHeld, s.now)
	return rejected, rejected && len(pool.Eligible(t.opts.Now())) == 0
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
// reservation is given back; s.out is nil when the request could not be
// built at all.
func (t *Transport) send(ctx context.Context, req *http.Request, p *provider.Provider, rt route, at *attempt, attempt int) (sent, error) {
	g := &at.grant
	var s sent
	out, err := t.outgoing(ctx, req, p, g, attempt)
	if err != nil {
		t.release(ctx, p, g, at)
		return s, err
	}
	s.out = out
	s.cached = t.cache != nil && !rt.validating
	if s.cached {
		s.entry = t.cacheFor(p).Prepare(out, g.slot.Owner.Owner)
	}
	if s.entry == nil && !rt.validating {
		s.callerTag = t.translate(out, p)
	}
	if g.class.Shape != "" {
		s.gql = t.costs.sent(g.slot.Bucket)
	}
	s.sentAt = t.opts.Now()
	s.resp, err = t.base.RoundTrip(out)
	s.now = t.opts.Now()
	if err != nil {
		t.costs.answered(g.slot.Bucket, "", s.gql, nil, 0)
		t.release(ctx, p, g, at)
	}
	return s, err
}

// read takes what the answer says: its reading (on our clock) is settled
// into the quota state, recorded in the metrics, and, while the pool is
// learning, taught to the learner; then the rate-limit refusal is told.
func (t *Transport) read(ctx context.Context, p *provider.Provider, class provider.Request, rt route, turn *learning, at *attempt, s *sent, attempt int) {
	g := &at.grant
	switch {
	case needsBody(s.resp.StatusCode):
		s.prefix, s.resp.Body = peekBody(s.resp.Body, 8<<10)
	case s.gql.traced && s.resp.StatusCode == http.StatusOK:
		// A spent GraphQL budget is a 200 with an error of type
		// RATE_LIMITED; the body also tells the query's cost.
		s.prefix, s.resp.Body = readGraphQLAnswer(s.resp.Body)
	}
	at.reading = quota.Read(s.resp.StatusCode, s.resp.Header, s.prefix, s.now, t.skew(p, s.resp.Header, s.sentAt, s.now))
	t.observeRoundTrip(p, s.now.Sub(s.sentAt))
	reading := &at.reading
	t.learnGraphQL(p, g, s, reading)
	counted := s.resp.StatusCode != http.StatusNotModified && !class.Free
	t.settle(ctx, p, g, at, reading, s.now, counted)
	t.record(p, g, s.resp.StatusCode, cacheOutcome(s.out.Method, s.entry != nil, s.resp.StatusCode), reading)
	if turn != nil && !rt.validating {
		t.learnFrom(ctx, p, turn, g.cred, reading, class.Resource,
			counted && reading.Limited == headers.NotLimited && s.resp.StatusCode < 500, s.now)
	}
	if reading.Limited != headers.NotLimited {
		t.emit(Event{Kind: EventRateLimited, Provider: p.Name, Resource: class.Resource, Credential: g.cred.Masked(),
			Status: s.resp.StatusCode, Limit: reading.Limited.String(), Wait: reading.Wait, Attempt: attempt})
	}
}

// deliver hands the answer to the caller: a 304 to a revalidation becomes
// the stored answer, a new GET answer is stored, and the response carries
// the credential's masked name and the attempt count.
func (t *Transport) deliver(req *http.Request, p *provider.Provider, g *grant, s *sent, attempt int) (*http.Response, error) {
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
		c := t.cacheFor(p)
		if s.entry != nil && resp.StatusCode == http.StatusNotModified {
			resp = c.Revalidated(s.entry, resp)
		} else if s.out.Method == http.MethodGet {
			// Store reads the body whole; when that read fails the
			// answer is lost like any failed round trip, and is
			// reported as one.
			var err error
			if resp, err = c.Store(s.out, g.slot.Owner.Owner, resp); err != nil {
				return nil, err
			}
		}
	}
	// A slice of its own: a caller writing into one response's header
	// must not change another's.
	resp.Header[HeaderCredential] = []string{t.credInfo(p, g.cred, "").masked}
	if attempt > 1 {
		resp.Header.Set(HeaderAttempts, strconv.Itoa(attempt))
	}
	// The base transport's request carries the token; the caller gets
	// its own back.
	resp.Request = req
	return resp, nil
}

// route works out how a request chooses its credential: pinned by its
// context (the "who am I" request), or from the pool. While the pool is
// learning which credentials share a bucket, it waits for the pool's turn
// (one request at a time) and returns it, for the caller to give back when
// the request is done.
func (t *Transport) route(ctx context.Context, p *provider.Provider, pool *creds.Pool, class provider.Request, at *attempt) (route, *learning, error) {
	var rt route
	if pn, ok := pinOf(ctx); ok {
		rt = route{only: pn.cred, turnHeld: pn.turnHeld, validating: pn.validating}
	}
	lg := t.learningFor(ctx, p, pool)
	if lg.done.Load() || rt.turnHeld {
		return rt, nil, nil
	}
	if err := t.takeTurn(ctx, p, class, lg, at); err != nil {
		return rt, nil, err
	}
	if lg.done.Load() {
		// Learnt while this request waited for its turn.
		lg.give()
		return rt, nil, nil
	}
	rt.turnHeld = true
	return rt, lg, nil
}

// takeTurn waits for the pool's learning turn like any wait for quota:
// within the max wait, which it spends (at.waited), returning a *WaitError
// beyond it. The turn comes back when the request holding it is answered,
// about one round trip from now.
func (t *Transport) takeTurn(ctx context.Context, p *provider.Provider, class provider.Request, lg *learning, at *attempt) error {
	select {
	case lg.turn <- struct{}{}:
		return nil
	default:
	}
	maxWait := t.maxWait(p)
	start := t.opts.Now()
	timer := t.opts.Clock.NewTimer(maxWait)
	defer timer.Stop()
	select {
	case lg.turn <- struct{}{}:
		at.waited = t.opts.Now().Sub(start)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C():
		now := t.opts.Now()
		rtt := t.roundTrip(p)
		return &WaitError{Provider: p.Name, Resource: class.Resource, Until: now.Add(rtt), Wait: rtt, MaxWait: maxWait}
	}
}

// rejected decides what a 401 to a request sent with c's own token means.
// The provider says whether it may be about the token at all (Hugging Face
// answers 401 for a missing repository); if so, the "who am I" request
// confirms it before c is marked invalid, for Options.InvalidRetry. It
// reports whether c was rejected (the request may then go again with
// another credential); otherwise the 401 is the request's answer.
func (t *Transport) rejected(ctx context.Context, p *provider.Provider, c *creds.Credential, req *http.Request, resp *http.Response, prefix []byte, turnHeld bool, now time.Time) bool {
	if !p.MayRejectCredential(resp.StatusCode, resp.Header, prefix) {
		return false
	}
	if _, ok := p.ValidationURL(); ok && !t.opts.SkipValidation && c.Kind() == creds.Static {
		t.whoAmI(ctx, p, c, turnHeld)
		return c.State(t.opts.Now()) == creds.Invalid
	}
	reason := fmt.Sprintf("%s %s answered 401", req.Method, redactURL(req))
	if c.MarkInvalid(reason, now, now.Add(t.opts.InvalidRetry)) {
		t.unlearn(p, c)
		t.remember(ctx, p, c, now)
		t.emit(Event{Kind: EventCredentialInvalid, Provider: p.Name, Credential: c.Masked(), Status: http.StatusUnauthorized})
		t.log.Warn("credential rejected", "provider", p.Name, "credential", c.Masked(), "retry_at", now.Add(t.opts.InvalidRetry))
	}
	return true
}

// outgoing builds the request to send: a copy of req with its own header,
// the credential's token (only for a URL its provider owns) and, from the
// second attempt on, a fresh body.
func (t *Transport) outgoing(ctx context.Context, req *http.Request, p *provider.Provider, g *grant, attempt int) (*http.Request, error) {
	out := new(http.Request)
	*out = *req
	out.Header = cloneHeader(req.Header, 4)
	if attempt > 1 && req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("ratekeeper: replaying the request body: %w", err)
		}
		out.Body = body
	}
	if p.Owns(req.URL) {
		token, err := g.cred.Token(ctx)
		if err != nil {
			return nil, fmt.Errorf("ratekeeper: credential %s: %w", g.cred.Masked(), err)
		}
		if token != "" && !hasAuth(req, p) {
			t.authorize(out.Header, p, g.cred, token)
		}
		basicAuth(out.Header, req)
	} else {
		p.Deauthorize(out.Header)
	}
	return out, nil
}

// credInfo caches, per credential, the header values the hot path would
// otherwise build for every request: the auth header for the current token
// and the masked name. The slices are shared, with no room to grow, so an
// append by a caller copies instead of writing into them.
type credInfo struct {
	token  string
	key    string
	value  []string
	masked string
}

func (t *Transport) credInfo(p *provider.Provider, c *creds.Credential, token string) *credInfo {
	if v, ok := t.creds.Load(c); ok {
		ci := v.(*credInfo)
		if token == "" || ci.token == token {
			return ci
		}
	}
	m := c.Masked()
	ci := &credInfo{token: token, masked: m}
	if token != "" {
		h := http.Header{}
		p.Authorize(h, token)
		for k, v := range h {
			ci.key, ci.value = k, v[:len(v):len(v)]
		}
	}
	t.creds.Store(c, ci)
	return ci
}

// authorize puts the credential's token on h the provider's way.
func (t *Transport) authorize(h http.Header, p *provider.Provider, c *creds.Credential, token string) {
	ci := t.credInfo(p, c, token)
	if ci.key == "" || ci.token != token {
		p.Authorize(h, token)
		return
	}
	h[ci.key] = ci.value
}

// cloneHeader copies h with room for extra more fields (the token, the
// cache's validators), so adding them does not grow the map.
func cloneHeader(h http.Header, extra int) http.Header {
	n := 0
	for _, vv := range h {
		n += len(vv)
	}
	out := make(http.Header, len(h)+extra)
	if n == 0 {
		return out
	}
	values := make([]string, n)
	for k, vv := range h {
		if vv == nil {
			out[k] = nil
			continue
		}
		m := copy(values, vv)
		out[k] = values[:m:m]
		values = values[m:]
	}
	return out
}

// sentOwnToken reports whether the request carried the credential's own
// token, so that a 401 says something about the credential: not when the
// caller authenticated the request with something else, nor when the
// credential is the caller's own (its 401 is the caller's answer).
func (t *Transport) sentOwnToken(ctx context.Context, req *http.Request, p *provider.Provider, g *grant) bool {
	if g.cred.Caller() {
		return false
	}
	callers := req.Header.Get(p.Auth.Header)
	if callers == "" {
		return true
	}
	token, err := g.cred.Token(ctx)
	if err != nil {
		return false
	}
	h := http.Header{}
	p.Authorize(h, token)
	return h.Get(p.Auth.Header) == callers
}

// hasAuth reports whether the caller already authenticated the request
// itself (see callerToken); its own credential is then left alone.
func hasAuth(req *http.Request, p *provider.Provider) bool {
	_, _, ok := callerToken(req, p)
	return ok
}

// settle gives a grant's reservation back and applies its answer's
// reading (r nil: release only), on a context the request's cancellation
// does not end (a State that does I/O bounds it with a timeout of its
// own): a request cut short by its deadline or its caller still returns
// what it took.
func (t *Transport) settle(ctx context.Context, p *provider.Provider, g *grant, at *attempt, r *headers.Reading, now time.Time, counted bool) {
	g.held = false
	at.settle = SettleParams{Slot: g.slot, Lease: g.lease, Now: now, Answer: t.answer(p, r, counted, g.sent)}
	at.settle.Answer.Units = g.units
	if err := t.state.Settle(context.WithoutCancel(ctx), &at.settle); err != nil {
		t.log.Warn("quota state update failed; the reservation lapses with its lease", "bucket", g.slot.Bucket.String(), "err", err)
	}
	t.waiters.wake()
}

// giveBack releases the attempt's reservation if it is still held.
func (t *Transport) giveBack(ctx context.Context, p *provider.Provider, at *attempt) {
	if at.grant.held {
		t.release(ctx, p, &at.grant, at)
	}
}

// release gives a grant's reservation back unused.
func (t *Transport) release(ctx context.Context, p *provider.Provider, g *grant, at *attempt) {
	t.settle(ctx, p, g, at, nil, t.opts.Now(), false)
}

// observe applies a reading learnt outside any reservation (a validation
// answer, a status endpoint) to slot's bucket (and owner, when named).
func (t *Transport) observe(ctx context.Context, p *provider.Provider, slot Slot, r *headers.Reading, now time.Time, counted bool) {
	sp := &SettleParams{Slot: slot, Now: now, Answer: t.answer(p, r, counted, time.Time{})}
	if err := t.state.Settle(context.WithoutCancel(ctx), sp); err != nil {
		t.log.Warn("quota state update failed", "bucket", slot.Bucket.String(), "err", err)
	}
	t.waiters.wake()
}

// answer is what reading r (nil: none) of a request to p sent at sent
// tells the quota state, with what applying it needs to know of p.
func (t *Transport) answer(p *provider.Provider, r *headers.Reading, counted bool, sent time.Time) quota.Answer {
	sec, _ := t.secondaryFor(p, provider.Request{})
	return quota.Answer{Reading: r, Counted: counted, Default: defaultsFor(p), Jitter: t.opts.Rand(), Sent: sent,
		Secondary: sec, MaxPause: t.maxPause(p)}
}

// skew records the response's Date, for a request sent at sent and
// answered at now, and returns the provider's clock skew.
func (t *Transport) skew(p *provider.Provider, h http.Header, sent, now time.Time) time.Duration {
	st, ok := headers.ServerTime(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.skews[p.Name]
	if s == nil {
		s = &quota.Skew{}
		t.skews[p.Name] = s
	}
	if ok {
		s.Add(st, sent, now)
	}
	return s.Estimate()
}

// backoff is the n-th retry's wait: full jitter up to RetryBase·2^(n−1),
// capped.
func (t *Transport) backoff(n int) time.Duration {
	ceiling := t.opts.RetryBase << min(n-1, 30)
	if ceiling <= 0 || ceiling > t.opts.RetryCap {
		ceiling = t.opts.RetryCap
	}
	return time.Duration(t.opts.Rand() * float64(ceiling))
}

// sleep waits d or until ctx ends.
func (t *Transport) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := t.opts.Clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *Transport) emit(e Event) {
	if t.opts.OnEvent != nil {
		t.opts.OnEvent(e)
	}
	if e.Kind == EventRateLimited && t.opts.Metrics != nil {
		t.opts.Metrics.rateLimited.WithLabelValues(e.Provider, e.Limit).Inc()
	}
}

// cacheOutcome labels a request for the metrics: "revalidated" when a
// stored response was confirmed by a free 304, "miss" for any other GET,
// "none" for other methods.
func cacheOutcome(method string, conditional bool, status int) string {
	switch {
	case conditional && status == http.StatusNotModified:
		return "revalidated"
	case method == http.MethodGet:
		return "miss"
	}
	return "none"
}

// record updates the metrics for one answered request.
func (t *Transport) record(p *provider.Provider, g *grant, status int, outcome string, r *headers.Reading) {
	m := t.opts.Metrics
	if m == nil {
		return
	}
	m.requests.WithLabelValues(p.Name, g.class.Resource, strconv.Itoa(status), outcome).Inc()
	if g.waited > 0 {
		m.waits.WithLabelValues(p.Name).Observe(g.waited.Seconds())
	}
	if r.Remaining != headers.UnknownCount {
		cred := g.cred.Masked()
		resource := r.Resource
		if resource == "" {
			resource = g.class.Resource
		}
		m.remaining.WithLabelValues(p.Name, cred, resource).Set(float64(r.Remaining))
		if r.Limit != headers.UnknownCount {
			m.limit.WithLabelValues(p.Name, cred, resource).Set(float64(r.Limit))
		}
		if r.HasReset() {
			m.reset.WithLabelValues(p.Name, cred, resource).Set(float64(r.Reset.Unix()))
		}
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

// needsBody says which responses Parse must see the body of: refusals
// (to tell secondary limits and find retry_after).
func needsBody(status int) bool {
	return status == http.StatusForbidden || status == http.StatusTooManyRequests || status == 420 ||
		status == http.StatusUnauthorized // whose body says whether the token was refused
}

// peekBody reads up to n bytes of body and returns them with a body that
// still yields everything.
func peekBody(body io.ReadCloser, n int) ([]byte, io.ReadCloser) {
	if body == nil || body == http.NoBody {
		return nil, body
	}
	buf := make([]byte, n)
	k, err := io.ReadFull(body, buf)
	buf = buf[:k]
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return buf, &replayBody{Reader: io.MultiReader(bytes.NewReader(buf), errReader{err}), closer: body}
	}
	return buf, &replayBody{Reader: io.MultiReader(bytes.NewReader(buf), body), closer: body}
}

type replayBody struct {
	io.Reader
	closer io.Closer
}

func (r *replayBody) Close() error { return r.closer.Close() }

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// discard drains a little of a response body (so the connection can be
// reused) and closes it.
func discard(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// redactURL is the request's URL without query or credentials, for
// messages.
func redactURL(req *http.Request) string {
	u := *req.URL
	u.User = nil
	u.RawQuery = ""
	u.Fragment = ""
	return u.String()
}
