package transport

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/cache"
	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
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
)

// Options configure a Transport. The zero value works: built-in providers,
// tokens from the environment, memory state and cache.
type Options struct {
	// Providers are the APIs the transport paces; nil means
	// provider.Defaults(). A request to a URL no provider owns is passed to
	// Base untouched: no credential, no pacing.
	Providers *provider.Registry
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
	// Lease is how long a reservation stays counted when its process
	// never reports back (it crashed).
	Lease time.Duration
	// Holder names this process in shared state; default: host, pid and a
	// random suffix.
	Holder string
	// SkipValidation turns off learning each token's owner with the
	// provider's "who am I" request before its first use. Without the
	// owner, two tokens of one account count as two buckets.
	SkipValidation bool
	// Logger receives debug logs (masked credentials only); nil: none.
	Logger *slog.Logger
	// OnEvent is called for waits, refusals, invalid credentials and
	// retries. It must not block.
	OnEvent func(Event)
	// Metrics records Prometheus metrics; nil: none.
	Metrics *Metrics
	// Now is the clock; nil means time.Now.
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

	mu    sync.Mutex
	pools map[string]*creds.Pool
	skews map[string]*quota.Skew

	validating sync.Map // *creds.Credential → *validation
	restored   sync.Map // *creds.Pool → *sync.Once
	creds      sync.Map // *creds.Credential → *credInfo

	notifyMu sync.Mutex
	notify   chan struct{}
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
	if t.opts.Now == nil {
		t.opts.Now = time.Now
	}
	if t.opts.Rand == nil {
		t.opts.Rand = mrand.Float64
	}
	t.holder = opts.Holder
	if t.holder == "" {
		t.holder = defaultHolder()
	}
	t.log = opts.Logger
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	for name, pool := range opts.Pools {
		t.pools[provider.CanonicalName(name)] = pool
	}
	t.keys = map[*provider.Provider]string{}
	for _, p := range t.reg.Providers() {
		t.keys[p] = p.Name + " " + p.BaseURL().String()
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

func defaultHolder() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// stateKey is the provider's part of bucket and owner keys.
func (t *Transport) stateKey(p *provider.Provider) string {
	if k, ok := t.keys[p]; ok {
		return k
	}
	return p.Name + " " + p.BaseURL().String()
}

// Close releases what the transport holds (a shared store's connections).
func (t *Transport) Close() error {
	if t.opts.OnClose != nil {
		return t.opts.OnClose()
	}
	return nil
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
	if p.Limits.Reserve > 0 {
		pol.Reserve = int64(p.Limits.Reserve)
	}
	return pol, nil
}

func (t *Transport) maxWait(p *provider.Provider) time.Duration {
	if p.Limits.MaxWait > 0 {
		return p.Limits.MaxWait
	}
	return t.opts.MaxWait
}

func secondaryFor(p *provider.Provider, class provider.Request) (quota.Secondary, quota.Cost) {
	s := quota.Secondary{
		MaxConcurrent:    int64(p.Secondary.MaxConcurrency),
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
	bucket BucketID
	owner  OwnerID
	class  provider.Request
	waited time.Duration
}

// RoundTrip implements http.RoundTripper. It does not modify req; the
// response's Request is req. A request to a URL no provider owns goes to
// the base transport untouched.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.reg.Match(req.URL)
	if p == nil {
		return t.base.RoundTrip(req)
	}
	ctx := req.Context()
	pool, err := t.poolFor(p)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	class := p.Classify(req.Method, req.URL)
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	idempotent := isIdempotent(req)
	var errRetries, limitRetries int
	for attempt := 1; ; attempt++ {
		var grant grant
		g := &grant
		if err := t.acquire(ctx, req, p, pool, class, g); err != nil {
			closeBody(req)
			return nil, err
		}
		out, err := t.outgoing(ctx, req, p, g, attempt)
		if err != nil {
			t.settle(ctx, p, g, nil, t.opts.Now(), false)
			closeBody(req)
			return nil, err
		}
		var entry *cache.Entry
		if t.cache != nil {
			entry = t.cache.Prepare(out, g.bucket.Owner)
		}
		resp, err := t.base.RoundTrip(out)
		now := t.opts.Now()
		if err != nil {
			t.settle(ctx, p, g, nil, now, false)
			if ctx.Err() != nil {
				return nil, err
			}
			if idempotent && replayable && errRetries < t.opts.MaxRetries {
				errRetries++
				delay := t.backoff(errRetries)
				t.emit(Event{Kind: EventRetried, Provider: p.Name, Resource: class.Resource, Credential: g.cred.Masked(), Wait: delay, Attempt: attempt, Err: err})
				if serr := t.sleep(ctx, delay); serr != nil {
					return nil, serr
				}
				continue
			}
			return nil, err
		}

		var prefix []byte
		if needsBody(resp.StatusCode) {
			prefix, resp.Body = peekBody(resp.Body, 8<<10)
		}
		reading := quota.Read(resp.StatusCode, resp.Header, prefix, now, t.skew(p, resp.Header, now))
		counted := resp.StatusCode != http.StatusNotModified && !class.Free
		t.settle(ctx, p, g, &reading, now, counted)
		t.record(p, g, resp.StatusCode, cacheOutcome(out.Method, entry != nil, resp.StatusCode), &reading)

		switch {
		case resp.StatusCode == http.StatusUnauthorized && g.cred.Kind() != creds.Anonymous && t.sentOwnToken(ctx, req, p, g):
			reason := fmt.Sprintf("%s %s answered 401", req.Method, redactURL(req))
			if g.cred.MarkInvalid(reason, now) {
				t.remember(ctx, p, g.cred, now)
				t.emit(Event{Kind: EventCredentialInvalid, Provider: p.Name, Resource: class.Resource, Credential: g.cred.Masked(), Status: 401, Attempt: attempt})
				t.log.Warn("credential rejected", "provider", p.Name, "credential", g.cred.Masked())
			}
			if replayable && len(pool.Eligible(now)) > 0 {
				discard(resp)
				continue
			}
		case reading.Limited != headers.NotLimited:
			if reading.Limited == headers.Primary {
				g.cred.MarkExhausted(now.Add(reading.Wait), now)
			}
			t.emit(Event{Kind: EventRateLimited, Provider: p.Name, Resource: class.Resource, Credential: g.cred.Masked(),
				Status: resp.StatusCode, Limit: reading.Limited.String(), Wait: reading.Wait, Attempt: attempt})
			// A refused request was not processed, so even a POST may
			// go again.
			if replayable && limitRetries < t.opts.MaxRateLimitRetries {
				limitRetries++
				discard(resp)
				continue
			}
		case resp.StatusCode >= 500 && idempotent && replayable && errRetries < t.opts.MaxRetries:
			delay := t.backoff(errRetries + 1)
			if reading.HasRetryAfter {
				delay = reading.RetryAfter
			}
			if delay <= t.opts.RetryCap {
				errRetries++
				t.emit(Event{Kind: EventRetried, Provider: p.Name, Resource: class.Resource, Credential: g.cred.Masked(), Status: resp.StatusCode, Wait: delay, Attempt: attempt})
				discard(resp)
				if serr := t.sleep(ctx, delay); serr != nil {
					return nil, serr
				}
				continue
			}
		default:
			if resp.StatusCode < 400 {
				g.cred.MarkAvailable(now)
			}
		}

		if t.cache != nil {
			if entry != nil && resp.StatusCode == http.StatusNotModified {
				resp = t.cache.Revalidated(entry, resp)
			} else if out.Method == http.MethodGet {
				if stored, serr := t.cache.Store(out, g.bucket.Owner, resp); serr == nil {
					resp = stored
				}
			}
		}
		resp.Header[HeaderCredential] = t.credInfo(p, g.cred, "").masked
		if attempt > 1 {
			resp.Header.Set(HeaderAttempts, strconv.Itoa(attempt))
		}
		// The base transport's request carries the token; the caller
		// gets its own back.
		resp.Request = req
		return resp, nil
	}
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
	masked []string
}

func (t *Transport) credInfo(p *provider.Provider, c *creds.Credential, token string) *credInfo {
	if v, ok := t.creds.Load(c); ok {
		ci := v.(*credInfo)
		if token == "" || ci.token == token {
			return ci
		}
	}
	m := c.Masked()
	ci := &credInfo{token: token, masked: []string{m}[:1:1]}
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
// caller authenticated the request with something else.
func (t *Transport) sentOwnToken(ctx context.Context, req *http.Request, p *provider.Provider, g *grant) bool {
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
// itself; its own token is then left alone.
func hasAuth(req *http.Request, p *provider.Provider) bool {
	return req.Header.Get(p.Auth.Header) != ""
}

// settle returns a grant's reservations and, when there was a response,
// applies its reading.
func (t *Transport) settle(ctx context.Context, p *provider.Provider, g *grant, r *headers.Reading, now time.Time, counted bool) {
	sec, cost := secondaryFor(p, g.class)
	sp := spend{owner: g.owner, bucket: g.bucket, sec: sec, cost: cost, free: g.class.Free}
	jitter := t.opts.Rand()
	if m, ok := t.state.(*memoryState); ok {
		m.settle(&sp, r, now, t.holder, counted, defaultsFor(p), jitter)
		t.wake()
		return
	}
	var reading *headers.Reading
	if r != nil {
		rc := *r // the closures below keep a copy; the caller's reading stays on its stack
		reading = &rc
	}
	t.settleShared(ctx, p, g, reading, now, counted, jitter)
}

func (t *Transport) settleShared(ctx context.Context, p *provider.Provider, g *grant, r *headers.Reading, now time.Time, counted bool, jitter float64) {
	sec, _ := secondaryFor(p, g.class)
	if sec.MaxConcurrent > 0 || r != nil {
		_ = t.state.UpdateOwner(ctx, g.owner, func(o *quota.Owner) error {
			if sec.MaxConcurrent > 0 {
				o.Release(t.holder, 1)
			}
			if r != nil {
				o.Observe(r, now, jitter)
			}
			return nil
		})
	}
	def := defaultsFor(p)
	err := t.state.UpdateBucket(ctx, g.bucket, func(b *quota.Bucket) error {
		if r == nil {
			b.Release(t.holder, 1)
			return nil
		}
		b.Observe(r, now, t.holder, 1, counted, def)
		return nil
	})
	if err != nil {
		t.log.Warn("quota state update failed", "bucket", g.bucket.String(), "err", err)
	}
	t.wake()
}

// skew records the response's Date and returns the provider's clock skew.
func (t *Transport) skew(p *provider.Provider, h http.Header, now time.Time) time.Duration {
	st, ok := headers.ServerTime(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.skews[p.Name]
	if s == nil {
		s = &quota.Skew{}
		t.skews[p.Name] = s
	}
	if ok {
		s.Add(st, now)
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
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wake tells waiting requests that some state changed.
func (t *Transport) wake() {
	t.notifyMu.Lock()
	if t.notify != nil {
		close(t.notify)
		t.notify = nil
	}
	t.notifyMu.Unlock()
}

// changed returns a channel closed at the next state change.
func (t *Transport) changed() <-chan struct{} {
	t.notifyMu.Lock()
	defer t.notifyMu.Unlock()
	if t.notify == nil {
		t.notify = make(chan struct{})
	}
	return t.notify
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
	if r.Remaining != headers.Unknown {
		cred := g.cred.Masked()
		resource := r.Resource
		if resource == "" {
			resource = g.class.Resource
		}
		m.remaining.WithLabelValues(p.Name, cred, resource).Set(float64(r.Remaining))
		if r.Limit != headers.Unknown {
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
	return status == http.StatusForbidden || status == http.StatusTooManyRequests || status == 420
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
