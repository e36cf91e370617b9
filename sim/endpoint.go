package sim

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Refusal kinds accepted in EndpointLimitConfig.Refusal: what a request
// refused by an endpoint limit is answered with.
const (
	// RefusalHeaders is 429 with Retry-After (the seconds to the end of
	// the limit's window) and that limit's own rate-limit headers: for
	// gitlab RateLimit-Name, -Limit, -Observed, -Remaining (0), -Reset
	// (Unix time) and -ResetTime (HTTP date); for the other dialects
	// their usual rate-limit headers, describing the endpoint limit.
	RefusalHeaders = "headers"
	// RefusalRetryAfter is 429 with Retry-After and no rate-limit header.
	RefusalRetryAfter = "retry-after"
	// RefusalBare is 429 with the dialect's body and no rate-limit header
	// at all, as gitlab.com's 429s sometimes are.
	RefusalBare = "bare"
	// RefusalPlain is 429 text/plain "Retry later" and no rate-limit
	// header, as GitLab Dedicated answers.
	RefusalPlain = "plain"
)

// Least waits assumed for a refusal that names no time (see
// Counters.EarlyRetries).
const (
	// MinRetryWait is how long after a refusal that names no time a
	// request to the refused scope is still early: a bare or plain 429 of
	// an endpoint limit, a secondary refusal without Retry-After outside
	// GitHub.
	MinRetryWait = time.Second
	// GitHubSecondaryWait is GitHub's "wait at least one minute" after a
	// secondary-limit refusal without retry-after (REST API best
	// practices).
	GitHubSecondaryWait = time.Minute
)

// EndpointLimitConfig is a limit on the requests to some endpoints that
// announces nothing while it is not exceeded, such as GitLab's Users,
// Projects and Groups API limits or GitHub's unpublished ones. It is
// counted per owner (per client IP when anonymous), after the API's main
// limit admitted the request (GitLab counts its Rack::Attack throttles
// in front of the application, which enforces these). A success answer
// carries the main resource's headers only.
type EndpointLimitConfig struct {
	// Pattern is "[METHOD ]PATH": an optional method (GET also matches
	// HEAD) and a path below the API's prefix, matched segment by segment
	// against the request's path as sent (the query is ignored, a
	// trailing slash too): an encoded slash belongs to its segment, as
	// GitLab takes a project's path "group%2Fproject" wherever it takes
	// its id. "*" matches exactly one segment and "**" one or more; other
	// segments match what decodes alike ("group%2Fproject" matches
	// itself, "a%20b" matches "a b"). Required. A
	// request counts against the first limit of the list it matches.
	// E.g. "GET /api/v4/users/*" (GET /users/:id) and
	// "/api/v4/projects/**".
	Pattern string `toml:"pattern" json:"pattern"`
	// Name is the RateLimit-Name of a gitlab refusal with headers, and
	// the limit's name in stats. Default: "endpoint_limit_<N>", N its
	// 1-based position.
	Name string `toml:"name" json:"name"`
	// Limit is the requests admitted per owner and window. Required.
	Limit int64 `toml:"limit" json:"limit"`
	// AnonymousLimit is the limit per client IP for requests without a
	// token. Default: Limit.
	AnonymousLimit int64 `toml:"anonymous_limit" json:"anonymous_limit"`
	// Window is the window length, whole seconds. Required.
	Window time.Duration `toml:"window" json:"window"`
	// WindowMode is "fixed" (the default: aligned windows, as Rack::Attack
	// and GitLab's application rate limiter count) or "rolling".
	WindowMode string `toml:"window_mode" json:"window_mode"`
	// Refusal is how a refused request is answered: "headers" (the
	// default), "retry-after", "bare" or "plain" (see RefusalHeaders …).
	Refusal string `toml:"refusal" json:"refusal"`
}

