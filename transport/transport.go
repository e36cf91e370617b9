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
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

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
	// HeaderCache is set by the cache: "miss" (stored), "revalidated"
	// (a free 304 answered with the stored body), "fresh" (a stored
	// answer served without a request, with Age) or "stale" (one the
	// caller's max-stale accepted rather than wait for quota).
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
	// pool gets one from its environment variables (creds.Load) when New
	// makes its lane; a host no provider owns, when its first request
	// does.
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
	// Ping asks the shared database whether it answers, without waiting
	// out an outage; Ready calls it. nil: there is no database to ask.
	Ping func(ctx context.Context) error
	// Cache answers repeated GETs: a stored answer still fresh for its
	// max-age without a request, a stale one with a conditional request
	// (see package cache); nil means a memory cache of 64 MiB.
	// DisableCache turns caching off; cache.Options.AlwaysRevalidate
	// keeps it but asks the server every time.
	Cache        *cache.Cache
	DisableCache bool
	// Policy paces providers whose configuration names none; the zero
	// value means quota.DefaultPolicy().
	Policy quota.Policy
	// MaxWait is the longest a request waits for quota; beyond it
	// RoundTrip returns a *WaitError carrying when the quota returns.
	// A provider's configured max wait overrides it.
	MaxWait time.Duration
	// ScopeMaxWait, when positive and shorter, bounds a wait that is a
	// scope's instead (a pause or learnt limit of a part of the API the
	// server does not announce, while the request's own bucket could
	// serve): beyond it the request returns its *WaitError at once, so a
	// caller with other work — a durable task queue, which turns it into
	// a durable sleep — frees the worker for requests to the rest of the
	// API. Zero: MaxWait.
	ScopeMaxWait time.Duration
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
	// request with an Idempotency-Key), and of any request an overloaded
	// server did not process (at least OverloadRetries of those).
	// Negative disables them.
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
	// Clock is where the transport, the credential validation it runs
	// and a State that takes it (Clocked: store/quotastate) read the time
	// and set their timers; nil means the system's (with Now, when set,
	// as its time). Tests give a fake one.
	Clock Clock
	// Now is the clock's time alone, kept for callers that set only that;
	// when Clock is set, Now is Clock.Now.
	Now func() time.Time
	// Rand returns numbers in [0, 1) for jitter; nil means math/rand/v2.
	Rand func() float64
	// UpstreamRateLimitHeaders delivers answers with the server's own
	// rate-limit fields. By default they say what the pool can still do
	// (see HeaderUpstreamPrefix): summed over its distinct buckets, the
	// soonest reset, and a refusal's Retry-After when any credential can
	// go, so that a client keeping its own view of the limit does not stop
	// while another credential could serve; the server's values are then
	// under X-Ratekeeper-Upstream-NAME.
	UpstreamRateLimitHeaders bool
	// CallerMaxWait is, by provider name, the longest a request waits for
	// quota in all where the caller waits outside the transport (the
	// gateway hands every wait back, with a MaxWait of a nanosecond here):
	// a bucket that refills within it still serves, and the pool's
	// rate-limit fields count it. A provider not named uses its max wait.
	CallerMaxWait map[string]time.Duration
	// TracerProvider makes the spans of the requests (see SpanRequest):
	// one per request, a child of the span in the request's context, with
	// the rate-limit facts as attributes and a child span per wait; nil
	// means otel.GetTracerProvider(), which records nothing unless the
	// program set one. A noop.TracerProvider turns tracing off outright:
	// no span, and no caller's trace context sent upstream.
	TracerProvider trace.TracerProvider
	// Propagator puts the request's trace context on what is sent
	// upstream (W3C traceparent, with propagation.TraceContext); nil means
	// otel.GetTextMapPropagator(), which puts nothing unless the program
	// set one.
	Propagator propagation.TextMapPropagator
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

	// lanes are the registry's providers' lanes, made by New and only
	// read afterwards; given are Options.Pools by canonical name.
	lanes map[*provider.Provider]*lane
	given map[string]*creds.Pool

	mu sync.Mutex
	// late are the lanes made on first use: a host no provider owns (also
	// in auto, by origin), a provider added to the registry after New.
	late map[*provider.Provider]*lane
	auto map[string]*lane

	learnings   sync.Map // *creds.Pool → *learning
	validations sync.Map // *creds.Credential → *validationRetry
	asking      sync.Map // *creds.Credential → chan struct{}, closed once its owner is asked
	restored    sync.Map // *creds.Pool → *sync.Once
	creds       sync.Map // *creds.Credential → *credInfo
	callers     callerCredentials
	// turns orders learning turns among the processes sharing the state;
	// nil in memory.
	turns LearningTurns

	shared    bool        // the state is shared with other processes (Heartbeats)
	holding   once        // startHolding
	beatTimer *time.Timer // the heartbeat on a shared state
	beats     int
	closed    bool
	// stopping is cancelled by Close: a heartbeat or sweep under way
	// (which may be waiting out a database outage) gives up; beating
	// counts those under way, and Close waits for them.
	stopping  context.Context
	stopBeats context.CancelFunc
	beating   sync.WaitGroup

	waiters   waiters
	flights   flights      // cacheable GETs in flight, which identical ones wait for
	costs     graphqlCosts // GraphQL queries' costs, learnt per shape
	tokens    tokenCosts   // what a prompt character costs, learnt per shape
	view      poolView     // the buckets as answers describe them, for delivered answers' fields
	trace     tracing
	leaseBase uint64
	leaseSeq  atomic.Uint64
}

