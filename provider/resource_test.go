package provider

import (
	"testing"
	"time"
)

func TestGitHubResource(t *testing.T) {
	r := Defaults()
	ghes, err := New("ghes", GitHub, "https://ghe.example.com/api/v3")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, path, want string
	}{
		{"GET", "/repos/o/r", ResourceCore},
		{"GET", "/", ResourceCore},
		{"GET", "/rate_limit", ResourceCore},
		{"GET", "/search/repositories?q=x", ResourceSearch},
		{"GET", "/search/issues", ResourceSearch},
		{"GET", "/search/code?q=x", ResourceCodeSearch},
		{"GET", "/search/codex", ResourceSearch},
		{"GET", "/searchx", ResourceCore},
		{"POST", "/graphql", ResourceGraphQL},
		{"POST", "/app-manifests/abc/conversions", ResourceIntegrationManifest},
		{"GET", "/app-manifests/abc/conversions", ResourceCore},
		{"PUT", "/repos/o/r/import", ResourceSourceImport},
		{"GET", "/repos/o/r/import/authors", ResourceSourceImport},
		{"GET", "/repos/o/import", ResourceCore}, // a repository named import
		{"POST", "/repos/o/r/code-scanning/sarifs", ResourceCodeScanningUpload},
		{"GET", "/repos/o/r/code-scanning/sarifs/1", ResourceCore},
		{"POST", "/repos/o/r/actions/runners/registration-token", ResourceActionsRunnerRegistration},
		{"POST", "/orgs/acme/actions/runners/registration-token", ResourceActionsRunnerRegistration},
		{"POST", "/enterprises/e/actions/runners/registration-token", ResourceActionsRunnerRegistration},
		{"POST", "/repos/o/r/actions/runners/remove-token", ResourceCore},
		{"GET", "/scim/v2/organizations/acme/Users", ResourceSCIM},
		{"POST", "/repos/o/r/dependency-graph/snapshots", ResourceDependencySnapshots},
		{"GET", "/repos/o/r/dependency-graph/sbom", ResourceDependencySBOM},
		{"GET", "/orgs/acme/audit-log", ResourceAuditLog},
		{"GET", "/enterprises/e/audit-log", ResourceAuditLog},
		{"GET", "/repos/o/audit-log", ResourceCore},
	}
	for _, tt := range tests {
		for _, p := range []*Provider{r.Lookup("github"), ghes} {
			u := p.BaseURL().JoinPath(tt.path)
			if q := mustURL(t, "http://x"+tt.path); q.RawQuery != "" {
				u = p.BaseURL().JoinPath(q.Path)
				u.RawQuery = q.RawQuery
			}
			if got := p.Resource(tt.method, u); got != tt.want {
				t.Errorf("%s: %s %s = %q, want %q", p.Name, tt.method, u, got, tt.want)
			}
		}
	}
	if got := ghes.Resource("POST", mustURL(t, "https://ghe.example.com/api/graphql")); got != ResourceGraphQL {
		t.Errorf("GHES graphql = %s", got)
	}
}

func TestOtherResources(t *testing.T) {
	r := Defaults()
	tests := []struct {
		provider, url, want string
	}{
		{"huggingface", "https://huggingface.co/api/models?search=x", "api"},
		{"huggingface", "https://huggingface.co/api/whoami-v2", "api"},
		{"huggingface", "https://huggingface.co/o/m/resolve/main/README.md", "resolvers"},
		{"huggingface", "https://huggingface.co/datasets/o/d/resolve/main/x.parquet", "resolvers"},
		{"huggingface", "https://huggingface.co/o/m", "pages"},
		{"gitlab", "https://gitlab.com/api/v4/projects/1", "api"},
		{"codeberg", "https://codeberg.org/api/v1/repos/o/r", "api"},
	}
	for _, tt := range tests {
		if got := r.Lookup(tt.provider).Resource("GET", mustURL(t, tt.url)); got != tt.want {
			t.Errorf("%s %s = %q, want %q", tt.provider, tt.url, got, tt.want)
		}
	}
}