// GitLabUsersAPILimits are GitLab's documented per-user limits of its
// Users API (GitLab.com, and self-managed defaults), for
// APIConfig.EndpointLimits: followers and following 100 a minute, status
// 240, keys and GPG keys 120, and GET /users/:id 300 per 10 minutes.
// refusal is one of the Refusal kinds ("" for headers).
func GitLabUsersAPILimits(refusal string) []EndpointLimitConfig {
	l := func(pattern, name string, limit int64, window time.Duration) EndpointLimitConfig {
		return EndpointLimitConfig{Pattern: pattern, Name: name, Limit: limit, Window: window, Refusal: refusal}
	}
	return []EndpointLimitConfig{
		l("GET /api/v4/users/*/followers", "users_get_followers", 100, time.Minute),
		l("GET /api/v4/users/*/following", "users_get_following", 100, time.Minute),
		l("GET /api/v4/users/*/status", "users_get_status", 240, time.Minute),
		l("GET /api/v4/users/*/keys", "users_get_keys", 120, time.Minute),
		l("GET /api/v4/users/*/gpg_keys", "users_get_gpg_keys", 120, time.Minute),
		l("GET /api/v4/users/*", "users_get_by_id", 300, 10*time.Minute),
	}
}

// endpointPattern is a parsed EndpointLimitConfig.Pattern.
type endpointPattern struct {
	method string // "" for any
	segs   []string
}

var patternMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// parseEndpointPattern reads "[METHOD ]PATH", or says what is wrong and
// what would be right.
func parseEndpointPattern(s string) (endpointPattern, error) {
	var p endpointPattern
	s = strings.TrimSpace(s)
	if s == "" {
		return p, fmt.Errorf(`missing (want "[METHOD ]PATH", e.g. "GET /api/v4/users/*")`)
	}
	path := s
	if m, rest, ok := strings.Cut(s, " "); ok {
		m = strings.ToUpper(m)
		known := false
		for _, k := range patternMethods {
			known = known || k == m
		}
		if !known {
			return p, fmt.Errorf("%q: unknown method %q (want one of %s, or no method for any)", s, m, strings.Join(patternMethods, ", "))
		}
		p.method, path = m, strings.TrimSpace(rest)
	}
	if !strings.HasPrefix(path, "/") {
		return p, fmt.Errorf("%q: the path does not start with / (want e.g. \"GET /api/v4/users/*\")", s)
	}
	if strings.ContainsAny(path, "?# \t") {
		return p, fmt.Errorf("%q: the path has a query, fragment or space (a pattern matches the path only)", s)
	}
	trimmed := strings.Trim(path, "/")
	if trimmed == "" {
		return p, fmt.Errorf("%q: the pattern matches only the root (want a path like \"/api/v4/users/*\", or \"/**\" for every path)", s)
	}
	for seg := range strings.SplitSeq(trimmed, "/") {
		switch {
		case seg == "":
			return p, fmt.Errorf("%q: empty path segment", s)
		case seg != "*" && seg != "**" && strings.Contains(seg, "*"):
			return p, fmt.Errorf("%q: segment %q mixes * with text (a * stands for whole segments: \"*\" one, \"**\" one or more)", s, seg)
		}
		// Compared with the request's segments, which splitPath decodes.
		dec, err := url.PathUnescape(seg)
		if err != nil {
			return p, fmt.Errorf("%q: segment %q is not valid percent-encoding (write an encoded slash as %%2F)", s, seg)
		}
		p.segs = append(p.segs, dec)
	}
	return p, nil
}

// matches reports whether a request of method with path segments segs
// matches the pattern.
func (p endpointPattern) matches(method string, segs []string) bool {
	if p.method != "" && p.method != method && !(p.method == http.MethodGet && method == http.MethodHead) {
		return false
	}
	return globSegments(p.segs, segs)
}

// globSegments matches segs against pattern segments pat: "*" one
// segment, "**" one or more.
func globSegments(pat, segs []string) bool {
	for i, ps := range pat {
		if ps == "**" {
			for j := i + 1; j <= len(segs); j++ {
				if globSegments(pat[i+1:], segs[j:]) {
					return true
				}
			}
			return false
		}
		if i >= len(segs) || (ps != "*" && ps != segs[i]) {
			return false
		}
	}
	return len(pat) == len(segs)
}

