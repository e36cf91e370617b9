package sim

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server is a set of simulated APIs behind one http.Handler. It owns no
// goroutines: everything it does happens inside ServeHTTP, so it needs no
// Close and lives happily inside a testing/synctest bubble.
type Server struct {
	apis     []*api // in config order
	byPrefix []*api // longest prefix first
	// start is when the timelines begin: New, or the last Reset.
	start atomic.Pointer[time.Time]
}

// api is one mounted, simulated API.
type api struct {
	srv    *Server
	index  int
	name   string
	kind   string // canonical dialect
	prefix string // "" for the root
	d      dialect
	spec   *spec
	res    []resolvedResource
	// endpointLimits are checked in order; the first match counts.
	endpointLimits []*endpointLimit

	requireAuth     bool
	exhaustedStatus int
	secondary       *SecondaryConfig // nil: none
	freeNotModified bool
	rateHeaders     bool
	pollInterval    time.Duration
	eventsEvery     time.Duration
	skew            time.Duration
	latency         time.Duration
	faults          FaultConfig
	seed            uint64
	outputRatio     float64 // language models: answer length / max_tokens

	faultSeq atomic.Uint64
	reqSeq   atomic.Uint64

	tokens      map[string]*owner // read-only after New
	owners      []*owner          // named owners, in token order
	tokenOwners []*owner          // owner of tokens[i]
	tokenTexts  []string

	anonMu    sync.Mutex
	anon      map[string]*owner
	anonOrder []*owner

	apps *apps // GitHub Apps and their installations; nil without

	versions sync.Map // escaped path -> *atomic.Uint64
	cache    bodyCache
	date     atomic.Pointer[dateCache]
}

type resolvedResource struct {
	name      string
	limit     int64
	anonLimit int64 // < 0: anonymous requests need a token
	window    int64 // seconds
	fixed     bool
	// continuous: a token bucket refilling limit/window every instant.
	continuous bool
}

// owner is a user (or an anonymous client IP) with one bucket per resource.
type owner struct {
	name      string
	id        int64
	anonymous bool
	buckets   []*bucket
	inFlight  atomic.Int64
	sec       *secondary // nil: no secondary limits
	// accounts are the only accounts whose repositories the owner's
	// tokens see (an installation's, a fine-grained token's); nil: all
	// but installations' private ones.
	accounts []string

	epMu      sync.Mutex
	endpoints map[int]*endpointCounter // by endpointLimit.index, made on first use
}

// call is one request being answered.
type call struct {
	a       *api
	w       http.ResponseWriter
	r       *http.Request
	rel     string   // escaped path below the mount prefix, starting with "/"
	segs    []string // rel's unescaped segments
	realNow time.Time
	now     time.Time // the server's (skewed) clock
	own     *owner
	ep      endpoint
	tag     string           // the entity tag of a static answer, as given to this request
	epc     *endpointCounter // the owner's counter of the endpoint limit the request matches, if any
	jwt     bool             // authenticated with an App's JWT
}

// New builds a simulator from cfg after validating it (see Config.Validate).
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim config: %w", err)
	}
	s := &Server{}
	now := time.Now()
	s.start.Store(&now)
	for i, ac := range cfg.APIs {
		a, err := newAPI(s, i, ac, len(cfg.APIs), cfg.Seed)
		if err != nil {
			return nil, err
		}
		s.apis = append(s.apis, a)
	}
	s.byPrefix = append([]*api(nil), s.apis...)
	sort.SliceStable(s.byPrefix, func(i, j int) bool { return len(s.byPrefix[i].prefix) > len(s.byPrefix[j].prefix) })
	return s, nil
}

