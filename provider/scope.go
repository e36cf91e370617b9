package provider

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// A scope is the part of an API that a refusal pauses when the server
// enforces a limit it does not announce: GitLab's per-endpoint limits on its
// Users, Projects and Groups APIs, a proxy's limit on one path of a custom
// host. A request's scope is known before it is sent, from its method and
// URL alone, so that every later request to the same scope waits for the
// refusal's time and a request to another scope does not.
//
// A scope is named by a path pattern: an optional method, then the path,
// each segment either a literal, "*" for exactly one segment, or a final
// "*" for one or more segments ("GET /api/v4/users/*" is every GET below
// /api/v4/users/). The pattern is absolute (it includes the base URL's
// path), so a configured limit and a learnt one name a scope alike.
//
// Segments are those of the path as sent (the escaped path): an encoded
// slash is part of its segment, as the server routes it. GitLab takes a
// project's path as its id, "group%2Fproject" or "a%2Fb%2Fc", and that is
// one segment: "POST /api/v4/projects/*/issues" matches
// POST /api/v4/projects/group%2Fproject/issues as it matches
// POST /api/v4/projects/12/issues. A literal segment matches a request's
// segment when both decode alike ("group%2Fproject" matches itself,
// "a%20b" matches "a b").

// EndpointLimit is a limit a user knows and writes down in the config file
// ([providers.NAME.limits]): Limit requests per Window for every request
// matching Pattern. It is paced from the first request, like an announced
// limit; refusals still teach.
type EndpointLimit struct {
	Pattern Pattern
	Limit   int64
	Window  time.Duration
}

// Pattern is a parsed scope pattern (see the comment at the top of this
// file).
type Pattern struct {
	text   string   // as written, normalised: "GET /api/v4/users/*"
	method string   // "" for any
	segs   []string // decoded: "group/project" for "group%2Fproject"
	rest   bool     // the last "*" matches one or more segments
}

// String returns the pattern as written, with its method upper-cased.
func (p Pattern) String() string { return p.text }

// ParsePattern reads "[METHOD ]/path/with/*/segments".
func ParsePattern(s string) (Pattern, error) {
	s = strings.TrimSpace(s)
	method, path, found := strings.Cut(s, " ")
	if !found {
		method, path = "", s
	}
	path = strings.TrimSpace(path)
	method = strings.ToUpper(method)
	if method != "" && !isToken(method) {
		return Pattern{}, fmt.Errorf("%q: %q is not an HTTP method; expected e.g. \"GET /api/v4/users/*\" or \"/api/v4/users/*\"", s, method)
	}
	if !strings.HasPrefix(path, "/") {
		return Pattern{}, fmt.Errorf("%q: the path must start with /; expected e.g. \"GET /api/v4/users/*\"", s)
	}
	if strings.ContainsAny(path, "?# \t") {
		return Pattern{}, fmt.Errorf("%q: a pattern is a path without query, fragment or spaces; expected e.g. \"GET /api/v4/users/*\"", s)
	}
	raw := segments(path)
	p := Pattern{method: method, segs: make([]string, len(raw))}
	for i, seg := range raw {
		switch {
		case seg == "":
			return Pattern{}, fmt.Errorf("%q: empty path segment", s)
		case strings.Contains(seg, "*") && seg != "*":
			return Pattern{}, fmt.Errorf("%q: * stands for a whole segment (write /users/*/keys, not /users/a*)", s)
		case seg == "*" && i == len(raw)-1:
			p.rest = true
		}
		dec, err := url.PathUnescape(seg)
		if err != nil {
			return Pattern{}, fmt.Errorf("%q: segment %q is not valid percent-encoding (write an encoded slash as %%2F)", s, seg)
		}
		p.segs[i] = dec
	}
	p.text = "/" + strings.Join(raw, "/")
	if method != "" {
		p.text = method + " " + p.text
	}
	return p, nil
}

// Matches reports whether a request with this method (upper case) and
// escaped URL path (as sent: [url.URL.EscapedPath]) is in the pattern's
// scope. Its segments are split at the slashes of the escaped path only,
// so "group%2Fproject" is one segment.
func (p Pattern) Matches(method, escapedPath string) bool {
	if p.method != "" && p.method != method {
		return false
	}
	path := strings.Trim(escapedPath, "/")
	for i, seg := range p.segs {
		if path == "" {
			return false
		}
		var head string
		head, path, _ = strings.Cut(path, "/")
		if seg == "*" && p.rest && i == len(p.segs)-1 {
			return true
		}
		if seg != "*" && seg != decodedSegment(head) {
			return false
		}
	}
	return path == ""
}