// New returns a Transport. It fails when a provider's credentials cannot be
// loaded (an empty or whitespace-padded token, an unreadable App key) or a
// policy is invalid.
func New(opts Options) (*Transport, error) {
	ownClock := opts.Clock != nil || opts.Now != nil
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Transport{opts: opts, reg: opts.Providers, base: opts.Base, state: opts.State, log: opts.Logger,
		holder: opts.Holder, lanes: map[*provider.Provider]*lane{}, given: map[string]*creds.Pool{},
		late: map[*provider.Provider]*lane{}, auto: map[string]*lane{}, trace: newTracing(opts, ownClock)}
	t.stopping, t.stopBeats = context.WithCancel(context.Background())
	if m := opts.Metrics; m != nil && m.scopes != nil {
		m.scopes.state.Store(&t.state)
	}
	_, t.shared = t.state.(Heartbeats)
	t.turns, _ = t.state.(LearningTurns)
	if c, ok := t.state.(Clocked); ok {
		c.UseClock(opts.Clock)
	}
	if w, ok := t.state.(Waker); ok {
		t.waiters.across = true
		w.OnWake(t.waiters.wake, t.waiters.waiting)
	}
	if !opts.DisableCache {
		t.cache = opts.Cache
		if t.cache == nil {
			t.cache = cache.New(cache.Options{Logger: opts.Logger})
		}
	}
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	t.leaseBase = binary.LittleEndian.Uint64(seed[:])
	for name, pool := range opts.Pools {
		t.given[provider.CanonicalName(name)] = pool
	}
	// Every provider's lane is made now, so a request only looks its lane
	// up, and a bad policy or token is New's error, not the first
	// request's.
	for _, p := range t.reg.Providers() {
		l := t.newLane(p)
		if err := cmp.Or(l.policyErr, l.poolErr); err != nil {
			return nil, err
		}
		t.lanes[p] = l
	}
	return t, nil
}