func newAPI(s *Server, i int, ac APIConfig, apis int, seed int64) (*api, error) {
	kind, _ := canonicalDialect(ac.Dialect)
	sp := dialectSpec(kind)
	prefix, err := effectivePrefix(ac, apis)
	if err != nil {
		return nil, err
	}
	a := &api{
		srv: s, index: i, name: apiName(ac), kind: kind, prefix: prefix, spec: sp,
		d:               dialectOf(kind),
		requireAuth:     ac.RequireAuth,
		exhaustedStatus: cmpOr(ac.ExhaustedStatus, sp.exhaustedStatus),
		freeNotModified: boolOr(ac.FreeNotModified, sp.freeNotModified),
		rateHeaders:     boolOr(ac.RateLimitHeaders, sp.rateHeaders),
		pollInterval:    cmpOr(ac.PollInterval, time.Minute),
		eventsEvery:     ac.EventsEvery,
		skew:            ac.Skew,
		latency:         ac.Latency,
		faults:          ac.Faults,
		outputRatio:     cmpOr(ac.OutputRatio, 0.25),
		seed:            splitmix64(uint64(seed) ^ uint64(i+1)*0x9e3779b97f4a7c15),
		res:             resolveResources(kind, sp, ac),
		secondary:       secondaryConfig(ac, sp),
		endpointLimits:  resolveEndpointLimits(ac.EndpointLimits),
		tokens:          map[string]*owner{},
		anon:            map[string]*owner{},
	}
	a.faults.UnavailableRetryAfter = cmpOr(a.faults.UnavailableRetryAfter, time.Second)
	a.faults.SlowDelay = cmpOr(a.faults.SlowDelay, 2*time.Second)
	// Owners are made last: their buckets copy the resources and the
	// secondary limits.
	a.addTokens(ac.Tokens)
	a.addApps(ac.Apps)
	return a, nil
}

// dialectOf is the dialect that renders answers of kind.
func dialectOf(kind string) dialect {
	switch kind {
	case DialectGitHub:
		return githubDialect{}
	case DialectGitLab:
		return gitlabDialect{}
	case DialectHuggingFace:
		return huggingfaceDialect{}
	case DialectOpenAI:
		return openaiDialect{}
	case DialectAnthropic:
		return anthropicDialect{}
	default:
		return giteaDialect{}
	}
}

// resolveResources is the dialect's resources with the configuration's
// overrides applied: the API's own limit and window override the first
// resource, Resources the others by name.
func resolveResources(kind string, sp *spec, ac APIConfig) []resolvedResource {
	var res []resolvedResource
	for ri, r := range sp.resources {
		rr := resolvedResource{name: r.name, limit: r.limit, anonLimit: r.anonLimit, window: int64(r.window / time.Second),
			fixed: r.mode == WindowFixed, continuous: r.mode == WindowContinuous}
		var over ResourceConfig
		if ri == 0 {
			over = ResourceConfig{Limit: ac.Limit, Window: ac.Window, WindowMode: ac.WindowMode, AnonymousLimit: ac.AnonymousLimit}
		} else {
			over = ac.Resources[r.name]
		}
		if over.Limit > 0 {
			rr.limit = over.Limit
			// A proxy in front of Gitea limits every client alike.
			if kind == DialectGitea && over.AnonymousLimit == 0 {
				rr.anonLimit = over.Limit
			}
		}
		if over.AnonymousLimit > 0 {
			rr.anonLimit = over.AnonymousLimit
		}
		if over.Window > 0 {
			rr.window = int64(over.Window / time.Second)
		} else if rr.continuous && ac.Window > 0 {
			rr.window = int64(ac.Window / time.Second)
		}
		if over.WindowMode != "" && !rr.continuous {
			rr.fixed = strings.EqualFold(over.WindowMode, WindowFixed)
		}
		res = append(res, rr)
	}
	return res
}

// secondaryConfig is the secondary limits the API enforces, nil for none:
// the configuration's, when it sets any limit, else the dialect's own.
func secondaryConfig(ac APIConfig, sp *spec) *SecondaryConfig {
	switch {
	case ac.Secondary != nil:
		sc := *ac.Secondary
		if sc.MaxConcurrent > 0 || sc.PointsPerMinute > 0 || sc.GraphQLPointsPerMinute > 0 || sc.WriteSpacing > 0 {
			sc.Penalty = cmpOr(sc.Penalty, time.Minute)
			sc.Status = cmpOr(sc.Status, 403)
			return &sc
		}
	case sp.secondary != nil:
		sc := *sp.secondary
		return &sc
	}
	return nil
}

// addTokens makes the named owners of the configured tokens, one per
// owner however many tokens it has, in token order.
func (a *api) addTokens(tokens []TokenConfig) {
	byName := map[string]*owner{}
	for ti, t := range tokens {
		name := tokenOwner(t, ti)
		o := byName[name]
		if o == nil {
			id := t.UserID
			if id == 0 {
				id = derivedID(name)
			}
			o = a.newOwner(name, id, false)
			byName[name] = o
			a.owners = append(a.owners, o)
		}
		if t.UserID != 0 {
			o.id = t.UserID
		}
		if t.Limit > 0 {
			o.buckets[0].limit = t.Limit
		}
		if t.Accounts != nil {
			o.accounts = t.Accounts
		}
		a.tokens[t.Token] = o
		a.tokenOwners = append(a.tokenOwners, o)
		a.tokenTexts = append(a.tokenTexts, t.Token)
	}
}