// decodedSegment is one segment of an escaped path, decoded ("a/b" for
// "a%2Fb"); a segment that is not valid percent-encoding stays as it is.
func decodedSegment(seg string) string {
	if strings.IndexByte(seg, '%') < 0 {
		return seg
	}
	if dec, err := url.PathUnescape(seg); err == nil {
		return dec
	}
	return seg
}

// ParseEndpointLimit reads a config entry such as "GET /api/v4/users/*" =
// "300/10m": a pattern and a count per window.
func ParseEndpointLimit(pattern, rate string) (EndpointLimit, error) {
	p, err := ParsePattern(pattern)
	if err != nil {
		return EndpointLimit{}, err
	}
	count, window, ok := strings.Cut(strings.TrimSpace(rate), "/")
	n, nerr := strconv.ParseInt(strings.TrimSpace(count), 10, 64)
	if !ok || nerr != nil || n < 1 {
		return EndpointLimit{}, fmt.Errorf("%q: expected a count per window such as \"300/10m\" or \"100/1m\"", rate)
	}
	window = strings.TrimSpace(window)
	if window != "" && (window[0] < '0' || window[0] > '9') {
		window = "1" + window // "100/m" reads as "100/1m"
	}
	w, werr := time.ParseDuration(window)
	if werr != nil || w < time.Second {
		return EndpointLimit{}, fmt.Errorf("%q: the window must be a duration of at least a second, such as \"1m\", \"10m\" or \"1h\"", rate)
	}
	return EndpointLimit{Pattern: p, Limit: n, Window: w}, nil
}

// Scope is the scope of one request: the pattern naming it (Key, empty for
// none: a refusal then pauses the owner's bucket) and, when the user wrote
// a limit for it, that limit.
type Scope struct {
	Key    string
	Limit  int64
	Window time.Duration
}

// ScopeOf returns the scope of a request with this method and URL: the
// first configured limit whose pattern matches it; else the endpoint group
// the API knows (GitLab's Users, Projects and Groups APIs, issue creation,
// project export); else, on a generic API, the path's first segments.
func (p *Provider) ScopeOf(method string, u *url.URL) Scope {
	method = strings.ToUpper(method)
	if len(p.EndpointLimits) > 0 {
		path := cleanPath(u.EscapedPath())
		for _, l := range p.EndpointLimits {
			if l.Pattern.Matches(method, path) {
				return Scope{Key: l.Pattern.text, Limit: l.Limit, Window: l.Window}
			}
		}
	}
	rel := p.relPath(u)
	g := p.api.Group(method, rel)
	if g == "" {
		return Scope{}
	}
	// The group is below the base URL; the scope's key is absolute.
	m, path, found := strings.Cut(g, " ")
	if !found {
		m, path = "", g
	}
	key := p.owned[0].escaped + path
	if m != "" {
		key = m + " " + key
	}
	return Scope{Key: key}
}

// firstSegmentsGroup is a generic API's endpoint group: the path's leading
// API prefix segments ("api", "rest", versions such as "v4" or "2022-11-28")
// and the first segment after them, with "/*" when more follow:
// "/api/v1/items/5" is in "/api/v1/items/*". The bare root has none.
func firstSegmentsGroup(rel string) string {
	var b strings.Builder
	rest := strings.Trim(rel, "/")
	for rest != "" {
		var seg string
		seg, rest, _ = strings.Cut(rest, "/")
		b.WriteByte('/')
		b.WriteString(seg)
		if !isAPIPrefix(seg) {
			break
		}
	}
	if b.Len() == 0 {
		return ""
	}
	if rest != "" {
		b.WriteString("/*")
	}
	return b.String()
}

// isAPIPrefix reports whether a path segment is a common API root rather
// than an endpoint: "api", "rest", "v1", "v4.2", "1.0", a date version.
func isAPIPrefix(seg string) bool {
	switch strings.ToLower(seg) {
	case "api", "rest", "apis":
		return true
	}
	s := strings.TrimPrefix(strings.ToLower(seg), "v")
	if s == "" {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && c != '.' && c != '-' {
			return false
		}
	}
	return s[0] >= '0' && s[0] <= '9'
}

// isToken reports whether s is an HTTP token (a method name).
func isToken(s string) bool {
	for _, c := range s {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return s != ""
}
