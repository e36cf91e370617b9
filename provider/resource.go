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
}

// Resource returns the name of the rate-limit bucket a request with this
// method and URL spends from. See [Request.Resource].
func (p *Provider) Resource(method string, u *url.URL) string {
	return p.resource(method, p.relPath(u))
}

// Classify describes what a request with this method and URL spends.
func (p *Provider) Classify(method string, u *url.URL) Request {
	method = strings.ToUpper(method)
	rel := p.relPath(u)
	r := Request{Resource: p.resource(method, rel), Write: isWrite(method)}
	if p.Kind == GitHub && rel == "/graphql" {
		r.Write = false
	}
	r.Points = p.Secondary.ReadPoints
	if r.Write {
		r.Points = p.Secondary.WritePoints
	}
	if p.Kind == GitHub && method == http.MethodGet && rel == "/rate_limit" {
		r.Free, r.Points = true, 0
	}
	r.CreatesContent = (method == http.MethodPost || method == http.MethodPut) && rel != "/graphql"
	r.Endpoint = endpointKey(method, rel)
	return r
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

func (p *Provider) resource(method, rel string) string {
	switch p.Kind {
	case GitHub:
		return githubResource(strings.ToUpper(method), rel)
	case HuggingFace:
		return huggingFaceResource(rel)
	}
	return "api"
}

// GitHub's resource names, as /rate_limit and x-ratelimit-resource report
// them.
const (
	ResourceCore                      = "core"
	ResourceSearch                    = "search"
	ResourceCodeSearch                = "code_search"
	ResourceGraphQL                   = "graphql"
	ResourceIntegrationManifest       = "integration_manifest"
	ResourceSourceImport              = "source_import"
	ResourceCodeScanningUpload        = "code_scanning_upload"
	ResourceActionsRunnerRegistration = "actions_runner_registration"
	ResourceSCIM                      = "scim"
	ResourceDependencySnapshots       = "dependency_snapshots"
	ResourceDependencySBOM            = "dependency_sbom"
	ResourceAuditLog                  = "audit_log"
)

// githubResource maps a path below the API root to the resource GitHub's
// /rate_limit documentation assigns it. Anything unlisted is core.
func githubResource(method, rel string) string {
	var seg pathSegments
	seg.split(rel)
	n, last := seg.n, seg.last
	at := seg.at
	switch {
	case rel == "/graphql":
		return ResourceGraphQL
	case at(0) == "search" && at(1) == "code":
		return ResourceCodeSearch
	case at(0) == "search":
		return ResourceSearch
	case at(0) == "scim":
		return ResourceSCIM
	case at(0) == "app-manifests" && n == 3 && last == "conversions" && method == http.MethodPost:
		return ResourceIntegrationManifest
	case at(0) == "repos" && at(3) == "import":
		// The source imports API: /repos/{o}/{r}/import and its sub-paths.
		return ResourceSourceImport
	case at(0) == "repos" && n == 5 && at(3) == "code-scanning" && last == "sarifs" && method == http.MethodPost:
		return ResourceCodeScanningUpload
	case at(0) == "repos" && n == 5 && at(3) == "dependency-graph" && last == "snapshots" && method == http.MethodPost:
		return ResourceDependencySnapshots
	case at(0) == "repos" && n == 5 && at(3) == "dependency-graph" && last == "sbom":
		return ResourceDependencySBOM
	case (at(0) == "repos" && n == 6 || (at(0) == "orgs" || at(0) == "enterprises") && n == 5) &&
		at(n-3) == "actions" && at(n-2) == "runners" && last == "registration-token" && method == http.MethodPost:
		return ResourceActionsRunnerRegistration
	case (at(0) == "orgs" || at(0) == "enterprises") && n == 3 && last == "audit-log":
		return ResourceAuditLog
	}
	return ResourceCore
}

// huggingFaceResource follows the Hub's three buckets: Hub APIs under /api,
// resolvers (any path with a /resolve/ segment) and web pages.
func huggingFaceResource(rel string) string {
	if rel == "/api" || strings.HasPrefix(rel, "/api/") {
		return "api"
	}
	if strings.Contains(rel, "/resolve/") || strings.HasSuffix(rel, "/resolve") {
		return "resolvers"
	}
	return "pages"
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
