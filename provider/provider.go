package provider

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"
)

// Auth says how a token travels in a request.
type Auth struct {
	// Header is the request header that carries the token, such as
	// "Authorization" or GitLab's "PRIVATE-TOKEN".
	Header string
	// Prefix goes before the token, separated by one space: "Bearer" or
	// Gitea's "token". Empty sends the token alone.
	Prefix string
}

// Limits are what to assume when a server says nothing, and how the client
// spends the quota of this provider. Zero values mean "the client's default"
// unless a field says otherwise.
type Limits struct {
	// DefaultLimit requests per DefaultWindow are assumed for a bucket whose
	// server has sent no rate-limit headers. Every kind starts at 60 per
	// minute: slow enough to be safe anywhere, fast enough to be usable.
	DefaultLimit  int
	DefaultWindow time.Duration
	// Policy names the pacing policy: "" (the client's default), "spread",
	// "adaptive" or "greedy". It is validated here and interpreted by the
	// pacing code.
	Policy string
	// Reserve is the number of requests per bucket the client keeps back for
	// other uses, or ReservePercent the percentage of each bucket's own limit
	// (in [0, 100)); at most one is set, and 0 keeps none back (the client's
	// default applies). A count must stay below every bucket's limit: a
	// request to a bucket it would take whole fails saying so.
	Reserve        int
	ReservePercent float64
	// Velocity, MinInterval, MaxInterval and Burst tune the pacing policy
	// (see quota.Policy: Velocity, MinDelay, MaxDelay, Burst); 0 means the
	// client's default.
	Velocity                 float64
	MinInterval, MaxInterval time.Duration
	Burst                    int
	// MaxWait caps a single wait for quota; 0 means the client's default.
	MaxWait time.Duration
	// MaxPause caps every pause a server's answer can impose on a bucket
	// or an owner (a Retry-After, a secondary penalty); 0 means the
	// client's default (an hour).
	MaxPause time.Duration
}

// Secondary holds the limits a server enforces besides the per-bucket quota.
// GitHub documents them (concurrency, points per endpoint per minute, content
// creation); for the other kinds only a concurrency cap applies by default.
// Zero disables a rule.
type Secondary struct {
	// MaxConcurrency caps requests in flight per owner. GitHub allows 100;
	// the default of 20 stays well clear of it. The client starts a new
	// owner lower and learns from refusals how many the server tolerates,
	// never going above this.
	MaxConcurrency int
	// Wait is the first pause after a secondary refusal that does not say
	// when to come back (no Retry-After); it doubles, with jitter, at each
	// new strike. 0 means the client's default, GitHub's documented minute.
	Wait time.Duration
	// BareWait is the first pause of the refused bucket or scope after a
	// bare refusal — one that states nothing of any quota and names no
	// time, as a proxy's or an abuse filter's 429 page — doubling while
	// they repeat. GitHub asks for at least a minute; 0 means the
	// backoff of unannounced limits (1 s).
	BareWait time.Duration
	// WriteSpacing is the least time between two writes
	// (POST/PATCH/PUT/DELETE) of one owner. GitHub asks for at least 1 s.
	WriteSpacing time.Duration
	// ReadPoints and WritePoints are what a read (GET/HEAD/OPTIONS) and a
	// write cost against the per-endpoint point budgets.
	ReadPoints, WritePoints int
	// EndpointPointsPerMinute is the point budget per REST endpoint per
	// minute (GitHub: 900); GraphQLPointsPerMinute the budget of the GraphQL
	// endpoint (GitHub: 2,000).
	EndpointPointsPerMinute int
	GraphQLPointsPerMinute  int
	// ContentCreationPerMinute and ContentCreationPerHour cap requests that
	// create content (GitHub: 80 per minute and 500 per hour).
	ContentCreationPerMinute int
	ContentCreationPerHour   int
}

// AppConfig describes a GitHub App whose installations are used as
// credentials; package creds mints and refreshes their tokens.
type AppConfig struct {
	AppID           int64
	PrivateKeyFile  string
	InstallationIDs []int64
}

