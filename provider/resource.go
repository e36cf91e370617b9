package provider

import (
	"net/http"
	"net/url"
	"strings"
)

// Request describes what a request spends, decided from its method and URL
// alone, before it is sent.
type Request struct {
	// Resource names the rate-limit bucket the request spends from, as the
	// server names it: GitHub's core, search, code_search, graphql, ...;
	// Hugging Face's api, resolvers, pages; "api" for everything else.
	Resource string
	// Free is true for requests the server does not count against the
	// bucket (GitHub's GET /rate_limit).
	Free bool
	// Write is true for POST, PATCH, PUT and DELETE, which secondary limits
	// space and charge more for. POST /graphql counts as a read: a query
	// cannot be told from a mutation without reading the body, and most
	// GraphQL traffic is queries.
	Write bool
	// Points is the request's cost against the per-endpoint point budget of
	// [Secondary] (GitHub: 1 for a read, 5 for a write).
	Points int
	// Endpoint identifies the endpoint for per-endpoint budgets: the method
	// and the path with names and ids replaced by placeholders, such as
	// "GET /repos/{owner}/{repo}/issues/{id}". It is an approximation of
	// GitHub's route table that errs toward grouping more requests together,
	// which only makes pacing more careful.
	Endpoint string
	// CreatesContent is true for requests that may create content (REST POST
	// and PUT), which GitHub caps separately.
	CreatesContent bool
	// Units is what the request takes from its bucket: 0 or 1 for a
	// request, a GitHub GraphQL query's points (see ClassifyGraphQL).
	Units int
	// Shape names a GraphQL query apart from its variables (see
	// ClassifyGraphQL): queries of one shape cost alike. Empty for other
	// requests.
	Shape string
	// Scope is the request's scope (see [Provider.ScopeOf]); Classify
	// leaves it empty, the transport fills it in.
	Scope Scope
	// Meter names, for a request priced in tokens (see [Provider.PriceTokens]),
	// the bucket its answers describe that paces it, by the qualifier of
	// its headers ("tokens", "output-tokens"); empty for a request counted
	// in requests.
	Meter string
}

// Resource returns the name of the rate-limit bucket a request with this
// method and URL spends from. See [Request.Resource].
func (p *Provider) Resource(method string, u *url.URL) string {
	return p.api.Classify(strings.ToUpper(method), p.relPath(u)).Resource
}

// Classify describes what a request with this method and URL spends: the
// API says its resource, whether it writes and whether it is free; points
// follow from the provider's secondary limits.
func (p *Provider) Classify(method string, u *url.URL) Request {
	method = strings.ToUpper(method)
	rel := p.relPath(u)
	r := p.api.Classify(method, rel)
	r.Points = p.Secondary.ReadPoints
	if r.Write {
		r.Points = p.Secondary.WritePoints
	}
	if r.Free {
		r.Points = 0
	}
	r.CreatesContent = (method == http.MethodPost || method == http.MethodPut) && rel != "/graphql"
	r.Endpoint = endpointKey(method, rel)
	return r
}

// ClassifyGraphQL fills in r, a request to p's GraphQL endpoint as
// Classify describes it, from its body, when the provider's API prices
// queries by their content (GitHub's): Shape (the query text with
// whitespace folded, the operation name and the price, not the variables'
// values: one text priced differently is two shapes), Units
// (what the API's formula gives for the query and its variables, at least
// 1: the cost to reserve until answers tell the shape's real cost) and,
// for a mutation, Write with the write Points of the secondary limits. It
// reports false, leaving r alone, for an API that does not, another
// resource, or a body that is not a GraphQL request.
func (p *Provider) ClassifyGraphQL(r *Request, body []byte) bool {
	q, ok := p.api.PriceQuery(r.Resource, body)
	if !ok {
		return false
	}
	r.Shape, r.Units = q.Shape, q.Units
	if q.Mutation {
		r.Write, r.Points = true, p.Secondary.WritePoints
	}
	return true
}