func (a *api) newOwner(name string, id int64, anonymous bool) *owner {
	o := &owner{name: name, id: id, anonymous: anonymous}
	for ri, r := range a.res {
		limit := r.limit
		if anonymous {
			limit = max(r.anonLimit, 0)
		}
		o.buckets = append(o.buckets, &bucket{api: a, owner: o, resource: ri, limit: limit, window: r.window, fixed: r.fixed,
			continuous: r.continuous, scope: refusalScope{lag: a.latency}})
	}
	if a.secondary != nil {
		o.sec = &secondary{cfg: *a.secondary, minWait: MinRetryWait, scope: refusalScope{lag: a.latency}}
		if a.kind == DialectGitHub {
			o.sec.minWait = GitHubSecondaryWait
		}
	}
	return o
}

// anonOwner is the anonymous owner of a client IP, made on first use.
func (a *api) anonOwner(ip string) *owner {
	a.anonMu.Lock()
	defer a.anonMu.Unlock()
	if o := a.anon[ip]; o != nil {
		return o
	}
	o := a.newOwner(ip, 0, true)
	a.anon[ip] = o
	a.anonOrder = append(a.anonOrder, o)
	return o
}

// ServeHTTP answers a request to one of the simulated APIs, or to the
// simulator's own endpoints: GET /_stats, POST /_sim/touch?path=P and
// POST /_sim/reset. When a drop fault hits a ResponseWriter that cannot be
// hijacked, it panics with http.ErrAbortHandler, which net/http servers turn
// into a closed connection.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; strings.HasPrefix(p, "/_s") {
		switch p {
		case "/_stats":
			s.serveStats(w, r)
			return
		case "/_sim/touch":
			s.serveTouch(w, r)
			return
		case "/_sim/reset":
			if r.Method != http.MethodPost {
				controlError(w, http.StatusMethodNotAllowed, "use POST /_sim/reset")
				return
			}
			s.Reset()
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	a, rel := s.mount(r.URL.EscapedPath())
	if a == nil {
		controlError(w, http.StatusNotFound, "no simulated API is mounted at "+r.URL.Path)
		return
	}
	a.serve(w, r, rel)
}

// mount finds the API serving escaped path p and the path below its prefix.
func (s *Server) mount(p string) (*api, string) {
	for _, a := range s.byPrefix {
		switch {
		case a.prefix == "":
			if p == "" {
				p = "/"
			}
			return a, p
		case p == a.prefix:
			return a, "/"
		case strings.HasPrefix(p, a.prefix) && p[len(a.prefix)] == '/':
			return a, p[len(a.prefix):]
		}
	}
	return nil, ""
}

// serve answers one request in the order a real API would: route it,
// authenticate, maybe fail (an injected fault), check the owner's secondary
// limits, then the bucket (a 304 may be free), render, and reply after the
// latency.
func (a *api) serve(w http.ResponseWriter, r *http.Request, rel string) {
	c := a.newCall(w, r, rel)
	if !a.authenticate(c) {
		return
	}
	a.hide(c)
	if el := a.endpointFor(c); el != nil {
		c.epc = c.own.counter(el, a.latency)
		c.epc.arrive(c.now)
	}
	b := c.own.buckets[c.ep.res]
	inFlight := c.own.inFlight.Add(1)
	defer c.own.inFlight.Add(-1)

	delay, failed := a.injectFault(c, b, inFlight)
	if failed {
		return
	}
	if ld, ok := a.d.(llmDialect); ok {
		a.answerTokens(c, ld, inFlight, delay)
		return
	}
	if a.refuseSecondary(c, b, inFlight, delay) {
		return
	}
	a.answer(c, b, inFlight, delay)
}

// newCall makes the call for a request and finds its endpoint, filling in
// the default secondary points (5 for a write, else 1) and cost (1).
func (a *api) newCall(w http.ResponseWriter, r *http.Request, rel string) *call {
	realNow := time.Now()
	c := &call{a: a, w: w, r: r, rel: rel, segs: splitPath(rel), realNow: realNow, now: realNow.Add(a.skew)}
	c.ep = a.d.route(c)
	if c.ep.points == 0 {
		c.ep.points = 1
		if c.ep.write {
			c.ep.points = 5
		}
	}
	c.ep.cost = cmpOr(c.ep.cost, 1)
	return c
}

