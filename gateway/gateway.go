package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratekeeper/ratekeeper/cache"
	probes "github.com/ratekeeper/ratekeeper/internal/probe"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/transport"
	"github.com/ratekeeper/ratekeeper/wiring"
)

// Defaults of Options.
const (
	// DefaultMaxWait is the gateway's longest wait for quota: short,
	// because a client is holding a connection open meanwhile; beyond it
	// the client gets a 429 with Retry-After and can come back.
	DefaultMaxWait         = 30 * time.Second
	DefaultMaxBody         = 10 << 20
	DefaultCoalesceLimit   = 1 << 20
	DefaultUpstreamTimeout = 30 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultReadTimeout bounds reading a request's body (and its header,
	// which has at most headerTimeout).
	DefaultReadTimeout = 30 * time.Second
	// DefaultMaxUnauthenticated bounds the connections that have not yet
	// presented a valid client key, when keys are configured.
	DefaultMaxUnauthenticated = 256
	// DefaultMaxPendingPerAddress bounds the connections from one client
	// address that have not yet sent a request (or, with keys, a valid
	// key) and have waited a second or more.
	DefaultMaxPendingPerAddress = 64
	// DefaultPassThroughRefusal is how long a pass-through token the
	// provider rejected is refused by the gateway itself.
	DefaultPassThroughRefusal = 10 * time.Minute
)

// Paths of the gateway's own endpoints. A provider may not be named after
// one of them.
const (
	PathDashboard = "/"
	PathHealth    = "/healthz"
	PathReady     = "/readyz"
	PathMetrics   = "/metrics"
	PathStatus    = "/status"
	PathAssets    = "/assets/"
)

var reservedNames = []string{"healthz", "readyz", "metrics", "status", "assets"}

// Options configure a Gateway. The zero value serves every provider the
// client options know, with the gateway's own credentials, on loopback.
type Options struct {
	// Client builds the rate-keeping transport: providers, tokens,
	// policy, reserve, shared quota database, logger, and the max wait
	// (default DefaultMaxWait here; a provider's configured max_wait
	// wins), which for the gateway bounds the whole time a request waits
	// for quota, queueing and coalescing included. Its Registerer
	// defaults to the gateway's Registry, its Base to an http.Transport
	// with UpstreamTimeout.
	Client wiring.Options
	// Providers names the providers served at /NAME/...; empty serves
	// every provider of the client's registry.
	Providers []string
	// Hosts routes requests by their Host header: a request whose host
	// (without port) is a key goes to the named provider, its whole path
	// relative to the provider's base URL. E.g. {"api.github.local":
	// "github"} for clients that reach the gateway under that name.
	Hosts map[string]string
	// PassThrough forwards a client's own token, sent in the provider's
	// auth header, instead of one of the gateway's, and tracks that
	// token's quota like a configured credential's. Requests without a
	// token use the gateway's credentials.
	PassThrough bool
	// Keys are the clients allowed in. When empty, no key is asked for,
	// and Serve refuses a listener that is not on loopback.
	Keys *Keys
	// MaxBody is the largest request body accepted (413 beyond);
	// default DefaultMaxBody.
	MaxBody int64
	// CoalesceLimit is the largest response body shared between
	// coalesced requests (default DefaultCoalesceLimit); larger answers
	// stream to one client and the others send their own requests.
	// Negative turns coalescing off.
	CoalesceLimit int64
	// UpstreamTimeout bounds the wait for an upstream's response header
	// once a request is sent; without a header by then the client gets
	// 504. Default DefaultUpstreamTimeout.
	UpstreamTimeout time.Duration
	// ReadTimeout bounds reading a request's body, from the end of its
	// header (which has 10 s, or ReadTimeout if shorter); a slower body
	// gets 408 and its connection is closed. Default DefaultReadTimeout.
	ReadTimeout time.Duration
	// MaxUnauthenticated bounds, when Keys are configured, the
	// connections that have not yet presented a valid client key; Serve
	// closes new connections beyond it with a 503. Without keys there is
	// no such bound (see MaxPendingPerAddress). Default
	// DefaultMaxUnauthenticated.
	MaxUnauthenticated int
	// MaxPendingPerAddress bounds the connections from one client
	// address that have not yet sent a request (with Keys: presented a
	// valid key): beyond it, each new connection from the address makes
	// Serve close the oldest of them that has waited a second or more
	// (any, at four times the bound). Default DefaultMaxPendingPerAddress.
	MaxPendingPerAddress int
	// MaxPassThrough bounds how many client tokens are tracked at once
	// (default DefaultMaxPassThrough); the least recently used are
	// forgotten.
	MaxPassThrough int
	// PassThroughRefusal is how long a pass-through token the provider
	// rejected (401) is refused by the gateway itself, rather than sent
	// again. Default DefaultPassThroughRefusal; negative never refuses.
	PassThroughRefusal time.Duration
	// PublicURL is the gateway's address as clients see it, used to
	// rewrite Link and Location headers that point at an upstream;
	// default: http:// plus the request's Host.
	PublicURL string
	// RefreshEvery makes Serve read the providers' free status endpoints
	// (GitHub's /rate_limit; transport.ReadQuota) with every usable
	// credential at this interval, so the dashboard shows buckets no
	// request touched lately; 0 never does. Nothing goes out at start,
	// and nothing that counts against a quota ever: owners are learnt
	// from the answers to clients' requests, and a rejected token from
	// its first 401.
	RefreshEvery time.Duration
	// ShutdownTimeout bounds how long Serve lets in-flight requests
	// finish once its context ends. Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Registry receives the gateway's and the transport's metrics and is
	// served at /metrics; nil means a new registry with the Go and
	// process collectors.
	Registry *prometheus.Registry
	// Logger receives the gateway's logs (never a token or key); nil
	// discards them.
	Logger *slog.Logger
	// Now is the clock of the dashboard, the history, Retry-After, the
	// requests' deadlines and pass-through refusals; nil means time.Now.
	// The transport's clock is set with Client.Tune (transport.Options.Now).
	Now func() time.Time
}