// validateEndpointLimits checks the endpoint limits at path p.
func validateEndpointLimits(p string, limits []EndpointLimitConfig) []error {
	var errs []error
	names := map[string]int{}
	for i, l := range limits {
		lp := fmt.Sprintf("%s.endpoint_limits[%d]", p, i)
		if _, err := parseEndpointPattern(l.Pattern); err != nil {
			errs = append(errs, fieldErr(lp+".pattern", "%v", err))
		}
		name := endpointLimitName(l, i)
		if strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			errs = append(errs, fieldErr(lp+".name", "%q contains spaces or control characters (it is sent as the RateLimit-Name header; want e.g. \"throttle_users_api\")", name))
		}
		if j, dup := names[name]; dup {
			errs = append(errs, fieldErr(lp+".name", "%q is also the name of endpoint_limits[%d] (names must be unique)", name, j))
		}
		names[name] = i
		switch {
		case l.Limit == 0:
			errs = append(errs, fieldErr(lp+".limit", "missing (want the requests admitted per window, e.g. 40)"))
		case l.Limit < 0:
			errs = append(errs, fieldErr(lp+".limit", "%d is negative (want a positive count, e.g. 40)", l.Limit))
		}
		if l.AnonymousLimit < 0 {
			errs = append(errs, fieldErr(lp+".anonymous_limit", "%d is negative (want 0 for the limit, or a positive count)", l.AnonymousLimit))
		}
		switch {
		case l.Window == 0:
			errs = append(errs, fieldErr(lp+".window", "missing (want a whole number of seconds, e.g. \"60s\")"))
		case l.Window < time.Second || l.Window%time.Second != 0:
			errs = append(errs, fieldErr(lp+".window", "%v is not a whole, positive number of seconds (want e.g. \"60s\", \"10m\")", l.Window))
		}
		switch strings.ToLower(l.WindowMode) {
		case "", WindowRolling, WindowFixed:
		default:
			errs = append(errs, fieldErr(lp+".window_mode", "unknown mode %q (want fixed or rolling)", l.WindowMode))
		}
		switch strings.ToLower(l.Refusal) {
		case "", RefusalHeaders, RefusalRetryAfter, RefusalBare, RefusalPlain:
		default:
			errs = append(errs, fieldErr(lp+".refusal", "unknown refusal %q (want headers, retry-after, bare or plain)", l.Refusal))
		}
	}
	return errs
}

func endpointLimitName(l EndpointLimitConfig, i int) string {
	if l.Name != "" {
		return l.Name
	}
	return fmt.Sprintf("endpoint_limit_%d", i+1)
}

// endpointLimit is one configured endpoint limit with defaults applied.
type endpointLimit struct {
	index     int
	name      string
	pattern   string
	pat       endpointPattern
	limit     int64
	anonLimit int64
	window    int64 // seconds
	fixed     bool
	refusal   string
}

func resolveEndpointLimits(limits []EndpointLimitConfig) []*endpointLimit {
	var out []*endpointLimit
	for i, l := range limits {
		pat, _ := parseEndpointPattern(l.Pattern) // validated
		out = append(out, &endpointLimit{
			index: i, name: endpointLimitName(l, i), pattern: strings.TrimSpace(l.Pattern), pat: pat,
			limit: l.Limit, anonLimit: cmpOr(l.AnonymousLimit, l.Limit),
			window:  int64(l.Window / time.Second),
			fixed:   !strings.EqualFold(l.WindowMode, WindowRolling),
			refusal: cmpOr(strings.ToLower(l.Refusal), RefusalHeaders),
		})
	}
	return out
}

// endpointFor is the first endpoint limit matching the call, nil for none.
func (a *api) endpointFor(c *call) *endpointLimit {
	for _, el := range a.endpointLimits {
		if el.pat.matches(c.r.Method, c.segs) {
			return el
		}
	}
	return nil
}

// endpointCounter is one owner's count of one endpoint limit. Its window
// works as a bucket's; every request that reaches it counts, the refused
// ones too (GitLab's limiters count each attempt).
type endpointCounter struct {
	lim   *endpointLimit
	owner *owner
	limit int64

	mu     sync.Mutex
	active bool
	start  int64
	used   int64
	scope  refusalScope

	requests, accepted, refused, early int64
}

// counter is the owner's counter of el, made on first use.
func (o *owner) counter(el *endpointLimit, lag time.Duration) *endpointCounter {
	o.epMu.Lock()
	defer o.epMu.Unlock()
	if o.endpoints == nil {
		o.endpoints = map[int]*endpointCounter{}
	}
	ec := o.endpoints[el.index]
	if ec == nil {
		limit := el.limit
		if o.anonymous {
			limit = el.anonLimit
		}
		ec = &endpointCounter{lim: el, owner: o, limit: limit, scope: refusalScope{lag: lag}}
		o.endpoints[el.index] = ec
	}
	return ec
}