// authenticate sets the call's owner: the token's, or the client IP's
// anonymous one. It answers 401 itself and reports false for an unknown
// token, and for no token where the API or endpoint needs one.
func (a *api) authenticate(c *call) bool {
	tok, present := a.d.credential(c.r)
	if present {
		c.own = a.tokens[tok]
		if c.own == nil {
			if handled, ok := a.authenticateApp(c, tok); handled {
				return ok
			}
			// A bad token is charged to nobody, but counted on the client
			// IP's anonymous bucket, whose state the answer carries.
			anon := a.anonOwner(clientIP(c.r))
			st := anon.buckets[c.ep.res].record(c.now, anon.inFlight.Load(), outUnauthorized)
			a.reply(c, a.d.unauthorized(c, false), st, false, 0)
			return false
		}
		return true
	}
	c.own = a.anonOwner(clientIP(c.r))
	if a.requireAuth || c.ep.needsAuth || a.res[c.ep.res].anonLimit < 0 {
		st := c.own.buckets[c.ep.res].record(c.now, c.own.inFlight.Load(), outUnauthorized)
		a.reply(c, a.d.unauthorized(c, true), st, false, 0)
		return false
	}
	return true
}

// injectFault draws the configured faults for one request. A server
// error, an unavailable answer or a dropped connection is answered here
// (failed is true); a slow answer only adds delay.
func (a *api) injectFault(c *call, b *bucket, inFlight int64) (delay time.Duration, failed bool) {
	if !a.faults.any() {
		return 0, false
	}
	switch f, pick := a.drawFault(); f {
	case faultError:
		st := b.record(c.now, inFlight, outServerError)
		a.reply(c, serverError(pick), st, false, 0)
		return 0, true
	case faultUnavailable:
		st := b.record(c.now, inFlight, outServerError)
		rd := newRendered(http.StatusServiceUnavailable, ctText, []byte("Service Unavailable\n")).
			with("Retry-After", itoa(int64(a.faults.UnavailableRetryAfter/time.Second)))
		a.reply(c, rd, st, false, 0)
		return 0, true
	case faultOverload:
		st := b.record(c.now, inFlight, outServerError)
		rd := newRendered(http.StatusServiceUnavailable, ctText, []byte("Service Unavailable: the server is overloaded\n"))
		if ld, ok := a.d.(llmDialect); ok {
			rd = ld.overloaded()
		}
		a.reply(c, rd, st, false, 0)
		return 0, true
	case faultDrop:
		b.record(c.now, inFlight, outDropped)
		drop(c.w)
		return 0, true
	case faultSlow:
		return a.faults.SlowDelay, false
	case faultBareRefusal:
		wait := MinRetryWait
		if a.kind == DialectGitHub {
			wait = GitHubSecondaryWait
		}
		status := cmpOr(a.faults.BareRefusalStatus, http.StatusTooManyRequests)
		rd := newRendered(status, "text/html", []byte(fmt.Sprintf("<html><head><title>%d %s</title></head><body><h1>%s</h1><p>Please try again later.</p></body></html>\n",
			status, http.StatusText(status), http.StatusText(status))))
		a.reply(c, rd, bucketState{}, false, 0) // no limit: no rate-limit header
		// The refusal counts from when its answer left, which a busy
		// machine may delay past the latency: a request arriving
		// before then was sent before its client could know.
		left := c.now.Add(time.Since(c.realNow))
		b.refuseBare(c.now, left.Add(-a.latency), left.Add(wait), inFlight)
		return 0, true
	}
	return 0, false
}

// refuseSecondary answers the secondary-limit refusal, and reports true,
// when the owner's secondary limits do not admit the call.
func (a *api) refuseSecondary(c *call, b *bucket, inFlight int64, delay time.Duration) bool {
	sec := c.own.sec
	if sec == nil {
		return false
	}
	ok, wait, early := sec.admit(c.now, inFlight, c.ep.points, c.ep.write, c.ep.graphql)
	if early {
		b.countEarly()
	}
	if ok {
		return false
	}
	st := b.record(c.now, inFlight, outSecondary)
	rd := a.d.secondaryRefusal(c, a.secondary.Status)
	if a.secondary.RetryAfter {
		rd = rd.with("Retry-After", itoa(ceilSeconds(wait)))
	}
	a.reply(c, rd, st, false, delay)
	return true
}