// withDefaults fills what o leaves zero with the documented defaults, and
// reports a policy that cannot work.
func (o Options) withDefaults() (Options, error) {
	if o.Providers == nil {
		o.Providers = provider.Defaults()
	}
	if o.Base == nil {
		o.Base = http.DefaultTransport.(*http.Transport).Clone()
	}
	if o.State == nil {
		o.State = NewMemoryState()
	}
	if o.Policy.Kind == "" {
		o.Policy = quota.DefaultPolicy()
	}
	if err := o.Policy.Validate(); err != nil {
		return o, err
	}
	positive := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	positive(&o.MaxWait, DefaultMaxWait)
	positive(&o.RetryBase, DefaultRetryBase)
	positive(&o.RetryCap, DefaultRetryCap)
	positive(&o.Lease, DefaultLease)
	positive(&o.InvalidRetry, DefaultInvalidRetry)
	positive(&o.MaxPause, quota.DefaultMaxPause)
	positive(&o.SecondaryWait, quota.SecondaryBase)
	if o.MaxRetries == 0 {
		o.MaxRetries = DefaultMaxRetries
	}
	if o.MaxRateLimitRetries == 0 {
		o.MaxRateLimitRetries = DefaultMaxRateLimitRetries
	}
	if o.Clock == nil {
		now := o.Now
		if now == nil {
			now = time.Now
		}
		o.Clock = systemClock{now: now}
	}
	o.Now = o.Clock.Now
	if o.Rand == nil {
		o.Rand = mrand.Float64
	}
	if o.Holder == "" {
		o.Holder = holder.Self().String()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// RoundTrip implements http.RoundTripper. It does not modify req; the
// response's Request is req. It looks up the lane of the request's
// provider (made at New, or on first use for a host no provider owns, see
// laneForURL) and runs the request's exchange on it: classify, route, and
// for each attempt acquire, send, read, decide — deliver, or go again (see
// exchange.run).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	l, err := t.laneForURL(req.URL)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	x := t.newExchange(req, l, route{})
	defer x.close()
	return x.runTraced()
}

// Close releases what the transport holds (a shared store's connections).
// It stops the heartbeat, and a beat or sweep under way (one waiting out
// a database outage gives up), and returns once they have ended.
func (t *Transport) Close() error {
	t.mu.Lock()
	t.closed = true
	if t.beatTimer != nil {
		t.beatTimer.Stop()
	}
	t.mu.Unlock()
	t.stopBeats()
	t.beating.Wait()
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

// grant is a reservation: the credential chosen for one send, and the
// quota it holds.
type grant struct {
	cred   *creds.Credential
	slot   Slot
	lease  uint64
	held   bool      // the reservation is not settled yet
	sent   time.Time // when the reservation was taken, then when the request went (send)
	class  provider.Request
	waited time.Duration
	// units is the real cost of the attempt's GraphQL query, once its
	// answer told it (see learnGraphQL); 0 otherwise.
	units int64
}

// outgoing builds the request to send: a copy of req with its own header,
// the credential's token (only for a URL its provider owns) and, from the
// second attempt on, a fresh body.
func (t *Transport) outgoing(ctx context.Context, req *http.Request, p *provider.Provider, g *grant, attempt int) (*http.Request, error) {
	out := new(http.Request)
	*out = *req
	out.Header = cloneHeader(req.Header, 4)
	out.Header.Del(CostHeader)
	if attempt > 1 && req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("ratekeeper: replaying the request body: %w", err)
		}
		out.Body = body
	}
	if p.Owns(req.URL) {
		p.SetDefaultHeaders(out.Header)
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

// observe applies a reading learnt outside any reservation (a validation
// answer, a status endpoint) to slot's bucket (and owner, when named).
func (t *Transport) observe(ctx context.Context, p *provider.Provider, slot Slot, r *headers.Reading, now time.Time, counted bool) {
	sp := &SettleParams{Slot: slot, Now: now, Answer: t.laneFor(p).answer(r, counted, time.Time{}, t.opts.Rand())}
	if err := t.state.Settle(context.WithoutCancel(ctx), sp); err != nil {
		t.log.Warn("quota state update failed", "bucket", slot.Bucket.String(), "err", err)
	}
	t.view.observe(slot, &sp.Answer, now)
	t.waiters.wake()
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

// Clock is the transport's clock (Options.Clock, else the system's): the
// clock of its decisions and of a WaitError's Until. A scheduler above
// the transport (package batch) waits on it too.
func (t *Transport) Clock() Clock { return t.opts.Clock }

// Emit reports e as one of the transport's own events: to OnEvent, and
// to the metrics that count its kind. It is for a scheduler above the
// transport whose requests wait outside RoundTrip (package batch reports
// EventWaited when a request that waited in it goes).
func (t *Transport) Emit(e Event) { t.emit(e) }

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

// needsBody says which responses Parse must see the body of: refusals
// (to tell secondary limits and find retry_after).
func needsBody(status int) bool {
	return status == http.StatusForbidden || status == http.StatusTooManyRequests || status == 420 ||
		status == http.StatusUnauthorized || // whose body says whether the token was refused
		status == http.StatusServiceUnavailable // whose body may say the server is overloaded
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

// redactURL is a request's URL without query or credentials, for
// messages.
func redactURL(u *url.URL) string {
	r := *u
	r.User = nil
	r.RawQuery = ""
	r.Fragment = ""
	return r.String()
}