// Provider is one API endpoint family and everything known about it. Build
// one with [New] (or get it from a [Registry]); the exported fields may be
// adjusted before the provider is shared, and must not change afterwards.
type Provider struct {
	Name      string
	Kind      Kind
	TokenEnv  []string // environment variables holding comma-separated tokens, read in order
	Auth      Auth
	Limits    Limits
	Secondary Secondary
	App       *AppConfig // GitHub App installations to use as credentials; nil for none
	// EndpointLimits are limits the user knows and the server does not
	// announce, in the config file's order: the first whose pattern
	// matches a request paces it (see [Provider.ScopeOf]).
	EndpointLimits []EndpointLimit

	api         API      // what is known of Kind
	base        *url.URL // API root, normalised
	graphql     *url.URL // GitHub GraphQL endpoint; nil for other kinds
	web         *url.URL // where repository web pages live; nil when unknown
	webExplicit bool     // web was configured, not derived
	owned       []prefix // base first, then extra owned roots (GHES GraphQL)
	webPrefix   *prefix
}

// Default limits shared by every kind: 60 requests per minute.
const (
	DefaultLimit  = 60
	DefaultWindow = time.Minute
)

// New returns a provider of the given kind (or an alias of it) with that
// kind's defaults, rooted at baseURL (see [ParseBaseURL] for what is
// accepted). The name is lower-cased ("hf" becomes "huggingface") and may
// contain letters, digits, '-', '_' and '.'.
func New(name string, kind Kind, baseURL string) (*Provider, error) {
	name = CanonicalName(name)
	if !validName(name) {
		return nil, fmt.Errorf("provider name %q may contain only letters, digits, '-', '_' and '.', starting with a letter or digit", name)
	}
	api, ok := lookupAPI(string(kind))
	if !ok {
		return nil, fmt.Errorf("unknown kind %q; known kinds: %s", kind, KnownKinds())
	}
	p := &Provider{
		Name:      name,
		Kind:      api.Kind(),
		Auth:      api.Auth(),
		Limits:    Limits{DefaultLimit: DefaultLimit, DefaultWindow: DefaultWindow},
		Secondary: api.Secondary(),
		api:       api,
	}
	if err := p.SetBaseURL(baseURL); err != nil {
		return nil, err
	}
	p.TokenEnv = p.defaultTokenEnv()
	return p, nil
}

// defaultTokenEnv is the list of token variables the provider's API gives
// it, which follows its base URL for a generic provider.
func (p *Provider) defaultTokenEnv() []string { return p.api.TokenEnv(p.Name, p.base) }

// SetBaseURL moves the provider to a new API root and re-derives the URLs that
// follow from it (GitHub's GraphQL endpoint, the web root), keeping a web root
// that was set with [Provider.SetWebURL].
func (p *Provider) SetBaseURL(raw string) error {
	base, err := ParseBaseURL(raw)
	if err != nil {
		return err
	}
	p.base = base
	p.owned = []prefix{newPrefix(base)}
	p.graphql = p.api.GraphQLURL(base)
	if p.graphql != nil {
		if _, under := p.owned[0].match(p.graphql); !under {
			p.owned = append(p.owned, newPrefix(p.graphql))
		}
	}
	if !p.webExplicit {
		p.web = p.api.WebURL(base)
		p.webPrefix = nil
		if p.web != nil {
			wp := newPrefix(p.web)
			p.webPrefix = &wp
		}
	}
	return nil
}

// SetWebURL sets where the provider's repository pages live (github.com for
// api.github.com), used to turn a repository's web URL into an API request.
// It overrides the root derived from the base URL.
func (p *Provider) SetWebURL(raw string) error {
	web, err := ParseBaseURL(raw)
	if err != nil {
		return fmt.Errorf("web URL: %w", err)
	}
	p.web, p.webExplicit = web, true
	wp := newPrefix(web)
	p.webPrefix = &wp
	return nil
}

// BaseURL returns a copy of the API root, such as https://api.github.com or
// https://ghe.example.com/api/v3, without a trailing slash.
func (p *Provider) BaseURL() *url.URL { return clone(p.base) }