// Gateway is an http.Handler that serves the proxy routes /NAME/... and
// the endpoints /, /healthz, /readyz, /metrics and /status. Build it with New, serve
// it with Serve (or any http.Server), and Close it at the end.
type Gateway struct {
	opts      Options
	main      *transport.Transport
	pt        *passThrough
	routes    map[string]*provider.Provider
	bases     map[string]*url.URL
	names     []string
	hosts     map[string]*provider.Provider
	proxy     *httputil.ReverseProxy
	flights   *flightGroup
	history   *History
	metrics   *metrics
	registry  *prometheus.Registry
	promHTTP  http.Handler
	dashboard *template.Template
	log       *slog.Logger
	now       func() time.Time
	maxWait   time.Duration            // the client options' max wait
	maxWaits  map[string]time.Duration // per provider: the longest a request waits for quota
	onEvent   func(transport.Event)    // the history's and the client options' event handler
	maxBody   int64
	started   time.Time

	upstreamTimeout time.Duration
	readTimeout     time.Duration
	conns           *connLimiter
	refusals        *refusalLog
	tracing         gatewayTracing
}

// New builds a gateway. It fails on what the client options reject (a bad
// base URL, policy or token, an unreachable database), an unknown provider
// in Providers or Hosts, or a provider named like an endpoint.
func New(opts Options) (*Gateway, error) {
	g := withDefaults(opts)
	g.tracing = newGatewayTracing(opts.Client)
	built, err := g.newTransport(opts.Client)
	if err != nil {
		return nil, err
	}
	if err := g.routeProviders(); err != nil {
		g.main.Close()
		return nil, err
	}
	if opts.PassThrough {
		g.pt = newPassThrough(built, g.main, opts.MaxPassThrough, g.passThroughRefusal(), g.now)
	}
	if opts.CoalesceLimit >= 0 {
		limit := opts.CoalesceLimit
		if limit == 0 {
			limit = DefaultCoalesceLimit
		}
		g.flights = newFlightGroup(limit)
	}
	if err := g.serveEndpoints(); err != nil {
		g.main.Close()
		return nil, err
	}
	g.started = g.now()
	return g, nil
}