// answer charges the bucket and replies: the exhausted answer when it
// refuses, else the endpoint's content. A static answer is rendered first
// so that a matching If-None-Match can make it a 304, free where the API
// says so.
func (a *api) answer(c *call, b *bucket, inFlight int64, delay time.Duration) {
	var rd *rendered
	notModified := false
	if c.ep.static != nil {
		rd = a.content(c)
		if rd.etag != "" {
			c.tag = a.d.tagFor(c.r, rd)
		}
		notModified = rd.status == http.StatusOK && (c.r.Method == http.MethodGet || c.r.Method == http.MethodHead) &&
			etagMatches(c.r.Header.Get("If-None-Match"), c.tag)
	}
	free := c.ep.free || (notModified && a.freeNotModified)
	st, verdict := b.admit(c.now, c.realNow, inFlight, c.ep.cost, free, notModified, a.spec.countRefused)
	if verdict == refused {
		a.reply(c, a.d.exhausted(c, st), st, false, delay)
		return
	}
	if c.epc != nil {
		// The main limit counted the request (GitLab's Rack::Attack runs
		// in front of the application that enforces endpoint limits).
		if est, ok := c.epc.admit(c.now); !ok {
			b.unaccept(c.realNow, notModified)
			a.reply(c, a.endpointRefusal(c, c.epc.lim, est), bucketState{}, false, delay)
			return
		}
	}
	if c.ep.dynamic != nil {
		rd = c.ep.dynamic(c, st)
		if c.ep.write && rd.status < 300 {
			a.bump(c.ep.bumps...)
		}
	}
	a.reply(c, rd, st, notModified, delay)
}

// reply waits out the configured latency (plus delay), then writes rd, or a
// bodiless 304 when notModified.
func (a *api) reply(c *call, rd *rendered, st bucketState, notModified bool, delay time.Duration) {
	if d := a.latency + delay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.r.Context().Done():
			t.Stop()
			return
		}
	}
	h := c.w.Header()
	h["Date"] = a.dateHeader(c.now)
	a.d.headers(c, h)
	if a.rateHeaders && st.limit > 0 {
		a.d.rateHeaders(c, h, st)
	}
	for _, kv := range rd.header {
		h[kv[0]] = []string{kv[1]}
	}
	if rd.etag != "" {
		// c.tag is rd's tag as given to this request (set only for
		// the static answer rd then is).
		h["Etag"] = []string{cmpOr(c.tag, rd.etag)}
	}
	if notModified {
		c.w.WriteHeader(http.StatusNotModified)
		return
	}
	if rd.contentType != "" {
		h["Content-Type"] = []string{rd.contentType}
	}
	h["Content-Length"] = []string{rd.length}
	c.w.WriteHeader(rd.status)
	if c.r.Method != http.MethodHead {
		_, _ = c.w.Write(rd.body)
	}
}

type dateCache struct {
	sec int64
	v   []string
}

// dateHeader formats the Date header once per second of the server clock.
func (a *api) dateHeader(now time.Time) []string {
	sec := now.Unix()
	if d := a.date.Load(); d != nil && d.sec == sec {
		return d.v
	}
	v := []string{now.UTC().Format(http.TimeFormat)}
	a.date.Store(&dateCache{sec: sec, v: v})
	return v
}

// content renders the static answer of c, from the cache when it can.
func (a *api) content(c *call) *rendered {
	v := a.version(c.relKey(), c.ep.events, c.realNow)
	var sb strings.Builder
	sb.Grow(len(c.rel) + len(c.r.URL.RawQuery) + len(c.r.Host) + 48)
	if m := c.r.Method; m != http.MethodHead {
		sb.WriteString(m)
	} else {
		sb.WriteString(http.MethodGet)
	}
	sb.WriteString(c.ep.variant)
	sb.WriteByte(0)
	sb.WriteString(c.r.Host)
	sb.WriteByte(0)
	sb.WriteString(c.rel)
	sb.WriteByte('?')
	sb.WriteString(c.r.URL.RawQuery)
	sb.WriteByte(0)
	if c.ep.ownerDependent {
		sb.WriteString(c.own.name)
	}
	sb.WriteByte(0)
	sb.WriteString(itoa(int64(v)))
	key := sb.String()
	if rd := a.cache.get(key); rd != nil {
		return rd
	}
	rd := c.ep.static(c)
	if rd.etag == "" && rd.status == http.StatusOK {
		rd.etag = a.d.etag(rd.body)
	}
	a.cache.put(key, rd)
	return rd
}