// GraphQLURL returns a copy of the API's GraphQL endpoint (GitHub's), or
// nil for an API without one.
func (p *Provider) GraphQLURL() *url.URL { return clone(p.graphql) }

// WebURL returns a copy of the root of the provider's repository web pages,
// or nil when unknown.
func (p *Provider) WebURL() *url.URL { return clone(p.web) }

// Bases returns copies of every URL root the provider owns: the base URL
// first, then any extra root (GitHub Enterprise Server's /api/graphql).
func (p *Provider) Bases() []*url.URL {
	out := make([]*url.URL, len(p.owned))
	for i, o := range p.owned {
		out[i] = o.url()
	}
	return out
}

// Owns reports whether u lies under one of the provider's roots, so that a
// token of this provider may be sent to it. Ask it for every hop of a
// request: a redirect elsewhere must lose the token.
func (p *Provider) Owns(u *url.URL) bool {
	_, ok := p.matchLen(u)
	return ok
}

// matchLen returns the length of the longest owned root that is a prefix of
// u, for longest-prefix matching across providers.
func (p *Provider) matchLen(u *url.URL) (int, bool) {
	best, found := -1, false
	if u == nil {
		return best, false
	}
	for _, o := range p.owned {
		if n, ok := o.match(u); ok && n > best {
			best, found = n, true
		}
	}
	return best, found
}

// relPath returns u's escaped path (as sent) below the owned root that
// matches it: "/user" for https://api.github.com/user, "/graphql" for
// GHES's /api/graphql, "/projects/group%2Fproject/issues" for GitLab's
// issues of group/project. A URL the provider does not own yields its
// whole path. It is escaped because servers route on it: an encoded slash
// belongs to its segment (see [Pattern]).
func (p *Provider) relPath(u *url.URL) string {
	clean := cleanPath(u.EscapedPath())
	if p.graphql != nil && len(p.owned) > 1 {
		if _, ok := p.owned[1].match(u); ok {
			return "/graphql" + strings.TrimPrefix(clean, p.owned[1].escaped)
		}
	}
	if _, ok := p.owned[0].match(u); ok {
		rel := strings.TrimPrefix(clean, p.owned[0].escaped)
		if rel == "" {
			rel = "/"
		}
		return rel
	}
	return clean
}

// Authorize sets the provider's auth header on h to carry token. An empty
// token (anonymous access) leaves h unchanged. It does not check the
// request's URL: call it only for URLs the provider [Provider.Owns].
func (p *Provider) Authorize(h http.Header, token string) {
	if token == "" {
		return
	}
	v := token
	if p.Auth.Prefix != "" {
		v = p.Auth.Prefix + " " + token
	}
	h.Set(p.Auth.Header, v)
}

// Deauthorize removes the provider's auth header from h, for a hop to a URL
// the provider does not own.
func (p *Provider) Deauthorize(h http.Header) { h.Del(p.Auth.Header) }

// SupportsApps reports whether GitHub App installations can be the
// provider's credentials (a github-kind provider).
func (p *Provider) SupportsApps() bool { return p.api.AppInstallations() }

// AllowsEncodedSlashes reports whether the provider's API uses encoded
// slashes (%2F) within one path segment, as GitLab's project paths do.
func (p *Provider) AllowsEncodedSlashes() bool { return p.api.EncodedSlashes() }

// TokenParams lists the query parameters that carry a token to the
// provider's API (GitLab's private_token, Gitea's token, …).
func (p *Provider) TokenParams() []string { return slices.Clone(p.api.TokenParams()) }

// String returns "name (kind, base URL)".
func (p *Provider) String() string {
	return fmt.Sprintf("%s (%s, %s)", p.Name, p.Kind, p.base)
}