// withDefaults makes a gateway of opts with every default filled in: the
// clock, the logger, the size and time limits, the metrics registry.
func withDefaults(opts Options) *Gateway {
	g := &Gateway{opts: opts, history: &History{}, routes: map[string]*provider.Provider{}, bases: map[string]*url.URL{}, hosts: map[string]*provider.Provider{}}
	g.now = opts.Now
	if g.now == nil {
		g.now = time.Now
	}
	g.log = opts.Logger
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.maxBody = opts.MaxBody
	if g.maxBody <= 0 {
		g.maxBody = DefaultMaxBody
	}
	g.upstreamTimeout = opts.UpstreamTimeout
	if g.upstreamTimeout <= 0 {
		g.upstreamTimeout = DefaultUpstreamTimeout
	}
	g.readTimeout = opts.ReadTimeout
	if g.readTimeout <= 0 {
		g.readTimeout = DefaultReadTimeout
	}
	if opts.ShutdownTimeout <= 0 {
		g.opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	g.refusals = newRefusalLog(g.log, g.refusalWhy)
	all, perAddress := connBounds(opts)
	g.conns = newConnLimiter(all, perAddress, func(reason, addr string) {
		g.metrics.connections.WithLabelValues(reason).Inc()
		g.refusals.add(reason, addr)
	})
	g.registry = opts.Registry
	if g.registry == nil {
		g.registry = prometheus.NewRegistry()
		g.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return g
}

// connBounds returns the bound on pending connections in all (only with
// client keys; 0 without) and per client address.
func connBounds(opts Options) (all, perAddress int) {
	if opts.Keys.Len() > 0 {
		all = opts.MaxUnauthenticated
		if all <= 0 {
			all = DefaultMaxUnauthenticated
		}
	}
	perAddress = opts.MaxPendingPerAddress
	if perAddress <= 0 {
		perAddress = DefaultMaxPendingPerAddress
	}
	return all, perAddress
}

// routeProviders sets up the routes: /NAME/ for each served provider, and
// the Host header routes.
func (g *Gateway) routeProviders() error {
	reg := g.main.Registry()
	names := g.opts.Providers
	if len(names) == 0 {
		names = reg.Names()
	}
	for _, name := range names {
		p, err := reg.Get(name)
		if err != nil {
			return err
		}
		if slices.Contains(reservedNames, p.Name) {
			return fmt.Errorf("provider %q: the gateway serves its own endpoint at /%s; rename the provider", p.Name, p.Name)
		}
		g.routes[p.Name] = p
		g.bases[p.Name] = p.BaseURL()
	}
	for n := range g.routes {
		g.names = append(g.names, n)
	}
	slices.Sort(g.names)
	for host, name := range g.opts.Hosts {
		p := g.routes[provider.CanonicalName(name)]
		if p == nil {
			return fmt.Errorf("host route %s=%s: provider %q is not served; served providers: %s", host, name, name, strings.Join(g.names, ", "))
		}
		h := strings.ToLower(strings.TrimSpace(host))
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh
		}
		if h == "" {
			return fmt.Errorf("host route =%s: the host is empty; write HOST=PROVIDER such as api.github.local=github", name)
		}
		g.hosts[h] = p
	}
	return nil
}

// serveEndpoints builds what answers: the metrics, /metrics, the reverse
// proxy and the dashboard.
func (g *Gateway) serveEndpoints() error {
	var err error
	g.metrics, err = newMetrics(g.registry, func() float64 {
		if g.pt == nil {
			return 0
		}
		return float64(g.pt.len())
	}, func() float64 { return float64(g.conns.unauthenticated()) })
	if err != nil {
		return fmt.Errorf("gateway metrics: %w", err)
	}
	g.promHTTP = promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelWarn)})
	g.proxy = &httputil.ReverseProxy{
		Rewrite:        g.rewrite,
		Transport:      proxyTransport{g},
		ModifyResponse: g.modifyResponse,
		ErrorHandler:   g.proxyError,
		BufferPool:     bufferPool{},
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	g.dashboard, err = parseDashboard()
	return err
}

