package provider

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatalf("parse %q: %v", s, err)
	}
	return u
}

// testRegistry holds the built-ins plus providers that share hosts.
func testRegistry(t *testing.T) *Registry {
	t.Helper()
	r := Defaults()
	for _, f := range []string{
		"ghsim=http://127.0.0.1:8080/gh",
		"glsim=http://127.0.0.1:8080/gl",
		"root=http://127.0.0.1:8080",
		"corp=https://git.example.com",
		"alt=https://git.example.com:8443/api",
	} {
		if err := r.ApplyFlag(f); err != nil {
			t.Fatal(err)
		}
	}
	ghes, err := New("ghes", GitHub, "https://ghe.example.com/api/v3")
	if err != nil {
		t.Fatal(err)
	}
	gitlab, err := New("corpgl", GitLab, "https://ghe.example.com/gitlab/api/v4")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Provider{ghes, gitlab} {
		if err := r.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func TestMatchLongestPrefix(t *testing.T) {
	r := testRegistry(t)
	tests := []struct {
		url  string
		want string // provider name, "" for none
	}{
		{"https://api.github.com/repos/o/r", "github"},
		{"https://api.github.com", "github"},
		{"https://API.GitHub.com:443/user", "github"},
		{"https://api.github.com/graphql", "github"},
		{"http://api.github.com/user", ""}, // scheme differs
		{"https://api.github.com:8443/user", ""},
		{"https://github.com/o/r", ""},
		{"https://gitlab.com/api/v4/projects/1", "gitlab"},
		{"https://gitlab.com/api/v4", "gitlab"},
		{"https://gitlab.com/api/v41/x", ""}, // segment boundary
		{"https://gitlab.com/o/r", ""},
		{"https://huggingface.co/api/models/o/m", "huggingface"},
		{"https://huggingface.co/o/m/resolve/main/README.md", "huggingface"},
		{"https://codeberg.org/api/v1/user", "codeberg"},
		// shared host: the longest base path wins, on segment boundaries
		{"http://127.0.0.1:8080/gh/repos/o/r", "ghsim"},
		{"http://127.0.0.1:8080/gh", "ghsim"},
		{"http://127.0.0.1:8080/gh/", "ghsim"},
		{"http://127.0.0.1:8080/gl/api/v4/user", "glsim"},
		{"http://127.0.0.1:8080/ghx/repos", "root"},
		{"http://127.0.0.1:8080/other", "root"},
		{"http://127.0.0.1:8080/gh/../gl/user", "glsim"}, // matched as the server routes it
		{"http://127.0.0.1:8081/gh", ""},                 // port differs
		{"http://127.0.0.1/gh", ""},
		// GitHub Enterprise Server owns /api/v3 and /api/graphql, nothing else
		{"https://ghe.example.com/api/v3/user", "ghes"},
		{"https://ghe.example.com/api/graphql", "ghes"},
		{"https://ghe.example.com/api/graphqlx", ""},
		{"https://ghe.example.com/api/v4/user", ""},
		{"https://ghe.example.com/gitlab/api/v4/user", "corpgl"},
		{"https://ghe.example.com/o/r", ""},
		// default ports are the same as no port
		{"https://git.example.com:443/x", "corp"},
		{"https://git.example.com:8443/api/x", "alt"},
		{"https://git.example.com:8443/x", ""},
		{"/relative/path", ""},
	}
	for _, tt := range tests {
		got := r.Match(mustURL(t, tt.url))
		name := ""
		if got != nil {
			name = got.Name
		}
		if name != tt.want {
			t.Errorf("Match(%s) = %q, want %q", tt.url, name, tt.want)
		}
		// Owns agrees with Match for the winner.
		if got != nil && !got.Owns(mustURL(t, tt.url)) {
			t.Errorf("%s does not own %s it matched", got.Name, tt.url)
		}
	}
}

func TestOwnsIsPerProvider(t *testing.T) {
	r := testRegistry(t)
	gh := r.Lookup("github")
	for _, u := range []string{
		"https://objects.githubusercontent.com/x", // where GitHub redirects downloads
		"https://codeload.github.com/o/r/zip",
		"https://api.github.com.evil.example/user",
		"https://evil.example/https://api.github.com/user",
	} {
		if gh.Owns(mustURL(t, u)) {
			t.Errorf("github owns %s; a redirect there would carry the token", u)
		}
	}
	if gh.Owns(nil) {
		t.Error("owns nil URL")
	}
}

func TestMatchIPv6(t *testing.T) {
	r := NewRegistry()
	p, err := New("v6", Generic, "http://[::1]:9000/api")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add(p); err != nil {
		t.Fatal(err)
	}
	if got := r.Match(mustURL(t, "http://[::1]:9000/api/x")); got != p {
		t.Errorf("IPv6 base not matched: %v", got)
	}
	if got := p.Bases()[0].String(); got != "http://[::1]:9000/api" {
		t.Errorf("Bases()[0] = %s", got)
	}
}

func TestAddRejectsSharedBase(t *testing.T) {
	r := Defaults()
	err := r.ApplyFlag("mine=https://api.github.com/")
	if err == nil || !strings.Contains(err.Error(), `same base URL as provider "github"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestGraphQLURLs(t *testing.T) {
	tests := []struct{ base, graphql, web string }{
		{"https://api.github.com", "https://api.github.com/graphql", "https://github.com"},
		{"https://ghe.example.com/api/v3", "https://ghe.example.com/api/graphql", "https://ghe.example.com"},
		{"https://ghe.example.com/prefix/api/v3/", "https://ghe.example.com/prefix/api/graphql", "https://ghe.example.com/prefix"},
		{"http://127.0.0.1:8080/gh", "http://127.0.0.1:8080/gh/graphql", "http://127.0.0.1:8080/gh"},
	}
	for _, tt := range tests {
		p, err := New("github", GitHub, tt.base)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.GraphQLURL().String(); got != tt.graphql {
			t.Errorf("%s: graphql = %s, want %s", tt.base, got, tt.graphql)
		}
		if got := p.WebURL().String(); got != tt.web {
			t.Errorf("%s: web = %s, want %s", tt.base, got, tt.web)
		}
		if !p.Owns(p.GraphQLURL()) {
			t.Errorf("%s does not own its GraphQL URL", tt.base)
		}
		if got := p.Resource("POST", p.GraphQLURL()); got != ResourceGraphQL {
			t.Errorf("%s: resource of GraphQL URL = %s", tt.base, got)
		}
	}
}

func TestAuthorize(t *testing.T) {
	r := Defaults()
	corp, err := New("corp", Generic, "https://git.example.com")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		p            *Provider
		header, want string
	}{
		{r.Lookup("github"), "Authorization", "Bearer tok-alice-1"},
		{r.Lookup("gitlab"), "Private-Token", "tok-alice-1"},
		{r.Lookup("huggingface"), "Authorization", "Bearer tok-alice-1"},
		{r.Lookup("codeberg"), "Authorization", "token tok-alice-1"},
		{corp, "Authorization", "Bearer tok-alice-1"},
	}
	for _, tt := range tests {
		h := http.Header{}
		tt.p.Authorize(h, "tok-alice-1")
		if got := h.Get(tt.header); got != tt.want {
			t.Errorf("%s: %s = %q, want %q (all: %v)", tt.p.Name, tt.header, got, tt.want, h)
		}
		if len(h) != 1 {
			t.Errorf("%s: set %d headers", tt.p.Name, len(h))
		}
		tt.p.Deauthorize(h)
		if len(h) != 0 {
			t.Errorf("%s: Deauthorize left %v", tt.p.Name, h)
		}
		h = http.Header{}
		tt.p.Authorize(h, "")
		if len(h) != 0 {
			t.Errorf("%s: anonymous Authorize set %v", tt.p.Name, h)
		}
	}
	// Configured: GitLab OAuth tokens use Bearer; a generic API its own header.
	gl := *r.Lookup("gitlab")
	gl.Auth = Auth{Header: "Authorization", Prefix: "Bearer"}
	h := http.Header{}
	gl.Authorize(h, "tok-oauth")
	if h.Get("Authorization") != "Bearer tok-oauth" || h.Get("Private-Token") != "" {
		t.Errorf("gitlab oauth: %v", h)
	}
	corp.Auth = Auth{Header: "X-Api-Key"}
	h = http.Header{}
	corp.Authorize(h, "tok-k")
	if h.Get("X-Api-Key") != "tok-k" {
		t.Errorf("custom header: %v", h)
	}
}

func TestTokenEnv(t *testing.T) {
	tests := []struct {
		name, base string
		want       []string
	}{
		{"github", GitHubAPI, []string{"GITHUB_TOKEN", "GH_TOKEN"}},
		{"gitlab", GitLabAPI, []string{"GITLAB_TOKEN"}},
		{"hf", HuggingFaceAPI, []string{"HF_TOKEN", "HUGGINGFACE_TOKEN"}},
		{"codeberg", CodebergAPI, []string{"CODEBERG_TOKEN", "GITEA_TOKEN", "FORGEJO_TOKEN"}},
		{"forgejo", "https://forge.example.org/api/v1", []string{"CODEBERG_TOKEN", "GITEA_TOKEN", "FORGEJO_TOKEN"}},
		{"corp", "https://git.example.com", []string{"GIT_TOKEN"}},
		{"corp", "https://my-forge.example.com/api", []string{"MY_FORGE_TOKEN"}},
		{"corp", "http://127.0.0.1:9000", []string{"CORP_TOKEN"}},
		{"my-sim", "http://localhost:9000", []string{"MY_SIM_TOKEN"}},
		{"corp", "http://[::1]:9000", []string{"CORP_TOKEN"}},
		{"corp", "https://9lives.example.com", []string{"_9LIVES_TOKEN"}},
	}
	for _, tt := range tests {
		p, err := New(tt.name, KindOf(tt.name), tt.base)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.TokenEnv, tt.want) {
			t.Errorf("%s %s: TokenEnv = %v, want %v", tt.name, tt.base, p.TokenEnv, tt.want)
		}
	}
}

func TestKinds(t *testing.T) {
	for name, want := range map[string]Kind{
		"github": GitHub, "GitHub": GitHub, "gitlab": GitLab, "huggingface": HuggingFace, "hf": HuggingFace,
		"gitea": Gitea, "codeberg": Gitea, "forgejo": Gitea, "gh": Generic, "corp": Generic,
	} {
		if got := KindOf(name); got != want {
			t.Errorf("KindOf(%q) = %s, want %s", name, got, want)
		}
	}
	if _, err := ParseKind("bitbucket"); err == nil || !strings.Contains(err.Error(), "known kinds: github, gitlab") {
		t.Errorf("ParseKind(bitbucket) err = %v", err)
	}
	r := Defaults()
	if r.Lookup("hf") != r.Lookup("huggingface") || r.Lookup("HF") == nil {
		t.Error("hf is not huggingface")
	}
	if !slices.Equal(r.Names(), []string{"anthropic", "codeberg", "github", "gitlab", "huggingface", "openai"}) {
		t.Errorf("Names = %v", r.Names())
	}
}

func TestGetUnknownListsKnown(t *testing.T) {
	_, err := Defaults().Get("bitbucket")
	want := `unknown provider "bitbucket"; known providers: anthropic, codeberg, github, gitlab, huggingface, openai`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want it to contain %q", err, want)
	}
}

func BenchmarkMatch(b *testing.B) {
	r := Defaults()
	for _, f := range []string{"ghsim=http://127.0.0.1:8080/gh", "glsim=http://127.0.0.1:8080/gl"} {
		if err := r.ApplyFlag(f); err != nil {
			b.Fatal(err)
		}
	}
	u := mustURL(b, "http://127.0.0.1:8080/gl/api/v4/projects/1/issues")
	b.ReportAllocs()
	for b.Loop() {
		if r.Match(u) == nil {
			b.Fatal("no match")
		}
	}
}