// StatedCost returns the cost an answer's body says its query had (on
// GitHub, a GraphQL answer whose query asked for rateLimit { cost }).
func (p *Provider) StatedCost(body []byte) (int64, bool) { return p.api.StatedCost(body) }

// EntityTag returns the entity tag the provider's server gives an answer
// whose body is body to a request carrying header h, and whether the
// provider's API says how its server computes them.
//
// GitHub's tag for a JSON answer hashes the request's Accept,
// Authorization and Cookie values with the body (github.go), so the tag
// stored for one token never matches a request made with another: the
// server answers another token's repeat with the full answer, charged,
// unless the client sends the tag it would give that token — which it
// can compute from the stored body. body must be the bytes the server
// sent.
//
// Such a rule may be undocumented and change: a client must check it
// against each answer it stores (the tag the answer carries must be the
// one the rule gives for the request that fetched it) and fall back to
// sending the stored tag as it is when it does not hold.
func (p *Provider) EntityTag(h http.Header, body []byte) (string, bool) {
	return p.api.EntityTag(h, body)
}

// IsWrite reports whether a method changes state on the server: POST, PATCH,
// PUT and DELETE.
func IsWrite(method string) bool { return isWrite(strings.ToUpper(method)) }

func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// pathSegments splits a path without allocating: it keeps the first
// maxEndpointSegments segments, the count and the last one, which is all the
// resource rules and endpoint keys look at.
type pathSegments struct {
	s    [maxEndpointSegments]string
	n    int    // number of segments in the whole path
	last string // the last segment
}

func (p *pathSegments) split(rel string) {
	rel = strings.Trim(rel, "/")
	if rel == "" {
		return
	}
	for {
		i := strings.IndexByte(rel, '/')
		part := rel
		if i >= 0 {
			part = rel[:i]
		}
		if p.n < len(p.s) {
			p.s[p.n] = part
		}
		p.n++
		p.last = part
		if i < 0 {
			return
		}
		rel = rel[i+1:]
	}
}

// at returns segment i, or "" when there is none (or it is beyond the kept
// ones).
func (p *pathSegments) at(i int) string {
	if i >= 0 && i < p.n && i < len(p.s) {
		return p.s[i]
	}
	return ""
}

// segments returns every segment of rel.
func segments(rel string) []string {
	rel = strings.Trim(rel, "/")
	if rel == "" {
		return nil
	}
	return strings.Split(rel, "/")
}

// maxEndpointSegments bounds how deep an endpoint key goes; deeper paths
// (file paths under contents/, branch names with slashes) are folded into
// their parent endpoint.
const maxEndpointSegments = 6

// endpointKey turns a method and path into a route-like key such as
// "GET /repos/{owner}/{repo}/issues/{id}": the names after repos, users,
// orgs, enterprises and gists and every number or commit id become
// placeholders.
func endpointKey(method, rel string) string {
	var seg pathSegments
	seg.split(rel)
	var b strings.Builder
	b.Grow(len(method) + 2 + len(rel) + 16)
	b.WriteString(method)
	b.WriteString(" /")
	for i := 0; i < seg.n && i < len(seg.s); i++ {
		if i > 0 {
			b.WriteByte('/')
		}
		s := seg.s[i]
		switch {
		case isNumber(s):
			s = "{id}"
		case len(s) == 40 && isHex(s):
			s = "{sha}"
		case i == 1:
			switch seg.s[0] {
			case "repos":
				s = "{owner}"
			case "users":
				s = "{user}"
			case "orgs":
				s = "{org}"
			case "enterprises":
				s = "{enterprise}"
			case "gists":
				s = "{gist}"
			}
		case i == 2 && seg.s[0] == "repos":
			s = "{repo}"
		}
		b.WriteString(s)
	}
	return b.String()
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}