// newTransport builds the gateway's own rate-keeping transport from the
// client options, and returns the options it was built with, from which
// pass-through transports are built alike. The gateway waits for quota
// itself (see send), so the transports get a max wait of a nanosecond,
// no resends after server errors (the gateway cannot tell how long those
// would take; the client gets the upstream's answer and decides), and the
// upstream wrapper as their base.
func (g *Gateway) newTransport(client wiring.Options) (transport.Options, error) {
	if client.MaxWait <= 0 {
		client.MaxWait = DefaultMaxWait
	}
	if client.Registerer == nil {
		client.Registerer = g.registry
	}
	if client.Base == nil {
		client.Base = newUpstreamTransport(g.upstreamTimeout)
	}
	if client.Logger == nil {
		client.Logger = g.opts.Logger
	}
	userEvent := client.OnEvent
	g.onEvent = func(e transport.Event) {
		switch e.Kind {
		case transport.EventWaited:
			g.history.Add(g.now(), func(m *Minute) { m.Waits++; m.WaitSeconds += e.Wait.Seconds() })
		case transport.EventServedFromCache:
			g.history.Add(g.now(), func(m *Minute) { m.Cached++ })
		}
		if userEvent != nil {
			userEvent(e)
		}
	}
	client.OnEvent = g.onEvent
	to, err := wiring.Build(client)
	if err != nil {
		return to, err
	}
	// Pass-through transports share the state, cache and providers Build
	// made with the gateway's own transport. The gateway serves many
	// clients: its cache is a shared one (s-maxage; private answers only
	// to the client key and owner that received them).
	if to.Cache == nil && !to.DisableCache {
		to.Cache = cache.New(cache.Options{Logger: to.Logger})
	}
	to.Cache = to.Cache.Shared()
	g.maxWait = to.MaxWait
	if g.maxWaits, to.Providers, err = gatewayWaits(to.Providers, to.MaxWait); err == nil {
		to.MaxWait = transportMaxWait
		to.CallerMaxWait = g.maxWaits // the horizon of the answers' pool fields
		to.MaxRetries = -1
		to.Base = upstream{base: to.Base, timeout: g.upstreamTimeout}
		// With pass-through, clients' tokens learn their owners by
		// asking (alone in their pools, nothing else can tell); the
		// gateway's own tokens ask too, so that a client token and a
		// configured token of one account share one bucket.
		to.AskOwnerFirst = to.AskOwnerFirst || g.opts.PassThrough
		g.main, err = transport.New(to)
	}
	if err != nil && to.OnClose != nil {
		to.OnClose()
	}
	return to, err
}

// newUpstreamTransport is the connection pool to the upstreams: enough
// idle connections per host for a busy gateway, and a bound on the wait
// for each response header.
func newUpstreamTransport(headerTimeout time.Duration) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 512
	t.MaxIdleConnsPerHost = 128
	t.ResponseHeaderTimeout = headerTimeout
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return t
}

// Close releases the transport's resources (a shared database), and logs
// the refusals not logged yet.
func (g *Gateway) Close() error {
	g.refusals.close()
	return g.main.Close()
}

// Transport returns the gateway's own rate-keeping transport. It waits for
// no quota (the gateway does): a request that would wait gets a
// *transport.WaitError at once.
func (g *Gateway) Transport() *transport.Transport { return g.main }

// Providers returns the names of the served providers, sorted.
func (g *Gateway) Providers() []string { return slices.Clone(g.names) }

// History returns the per-minute counts of the last hour, oldest first.
func (g *Gateway) History() []Minute { return g.history.Last(g.now()) }