// arrive notes a request to the endpoint arriving at server time now, and
// reports whether it came before the time the last refusal named. It is
// called for every matching request, whatever refuses it later.
func (ec *endpointCounter) arrive(now time.Time) bool {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	if ec.scope.early(now) {
		ec.early++
		return true
	}
	return false
}

// admit counts a request the main limit admitted; a refusal records the
// time it names: the end of the window, which Retry-After rounds up to
// whole seconds, or MinRetryWait from now when it sends no time.
func (ec *endpointCounter) admit(now time.Time) (bucketState, bool) {
	sec := now.Unix()
	ec.mu.Lock()
	defer ec.mu.Unlock()
	b := bucket{limit: ec.limit, window: ec.lim.window, fixed: ec.lim.fixed, active: ec.active, start: ec.start, used: ec.used}
	b.roll(sec)
	ec.active, ec.start = b.active, b.start
	ec.requests++
	ec.used = b.used + 1
	b.used = ec.used
	st := b.state(sec)
	if ec.used <= ec.limit {
		ec.accepted++
		return st, true
	}
	ec.refused++
	until := time.Unix(st.reset, 0)
	if r := ec.lim.refusal; r == RefusalBare || r == RefusalPlain {
		until = now.Add(MinRetryWait)
	}
	ec.scope.refuse(now, until)
	return st, false
}

func (ec *endpointCounter) snapshot(now time.Time) EndpointLimitStats {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	b := bucket{limit: ec.limit, window: ec.lim.window, fixed: ec.lim.fixed, active: ec.active, start: ec.start, used: ec.used}
	st := b.state(now.Unix())
	mode := WindowRolling
	if ec.lim.fixed {
		mode = WindowFixed
	}
	return EndpointLimitStats{
		Name: ec.lim.name, Pattern: ec.lim.pattern, Owner: ec.owner.name, Anonymous: ec.owner.anonymous,
		Limit: ec.limit, WindowSeconds: ec.lim.window, WindowMode: mode, Refusal: ec.lim.refusal,
		Used: st.used, Remaining: st.remaining, Reset: time.Unix(st.reset, 0).UTC(),
		Requests: ec.requests, Accepted: ec.accepted, Refused: ec.refused, EarlyRetries: ec.early,
	}
}

// refusalScope remembers a scope's last refusal: when it happened and the
// time it named. Guarded by its owner's lock.
type refusalScope struct {
	at, until time.Time
	// lag is how long after its decision a refusal reaches the client:
	// the API's configured latency, which delays every answer.
	lag time.Duration
}

// early reports whether a request arriving at now comes after the last
// refusal reached its client and before the time it named. The server
// judges by arrival: requests arrive at once (the latency delays answers),
// so one arriving after the refusal's answer left was sent after the
// client could know of it; one arriving while the answer was still on its
// way, or at the very moment it left, was in flight, as unavoidable for a
// client as one that arrived before the refusal was decided.
func (s *refusalScope) early(now time.Time) bool {
	return !s.at.IsZero() && now.After(s.at.Add(s.lag)) && now.Before(s.until)
}

// refuse records a refusal at now naming until. The last refusal's time
// is the one a client acts on; a refusal during the period of an earlier
// one keeps that one's start, so a request that arrived after the first
// refusal but is counted after a later one is still judged early.
func (s *refusalScope) refuse(now, until time.Time) {
	if s.at.IsZero() || now.Before(s.at) || !now.Before(s.until) {
		s.at = now
	}
	s.until = until
}

// endpointRefusal answers a request the endpoint limit el refused, with
// st the limit's state: the dialect's body, and the headers of el's
// refusal kind. It returns the state reply should write rate-limit headers
// of: none (the refusal's headers are in the answer itself).
func (a *api) endpointRefusal(c *call, el *endpointLimit, st bucketState) *rendered {
	if el.refusal == RefusalPlain {
		return newRendered(http.StatusTooManyRequests, ctTextPlain, []byte("Retry later\n"))
	}
	rd := a.d.endpointRefused(c)
	switch el.refusal {
	case RefusalHeaders:
		h := http.Header{}
		a.d.throttleHeaders(c, h, st, el.name)
		for _, k := range sortedKeys(h) {
			rd = rd.with(k, h.Get(k))
		}
		fallthrough
	case RefusalRetryAfter:
		rd = rd.with("Retry-After", itoa(max(secondsUntil(c.now, st.reset), 1)))
	}
	return rd
}