// relKey is the path whose version feeds the request's content.
func (c *call) relKey() string {
	if len(c.rel) > 1 {
		return strings.TrimSuffix(c.rel, "/")
	}
	return c.rel
}

// version is how many times the content at escaped path p changed: touches
// and writes, plus for events feeds one change every EventsEvery.
func (a *api) version(p string, events bool, realNow time.Time) uint64 {
	var v uint64
	if n, ok := a.versions.Load(p); ok {
		v = n.(*atomic.Uint64).Load()
	}
	if events && a.eventsEvery > 0 {
		if d := realNow.Sub(*a.srv.start.Load()); d > 0 {
			v += uint64(d / a.eventsEvery)
		}
	}
	return v
}

// bump advances the version of escaped paths.
func (a *api) bump(paths ...string) {
	for _, p := range paths {
		n, _ := a.versions.LoadOrStore(p, new(atomic.Uint64))
		n.(*atomic.Uint64).Add(1)
	}
}

// version of the call's own path, for renderers.
func (c *call) version() uint64 { return c.a.version(c.relKey(), c.ep.events, c.realNow) }

// base is the absolute URL of the API's root as the client reached it.
func (c *call) base() string {
	scheme := "http"
	if c.r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + c.r.Host + c.a.prefix
}

// requestID is a per-API sequence number formatted as hex.
func (c *call) requestID() uint64 { return c.a.reqSeq.Add(1) }

// Touch changes the content at path (a path as clients request it, with the
// API's prefix, e.g. "/github/repos/o/r/issues"): its body and ETag change,
// so conditional requests see a new version. It fails when no API is
// mounted there.
func (s *Server) Touch(path string) error {
	u, err := url.Parse(path)
	if err != nil || !strings.HasPrefix(u.Path, "/") {
		return fmt.Errorf("sim: touch %q: want an absolute path like /repos/o/r/issues", path)
	}
	a, rel := s.mount(u.EscapedPath())
	if a == nil {
		return fmt.Errorf("sim: touch %q: no simulated API is mounted there", path)
	}
	if len(rel) > 1 {
		rel = strings.TrimSuffix(rel, "/")
	}
	a.bump(rel)
	return nil
}

func (s *Server) serveTouch(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		controlError(w, http.StatusMethodNotAllowed, "use POST /_sim/touch?path=/repos/o/r/issues")
		return
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		controlError(w, http.StatusBadRequest, "missing path: use POST /_sim/touch?path=/repos/o/r/issues")
		return
	}
	if err := s.Touch(p); err != nil {
		controlError(w, http.StatusNotFound, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Reset empties every bucket, penalty, counter and timeline and forgets
// touches and anonymous clients, as if the server had just been made; the
// timeline restarts now.
func (s *Server) Reset() {
	for _, a := range s.apis {
		if a.apps != nil {
			// Tokens minted stay valid, as GitHub's do; their count
			// restarts.
			for _, in := range a.apps.byID {
				in.mints.Store(0)
			}
		}
		a.anonMu.Lock()
		a.anon = map[string]*owner{}
		a.anonOrder = nil
		a.anonMu.Unlock()
		for _, o := range a.owners {
			for _, b := range o.buckets {
				b.reset()
			}
			if o.sec != nil {
				o.sec.reset()
			}
			o.epMu.Lock()
			o.endpoints = nil
			o.epMu.Unlock()
		}
		a.versions.Range(func(k, _ any) bool { a.versions.Delete(k); return true })
		a.cache.clear()
		a.faultSeq.Store(0)
	}
	now := time.Now()
	s.start.Store(&now)
}

func controlError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", ctJSON)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": "sim: " + msg})
}

// splitPath returns the unescaped segments of escaped path p.
func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if strings.IndexByte(s, '%') >= 0 {
			if u, err := url.PathUnescape(s); err == nil {
				segs[i] = u
			}
		}
	}
	return segs
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if host == "" {
		return "unknown"
	}
	return host
}

// derivedID is a stable numeric ID for an owner name.
func derivedID(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return int64(1000 + h.Sum64()%90_000_000)
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}