func TestClassify(t *testing.T) {
	r := Defaults()
	gh := r.Lookup("github")
	tests := []struct {
		method, url string
		want        Request
	}{
		{"GET", "https://api.github.com/repos/octo/hello/issues/12", Request{Resource: "core", Points: 1, Endpoint: "GET /repos/{owner}/{repo}/issues/{id}"}},
		{"get", "https://api.github.com/repos/octo/other/issues/99", Request{Resource: "core", Points: 1, Endpoint: "GET /repos/{owner}/{repo}/issues/{id}"}},
		{"POST", "https://api.github.com/repos/octo/hello/issues", Request{Resource: "core", Write: true, Points: 5, CreatesContent: true, Endpoint: "POST /repos/{owner}/{repo}/issues"}},
		{"PATCH", "https://api.github.com/repos/octo/hello/issues/3", Request{Resource: "core", Write: true, Points: 5, Endpoint: "PATCH /repos/{owner}/{repo}/issues/{id}"}},
		{"DELETE", "https://api.github.com/gists/aa12", Request{Resource: "core", Write: true, Points: 5, Endpoint: "DELETE /gists/{gist}"}},
		{"PUT", "https://api.github.com/repos/o/r/contents/a/b/c/d.md", Request{Resource: "core", Write: true, Points: 5, CreatesContent: true, Endpoint: "PUT /repos/{owner}/{repo}/contents/a/b"}},
		{"GET", "https://api.github.com/repos/o/r/commits/0123456789abcdef0123456789abcdef01234567", Request{Resource: "core", Points: 1, Endpoint: "GET /repos/{owner}/{repo}/commits/{sha}"}},
		{"GET", "https://api.github.com/users/octocat/repos", Request{Resource: "core", Points: 1, Endpoint: "GET /users/{user}/repos"}},
		{"GET", "https://api.github.com/rate_limit", Request{Resource: "core", Free: true, Points: 0, Endpoint: "GET /rate_limit"}},
		{"POST", "https://api.github.com/graphql", Request{Resource: "graphql", Points: 1, Endpoint: "POST /graphql"}},
		{"GET", "https://api.github.com/search/code?q=x", Request{Resource: "code_search", Points: 1, Endpoint: "GET /search/code"}},
	}
	for _, tt := range tests {
		if got := gh.Classify(tt.method, mustURL(t, tt.url)); got != tt.want {
			t.Errorf("Classify(%s %s)\n got %+v\nwant %+v", tt.method, tt.url, got, tt.want)
		}
	}
	gl := r.Lookup("gitlab")
	if got := gl.Classify("POST", mustURL(t, "https://gitlab.com/api/v4/projects/1/issues")); got.Points != 1 || !got.Write || got.Resource != "api" {
		t.Errorf("gitlab POST = %+v", got)
	}
}

func TestDefaultsAndSecondary(t *testing.T) {
	r := Defaults()
	for _, p := range r.Providers() {
		if p.Limits.DefaultLimit != 60 || p.Limits.DefaultWindow != time.Minute {
			t.Errorf("%s: default %d per %v, want 60 per minute", p.Name, p.Limits.DefaultLimit, p.Limits.DefaultWindow)
		}
		if p.Secondary.MaxConcurrency <= 0 || p.Secondary.MaxConcurrency >= 100 {
			t.Errorf("%s: MaxConcurrency %d not well under 100", p.Name, p.Secondary.MaxConcurrency)
		}
	}
	gh := r.Lookup("github").Secondary
	want := Secondary{MaxConcurrency: 20, BareWait: time.Minute, WriteSpacing: time.Second, ReadPoints: 1, WritePoints: 5,
		EndpointPointsPerMinute: 900, GraphQLPointsPerMinute: 2000, ContentCreationPerMinute: 80, ContentCreationPerHour: 500}
	if gh != want {
		t.Errorf("github secondary = %+v, want %+v", gh, want)
	}
	if r.Lookup("gitlab").Secondary.WriteSpacing != 0 {
		t.Error("gitlab writes spaced by default")
	}
}

func BenchmarkResource(b *testing.B) {
	gh := Defaults().Lookup("github")
	u := mustURL(b, "https://api.github.com/repos/octo/hello/issues/12/comments")
	b.ReportAllocs()
	for b.Loop() {
		if gh.Resource("GET", u) != ResourceCore {
			b.Fatal("wrong resource")
		}
	}
}

func BenchmarkClassify(b *testing.B) {
	gh := Defaults().Lookup("github")
	u := mustURL(b, "https://api.github.com/repos/octo/hello/issues/12/comments")
	b.ReportAllocs()
	for b.Loop() {
		if gh.Classify("GET", u).Points != 1 {
			b.Fatal("wrong points")
		}
	}
}
