package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// GitHub is the kind of api.github.com and GitHub Enterprise Server.
const GitHub Kind = "github"

// GitHubAPI is the built-in github provider's base URL.
const GitHubAPI = "https://api.github.com"

// githubAPI is what ratekeeper knows of GitHub's REST and GraphQL APIs:
// a Bearer token from GITHUB_TOKEN or GH_TOKEN; the documented secondary
// limits; GraphQL beside the REST root on Enterprise Server; the resource
// each path spends from (/rate_limit's names); "who am I" at /user and
// every bucket at /rate_limit; entity tags computed per credential;
// GraphQL queries priced in points (github_graphql.go); GitHub App
// installations as credentials.
type githubAPI struct{ GenericAPI }

func (githubAPI) Kind() Kind { return GitHub }

func (githubAPI) Builtin() Builtin { return Builtin{Name: "github", BaseURL: GitHubAPI} }

var githubTokenEnv = []string{"GITHUB_TOKEN", "GH_TOKEN"}

func (githubAPI) TokenEnv(string, *url.URL) []string { return slices.Clone(githubTokenEnv) }

// Secondary follows GitHub's documented secondary limits: at most 100
// requests in flight (20 stays well clear), 900 points a minute per REST
// endpoint (a read 1, a write 5), 2,000 a minute for GraphQL, a second
// between writes, 80 content-creating requests a minute and 500 an hour.
func (githubAPI) Secondary() Secondary {
	return Secondary{
		MaxConcurrency:           20,
		BareWait:                 time.Minute, // REST best practices: "wait at least one minute"
		WriteSpacing:             time.Second,
		ReadPoints:               1,
		WritePoints:              5,
		EndpointPointsPerMinute:  900,
		GraphQLPointsPerMinute:   2000,
		ContentCreationPerMinute: 80,
		ContentCreationPerHour:   500,
	}
}

// GraphQLURL is {base}/graphql, except on GitHub Enterprise Server, which
// serves GraphQL beside the REST root (/api/graphql), not under it.
func (githubAPI) GraphQLURL(base *url.URL) *url.URL {
	if root, ok := strings.CutSuffix(base.Path, "/api/v3"); ok {
		return withPath(base, root+"/api/graphql")
	}
	return below(base, "/graphql")
}

// WebURL is github.com for api.github.com, the host's root for
// Enterprise Server (/api/v3), and the base itself for anything else (a
// simulator serving both under one path).
func (githubAPI) WebURL(base *url.URL) *url.URL {
	if base.Host == "api.github.com" && base.Path == "" {
		return &url.URL{Scheme: base.Scheme, Host: "github.com"}
	}
	return webBelow(base, "/api/v3")
}

// Classify follows /rate_limit's resources (githubResource). POST
// /graphql counts as a read until its body says it is a mutation
// (PriceQuery), and GET /rate_limit is free.
// Group is none: GitHub's limits are announced per resource (core,
// search, graphql…) and its unannounced ones are the owner's secondary
// limits, which pause the owner.
func (githubAPI) Group(string, string) string { return "" }

func (githubAPI) Classify(method, rel string) Request {
	return Request{
		Resource: githubResource(method, rel),
		Write:    isWrite(method) && rel != "/graphql",
		Free:     method == http.MethodGet && rel == "/rate_limit",
	}
}

// PriceQuery prices a query to the graphql resource in points by GitHub's
// published formula (github_graphql.go).
func (githubAPI) PriceQuery(resource string, body []byte) (Query, bool) {
	if resource != ResourceGraphQL {
		return Query{}, false
	}
	return priceGraphQL(body)
}

// StatedCost reads the cost a GraphQL answer states ([GraphQLCost]).
func (githubAPI) StatedCost(body []byte) (int64, bool) { return GraphQLCost(body) }

// githubTagFields are the request fields api.github.com mixes into an
// entity tag, in order.
var githubTagFields = [...]string{"Accept", "Authorization", "Cookie"}

// EntityTag computes GitHub's tag for a JSON answer: W/" + the hex SHA-256
// of the request's Accept value, ":", its Authorization value, ":", its
// Cookie value, ":" (each only when the request carries it; several values
// of one field joined by ", ") and then the body, + ". Observed on
// api.github.com and published, not documented: see [Provider.EntityTag].
func (githubAPI) EntityTag(h http.Header, body []byte) (string, bool) {
	sum := sha256.New()
	for _, name := range githubTagFields {
		if vs, ok := h[name]; ok {
			sum.Write([]byte(strings.Join(vs, ", ")))
			sum.Write([]byte{':'})
		}
	}
	sum.Write(body)
	var hexSum [2 * sha256.Size]byte
	hex.Encode(hexSum[:], sum.Sum(nil))
	return `W/"` + string(hexSum[:]) + `"`, true
}

// WhoAmIURL is GET /user, answered {"login", "id"}.
func (githubAPI) WhoAmIURL(base *url.URL) *url.URL { return below(base, "/user") }

func (githubAPI) ParseOwner(body []byte) (Owner, error) {
	return parseOwner(body, func(v ownerJSON) string { return v.Login })
}

// StatusURL is GET /rate_limit, free for the primary limit.
func (githubAPI) StatusURL(base *url.URL) *url.URL { return below(base, "/rate_limit") }

func (githubAPI) ParseStatus(body []byte) (map[string]ResourceLimit, error) { return ParseStatus(body) }

// ReadmeURL is GET {api}/repos/{owner}/{repo}/readme with Accept:
// application/vnd.github.raw: GitHub picks whichever README file the
// repository has.
func (githubAPI) ReadmeURL(page RepoPage) (*url.URL, string, error) {
	owner, repo, err := page.OwnerRepo()
	if err != nil {
		return nil, "", err
	}
	return below(page.Base, "/repos/"+owner+"/"+repo+"/readme"), "application/vnd.github.raw", nil
}

func (githubAPI) AppInstallations() bool { return true }

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

// ParseStatus reads a GitHub /rate_limit body into its buckets, keyed by
// resource name. The deprecated top-level "rate" object duplicates "core"
// and is used only when "resources" lacks core.
func ParseStatus(body []byte) (map[string]ResourceLimit, error) {
	type rate struct {
		Limit     *int   `json:"limit"`
		Remaining *int   `json:"remaining"`
		Used      *int   `json:"used"`
		Reset     *int64 `json:"reset"`
	}
	var v struct {
		Resources map[string]rate `json:"resources"`
		Rate      *rate           `json:"rate"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("rate-limit status is not the expected JSON object: %v", err)
	}
	if v.Resources == nil && v.Rate == nil {
		return nil, errors.New(`rate-limit status has neither "resources" nor "rate"`)
	}
	out := make(map[string]ResourceLimit, len(v.Resources)+1)
	add := func(name string, r rate) error {
		if r.Limit == nil || r.Remaining == nil || r.Reset == nil {
			return fmt.Errorf("rate-limit status: resource %q lacks limit, remaining or reset", name)
		}
		rl := ResourceLimit{Resource: name, Limit: *r.Limit, Remaining: *r.Remaining, Reset: time.Unix(*r.Reset, 0)}
		if r.Used != nil {
			rl.Used = *r.Used
		} else {
			rl.Used = rl.Limit - rl.Remaining
		}
		out[name] = rl
		return nil
	}
	for name, r := range v.Resources {
		if err := add(name, r); err != nil {
			return nil, err
		}
	}
	if _, ok := out[ResourceCore]; !ok && v.Rate != nil {
		if err := add(ResourceCore, *v.Rate); err != nil {
			return nil, err
		}
	}
	return out, nil
}