// Report is what /status serves: transport.StatusReport for the served
// providers (or only those named), with the pass-through credentials after
// the configured ones. It sends nothing upstream.
func (g *Gateway) Report(ctx context.Context, only ...string) (transport.StatusReport, error) {
	var sel []string
	for _, name := range only {
		if p := g.routes[provider.CanonicalName(name)]; p != nil {
			sel = append(sel, p.Name)
		}
	}
	if len(only) == 0 {
		sel = g.names
	} else if len(sel) == 0 {
		return transport.StatusReport{GeneratedAt: g.now().UTC(), Providers: []transport.ProviderSummary{}, Credentials: []transport.CredentialStatus{}}, nil
	}
	now := g.now()
	rep, err := g.main.Report(ctx, now, sel...)
	if err != nil {
		return rep, err
	}
	if g.pt != nil {
		extra, err := g.pt.status(ctx, now, sel)
		if err != nil {
			return rep, err
		}
		rep.Credentials = append(rep.Credentials, extra...)
		g.main.Summarize(&rep, sel...) // the pass-through tokens count too
	}
	return rep, nil
}

// route is what the gateway decided about one proxied request; it travels
// in the request's context from ServeHTTP to the transport and back.
type route struct {
	p        *provider.Provider
	upstream *url.URL
	rt       http.RoundTripper
	identity string // "" for the gateway's credentials, a token digest with pass-through
	// principal is who the answer is for within its owner, for the cache
	// (cache.WithPrincipal): the client key's name, when keys are set.
	principal string
	keep      string // the credential header forwarded (pass-through), or ""
	public    string // the route's root as clients see it
	body      []byte // the request body, read whole
	hasBody   bool
	passed    bool     // the client's token is used
	token     tokenKey // with passed: the digest of the client's token
	shared    bool     // the answer was another request's (coalesced)
	maxWait   time.Duration
	deadline  time.Time     // the wait for quota ends by then
	waited    time.Duration // the gateway's own waits for quota, so far
}

type routeKey struct{}

func routeOf(ctx context.Context) *route {
	r, _ := ctx.Value(routeKey{}).(*route)
	return r
}

// ServeHTTP checks the request target, then serves a gateway endpoint or
// proxies to a provider.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.opts.Keys.Len() == 0 {
		authenticated(r) // there is nothing more to show
	}
	if mayHaveBody(r) {
		// Whatever reads the body, the proxy route or net/http after a
		// refusal, reads it by then.
		setReadDeadline(w, time.Now().Add(g.readTimeout))
	}
	raw := r.RequestURI
	if raw == "" {
		// A request built in process rather than read from a connection.
		raw = r.URL.RequestURI()
	}
	tgt, rerr := parseTarget(raw)
	if rerr != nil {
		g.reject(w, rerr)
		return
	}
	if len(g.hosts) > 0 {
		host := strings.ToLower(r.Host)
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if p := g.hosts[host]; p != nil {
			g.serveProxy(w, r, p, tgt.path, tgt.query, g.publicBase(r))
			return
		}
	}
	switch {
	case tgt.path == PathDashboard:
		g.serveDashboard(w, r)
		return
	case tgt.path == PathHealth:
		g.serveHealth(w, r)
		return
	case tgt.path == PathReady:
		probes.Ready(g.Ready).ServeHTTP(w, r)
		return
	case tgt.path == PathMetrics:
		g.serveMetrics(w, r)
		return
	case tgt.path == PathStatus:
		g.serveStatus(w, r, tgt.query)
		return
	case strings.HasPrefix(tgt.path, PathAssets):
		serveAsset(w, r, strings.TrimPrefix(tgt.path, PathAssets))
		return
	}
	name, rel := splitRoute(tgt.path)
	p := g.routes[provider.CanonicalName(name)]
	if p == nil {
		if !g.authorized(w, r, true, "Bearer", nil) {
			return
		}
		g.reject(w, &requestError{status: http.StatusNotFound, code: "unknown_provider",
			msg: fmt.Sprintf("unknown provider %q in the path; this gateway serves %s (as /NAME/...)", truncate(name, 64), g.routeList())})
		return
	}
	g.serveProxy(w, r, p, rel, tgt.query, g.publicBase(r)+"/"+p.Name)
}

func (g *Gateway) routeList() string {
	var b strings.Builder
	for i, n := range g.names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("/" + n + "/")
	}
	if b.Len() == 0 {
		return "no provider"
	}
	return b.String()
}