// ParseBaseURL validates and normalises a provider's base URL: the scheme must
// be http or https, a host must be present, and there may be no user
// information, query or fragment. Scheme and host are lower-cased, dot
// segments and trailing slashes removed. Errors never repeat a password that
// was typed into the URL.
func ParseBaseURL(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, fmt.Errorf("base URL is empty; expected e.g. https://api.github.com")
	}
	if !strings.Contains(raw, "://") {
		return nil, fmt.Errorf("base URL %q has no scheme; write https://%s", redactURL(raw), strings.TrimPrefix(redactURL(raw), "//"))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("base URL %q is not a valid URL; expected e.g. https://api.github.com", redactURL(raw))
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme != "http" && scheme != "https":
		return nil, fmt.Errorf("base URL must be http or https, not %q", scheme)
	case u.User != nil:
		return nil, fmt.Errorf("base URL %q must not contain a user name or password; put the token in an environment variable", redactURL(raw))
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("base URL %q has no host; expected e.g. https://api.github.com", raw)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, fmt.Errorf("base URL %q must not have a query or fragment", raw)
	}
	p := cleanPath(u.Path)
	if p == "/" {
		p = ""
	}
	host := strings.ToLower(u.Host)
	if u.Port() == defaultPort(scheme) {
		host = strings.TrimSuffix(host, ":"+u.Port()) // https://x:443 is https://x
	}
	return &url.URL{Scheme: scheme, Host: host, Path: p}, nil
}

// redactURL hides the user information of a URL-like string, which may hold a
// password, even when the string does not parse.
func redactURL(s string) string {
	rest, start := s, 0
	if i := strings.Index(s, "://"); i >= 0 {
		rest, start = s[i+3:], i+3
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
		return s[:start] + "***@" + rest[at+1:]
	}
	return s
}

// cleanPath removes dot segments, duplicate and trailing slashes, so that a
// request for /gh/../gl/x is matched as the server will route it (/gl/x).
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if strings.Contains(p, "/.") || strings.Contains(p, "//") || (len(p) > 1 && p[len(p)-1] == '/') {
		p = path.Clean(p)
	}
	if p[0] != '/' {
		p = "/" + p
	}
	return p
}

// below returns the URL rel (empty, or starting with '/') below base.
func below(base *url.URL, rel string) *url.URL { return withPath(base, base.Path+rel) }

// webBelow returns base without the API suffix it ends in (/api/v4), or
// base itself when it has none (a simulator serving both under one path).
func webBelow(base *url.URL, suffix string) *url.URL {
	root, _ := strings.CutSuffix(base.Path, suffix)
	return withPath(base, root)
}

func withPath(u *url.URL, p string) *url.URL {
	return &url.URL{Scheme: u.Scheme, Host: u.Host, Path: p}
}

func clone(u *url.URL) *url.URL {
	if u == nil {
		return nil
	}
	c := *u
	return &c
}

// prefix is a normalised URL root to match request URLs against.
type prefix struct {
	scheme string
	host   string // lower-case host name without port, IPv6 without brackets
	port   string // explicit, or the scheme's default
	path   string // "" for the root, else starts with '/' and has no trailing '/'
	// escaped is path as sent (see [url.URL.EscapedPath]), "" for the
	// root.
	escaped string
}

func newPrefix(u *url.URL) prefix {
	return prefix{
		scheme:  u.Scheme,
		host:    strings.ToLower(u.Hostname()),
		port:    portOf(u),
		path:    u.Path,
		escaped: (&url.URL{Path: u.Path}).EscapedPath(),
	}
}

func (p prefix) url() *url.URL {
	host := p.host
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if p.port != defaultPort(p.scheme) {
		host += ":" + p.port
	}
	return &url.URL{Scheme: p.scheme, Host: host, Path: p.path}
}

// match reports whether u lies under the root and how long the root's path
// is. The path must match whole segments.
func (p prefix) match(u *url.URL) (int, bool) {
	if !strings.EqualFold(u.Scheme, p.scheme) || !strings.EqualFold(u.Hostname(), p.host) || portOf(u) != p.port {
		return 0, false
	}
	if p.path == "" {
		return 0, true
	}
	up := cleanPath(u.Path)
	if up == p.path || (strings.HasPrefix(up, p.path) && up[len(p.path)] == '/') {
		return len(p.path), true
	}
	return 0, false
}

func portOf(u *url.URL) string {
	if port := u.Port(); port != "" {
		return port
	}
	return defaultPort(strings.ToLower(u.Scheme))
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}