func (g *Gateway) publicBase(r *http.Request) string {
	if g.opts.PublicURL != "" {
		return strings.TrimSuffix(g.opts.PublicURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// serveProxy answers a request for provider p at the escaped path rel
// below its base URL.
func (g *Gateway) serveProxy(w http.ResponseWriter, r *http.Request, p *provider.Provider, rel, rawQuery, public string) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	ri := &route{p: p, public: public, rt: g.main}
	r, span := g.startServer(r, p)
	g.metrics.inFlight.Inc()
	defer func() {
		g.metrics.inFlight.Dec()
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		endServer(span, code, ri)
		g.metrics.requests.WithLabelValues(p.Name, statusLabel(code)).Inc()
		g.metrics.duration.WithLabelValues(p.Name).Observe(time.Since(start).Seconds())
		if ri.shared {
			g.metrics.coalesced.WithLabelValues(p.Name).Inc()
		}
		g.history.Add(g.now(), func(m *Minute) {
			m.Requests++
			if code == http.StatusTooManyRequests && sw.refused {
				m.Refused++
			}
			if ri.shared {
				m.Coalesced++
			}
		})
		if g.log.Enabled(r.Context(), slog.LevelDebug) {
			g.log.Debug("request", "method", r.Method, "provider", p.Name, "path", rel, "status", code, "duration", time.Since(start), "coalesced", ri.shared)
		}
	}()

	name, ok := g.client(sw, r, !g.opts.PassThrough, "Bearer", p)
	if !ok {
		return
	}
	if name != "" {
		// A private answer stored for one client is served from the
		// cache to that client alone (see cache.WithPrincipal).
		ri.principal = "client:" + name
	}
	if rerr := g.checkRequest(r, p, rel, rawQuery); rerr != nil {
		g.reject(sw, rerr)
		return
	}
	if g.pt != nil {
		if rerr := g.passThroughRoute(r, p, ri); rerr != nil {
			g.reject(sw, rerr)
			return
		}
	}
	if rerr := g.readBody(sw, r, ri); rerr != nil {
		g.reject(sw, rerr)
		return
	}
	u, err := upstreamURL(g.bases[p.Name], rel, rawQuery)
	if err != nil {
		g.reject(sw, badRequest("bad_escape", "path is not valid percent-encoding"))
		return
	}
	ri.upstream = u
	// The wait for quota starts now that the request is read.
	ri.maxWait = g.maxWaits[p.Name]
	ri.deadline = g.now().Add(ri.maxWait)
	// A database outage is waited out like quota, within the same max
	// wait (see proxyError's 503).
	ctx := store.WithWaitLimit(context.WithValue(r.Context(), routeKey{}, ri), ri.deadline)
	if ri.principal != "" {
		ctx = cache.WithPrincipal(ctx, ri.principal)
	}
	g.proxy.ServeHTTP(sw, r.WithContext(ctx))
}

// passThroughRoute sends the request with the client's own token when it
// brought one: it checks the token's form, refuses a token the provider
// rejected lately, and picks the token's transport.
func (g *Gateway) passThroughRoute(r *http.Request, p *provider.Provider, ri *route) *requestError {
	v := r.Header.Get(p.Auth.Header)
	if v == "" {
		return nil
	}
	tok, rerr := tokenOf(p, v)
	if rerr != nil {
		return rerr
	}
	keep := http.CanonicalHeaderKey(p.Auth.Header)
	for _, k := range credentialHeaders {
		if k != keep && r.Header.Get(k) != "" {
			return badRequest("two_credentials", "with pass-through, provider %s takes the token in %s only; remove the %s header", p.Name, keep, k)
		}
	}
	key := newTokenKey(p, tok)
	if until, refused := g.pt.refusedUntil(key); refused {
		return tokenRefused(p, until, g.now())
	}
	t, id, err := g.pt.get(p, key, tok)
	if err != nil {
		return &requestError{status: http.StatusInternalServerError, code: "pass_through", msg: err.Error()}
	}
	ri.rt, ri.identity, ri.keep, ri.passed, ri.token = t, id, keep, true, key
	return nil
}

// checkRequest refuses what the gateway does not forward.
func (g *Gateway) checkRequest(r *http.Request, p *provider.Provider, rel, rawQuery string) *requestError {
	switch r.Method {
	case http.MethodConnect, http.MethodTrace:
		return &requestError{status: http.StatusMethodNotAllowed, code: "method", msg: fmt.Sprintf("method %s is not forwarded; use GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS", r.Method)}
	}
	if r.Header.Get("Upgrade") != "" {
		return badRequest("upgrade", "protocol upgrades (WebSocket, h2c) are not forwarded")
	}
	if rerr := checkSegments(p, rel); rerr != nil {
		return rerr
	}
	return checkQuery(p, rawQuery)
}

// readBody reads the request body whole, up to the limit, so that the
// transport can send it again after a rate-limit refusal. The body must
// arrive within the read timeout, counted from the end of the header
// (ServeHTTP set the deadline). A body that is refused leaves the
// connection closed: what remains of it is not read.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, ri *route) *requestError {
	tooLarge := &requestError{status: http.StatusRequestEntityTooLarge, code: "body_too_large",
		msg: fmt.Sprintf("request body is larger than the gateway's limit of %d bytes (--max-body); send a smaller one, or raise --max-body on the gateway", g.maxBody)}
	if !mayHaveBody(r) {
		return nil
	}
	if r.ContentLength > g.maxBody {
		w.Header().Set("Connection", "close")
		return tooLarge
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, g.maxBody+1))
	switch {
	case err != nil && isDeadline(err):
		w.Header().Set("Connection", "close")
		return &requestError{status: http.StatusRequestTimeout, code: "body_timeout",
			msg: fmt.Sprintf("the request body did not arrive within %s (--read-timeout); send the whole body at once, or raise --read-timeout on the gateway", shortDuration(g.readTimeout))}
	case err != nil:
		w.Header().Set("Connection", "close")
		return badRequest("body_read", "reading the request body: %v", err)
	case int64(len(b)) > g.maxBody:
		w.Header().Set("Connection", "close")
		return tooLarge
	}
	// The body is in: no read deadline while the request waits for quota
	// (see setReadDeadline).
	setReadDeadline(w, time.Time{})
	ri.body, ri.hasBody = b, len(b) > 0
	return nil
}

// authorized checks the client's key when keys are configured, and writes
// the 401 when it is missing or wrong. alsoAuth lets the Authorization
// header (or p's auth header, for a proxy route) carry the key.
func (g *Gateway) authorized(w http.ResponseWriter, r *http.Request, alsoAuth bool, scheme string, p *provider.Provider) bool {
	_, ok := g.client(w, r, alsoAuth, scheme, p)
	return ok
}

// client is authorized returning the client's name too ("" when no keys
// are configured).
func (g *Gateway) client(w http.ResponseWriter, r *http.Request, alsoAuth bool, scheme string, p *provider.Provider) (string, bool) {
	if g.opts.Keys.Len() == 0 {
		return "", true
	}
	header, prefix := "", ""
	if p != nil {
		header, prefix = p.Auth.Header, p.Auth.Prefix
	}
	key := presentedKey(r.Header, alsoAuth, header, prefix)
	if name, ok := g.opts.Keys.Lookup(key); ok {
		authenticated(r)
		return name, true
	}
	err := errBadKey
	if key == "" {
		err = errNoKey
	}
	// A client without a valid key does not keep its connection (nor its
	// place among the unauthenticated ones), and its body is not read.
	w.Header().Set("Connection", "close")
	w.Header().Set("WWW-Authenticate", scheme+` realm="ratekeeper gateway"`)
	g.reject(w, &requestError{status: http.StatusUnauthorized, code: "client_key", msg: err.Error()})
	return "", false
}

// rewrite turns the client's request into the upstream request.
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	ri := routeOf(pr.In.Context())
	pr.Out.URL = ri.upstream
	pr.Out.Host = ""
	h := pr.Out.Header
	h.Del(HeaderKey)
	stripCredentials(h, ri.p, ri.keep)
	if ri.hasBody {
		body := ri.body
		pr.Out.Body = io.NopCloser(bytes.NewReader(body))
		pr.Out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		pr.Out.ContentLength = int64(len(body))
		pr.Out.TransferEncoding = nil
	} else {
		pr.Out.Body = nil
		pr.Out.GetBody = nil
		pr.Out.ContentLength = 0
	}
}

// proxyTransport sends upstream requests, coalescing identical GETs.
type proxyTransport struct{ g *Gateway }

func (pt proxyTransport) RoundTrip(out *http.Request) (*http.Response, error) {
	g := pt.g
	ri := routeOf(out.Context())
	if g.flights == nil || out.Method != http.MethodGet || out.Body != nil {
		return g.send(out)
	}
	key := coalesceKey(ri.p.Name, ri.identity+"\x00"+ri.principal, out.URL.String(), out.Header)
	resp, shared, err := g.flights.do(out, key, g.send)
	var qe *quotaError
	if shared && errors.As(err, &qe) && !qe.Until.After(ri.deadline) {
		// The request joined another whose wait had to end sooner than
		// its own does: it waits on its own.
		resp, err = g.send(out)
		shared = false
	}
	if shared {
		ri.shared = true
		if resp != nil {
			resp.Header.Set(HeaderCoalesced, "shared")
		}
	}
	return resp, err
}

// modifyResponse points Link and Location headers that name the upstream
// back at the gateway, so that following pagination or a redirect stays
// on the gateway (and on its credentials and quota accounting).
func (g *Gateway) modifyResponse(resp *http.Response) error {
	var ri *route
	if resp.Request != nil {
		ri = routeOf(resp.Request.Context())
	}
	if ri == nil {
		return nil
	}
	if ri.passed && resp.StatusCode == http.StatusUnauthorized {
		g.pt.rejected(ri.token)
	}
	base := g.bases[ri.p.Name]
	if links := resp.Header.Values("Link"); len(links) > 0 {
		out := make([]string, len(links))
		for i, l := range links {
			out[i] = rewriteLinks(l, base, ri.public)
		}
		resp.Header["Link"] = out
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		if u, ok := rewriteURL(loc, base, ri.public); ok {
			resp.Header.Set("Location", u)
		}
	}
	return nil
}

// rewriteLinks rewrites every <URL> of a Link header value.
func rewriteLinks(v string, base *url.URL, public string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(v, '<')
		if i < 0 {
			break
		}
		j := strings.IndexByte(v[i:], '>')
		if j < 0 {
			break
		}
		b.WriteString(v[:i+1])
		target := v[i+1 : i+j]
		if u, ok := rewriteURL(target, base, public); ok {
			target = u
		}
		b.WriteString(target)
		b.WriteByte('>')
		v = v[i+j+1:]
	}
	b.WriteString(v)
	return b.String()
}

// rewriteURL maps a URL under the provider's base URL to the same path
// under public; other URLs are left alone.
func rewriteURL(raw string, base *url.URL, public string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", false
	}
	u = base.ResolveReference(u)
	if !strings.EqualFold(u.Scheme, base.Scheme) || !strings.EqualFold(u.Host, base.Host) {
		return "", false
	}
	bp, up := base.EscapedPath(), u.EscapedPath()
	if up != bp && !strings.HasPrefix(up, bp+"/") {
		return "", false
	}
	rel := strings.TrimPrefix(up, bp)
	if rel == "" {
		rel = "/"
	}
	out := public + rel
	if u.RawQuery != "" {
		out += "?" + u.RawQuery
	}
	return out, true
}

// statusWriter remembers the status sent, for metrics.
type statusWriter struct {
	http.ResponseWriter
	code    int
	refused bool // a 429 for quota beyond the max wait
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush on the real writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func statusLabel(code int) string {
	if code == statusClientClosed {
		return "client_closed"
	}
	return fmt.Sprint(code)
}

// bufferPool recycles the 32 KiB buffers ReverseProxy copies bodies with.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *(buffers.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
