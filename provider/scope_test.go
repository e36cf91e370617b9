package provider

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestPatternMatches(t *testing.T) {
	for _, c := range []struct {
		pattern, method, path string
		want                  bool
	}{
		{"GET /api/v4/users/*", "GET", "/api/v4/users/5", true},
		{"GET /api/v4/users/*", "GET", "/api/v4/users/5/followers", true},
		{"GET /api/v4/users/*", "GET", "/api/v4/users", false},
		{"GET /api/v4/users/*", "POST", "/api/v4/users/5", false},
		{"get /api/v4/users/*", "GET", "/api/v4/users/5", true},
		{"/api/v4/users/*/keys", "GET", "/api/v4/users/5/keys", true},
		{"/api/v4/users/*/keys", "GET", "/api/v4/users/5/status", false},
		{"/api/v4/users/*/keys", "GET", "/api/v4/users/5/keys/1", false},
		{"POST /api/v4/projects/*/issues", "POST", "/api/v4/projects/12/issues", true},
		{"POST /api/v4/projects/*/issues", "POST", "/api/v4/projects/12/issues/3/notes", false},
		// The path is the escaped one: an encoded slash is part of its
		// segment, as GitLab routes a project's path as its id.
		{"POST /api/v4/projects/*/issues", "POST", "/api/v4/projects/group%2Fproject/issues", true},
		{"POST /api/v4/projects/*/issues", "POST", "/api/v4/projects/a%2Fb%2Fc/issues", true},
		{"POST /api/v4/projects/*/issues", "POST", "/api/v4/projects/group/project/issues", false},
		{"GET /api/v4/projects/*", "GET", "/api/v4/projects/a%2Fb%2Fc", true},
		{"GET /api/v4/projects/*/repository/files/*/raw", "GET", "/api/v4/projects/a%2Fb%2Fc/repository/files/docs%2FREADME.md/raw", true},
		{"GET /api/v4/projects/*/repository/files/*/raw", "GET", "/api/v4/projects/a%2Fb/repository/files/docs/README.md/raw", false},
		// A literal segment matches what decodes alike.
		{"/api/v4/projects/group%2Fproject/*", "GET", "/api/v4/projects/group%2fproject/issues", true},
		{"/api/v4/projects/group%2Fproject/*", "GET", "/api/v4/projects/group/project/issues", false},
		{"/api/v4/groups/caf%C3%A9/*", "GET", "/api/v4/groups/café/projects", true},
	} {
		p, err := ParsePattern(c.pattern)
		if err != nil {
			t.Fatalf("%q: %v", c.pattern, err)
		}
		if got := p.Matches(c.method, c.path); got != c.want {
			t.Errorf("%q matches %s %s = %v, want %v", c.pattern, c.method, c.path, got, c.want)
		}
	}
}

func TestEndpointLimitErrorsSayWhatWouldBeRight(t *testing.T) {
	for _, c := range []struct{ pattern, rate, want string }{
		{"api/v4/users/*", "300/10m", "must start with /"},
		{"GET /api/v4/us*rs", "300/10m", "whole segment"},
		{"GET /api/v4//users", "300/10m", "empty path segment"},
		{"GET /api/v4/users?x=1", "300/10m", "without query"},
		{"G3T /api", "300/10m", "not an HTTP method"},
		{"/api", "300", `"300/10m"`},
		{"/api", "lots/1m", `"300/10m"`},
		{"/api", "0/1m", `"300/10m"`},
		{"/api", "10/100ms", "at least a second"},
		{"/api/v4/projects/a%zzb", "1/1m", "percent-encoding"},
	} {
		_, err := ParseEndpointLimit(c.pattern, c.rate)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q = %q: error %v, want one saying %q", c.pattern, c.rate, err, c.want)
		}
	}
	l, err := ParseEndpointLimit("GET /api/v4/users/*", "100/m")
	if err != nil || l.Limit != 100 || l.Window != time.Minute || l.Pattern.String() != "GET /api/v4/users/*" {
		t.Errorf("100/m: %+v %v", l, err)
	}
}

// The config's limits table paces a self-managed GitLab's known limits;
// the first pattern that matches wins; a request no pattern matches
// falls to the API's own groups.
func TestConfiguredLimitsAndGroups(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
[providers.gitlab]
base_url = "https://gitlab.example.com/api/v4"

[providers.gitlab.limits]
"GET /api/v4/users/*/followers" = "100/1m"
"GET /api/v4/users/*" = "300/10m"
`), "ratekeeper.toml")
	if err != nil {
		t.Fatal(err)
	}
	reg := Defaults()
	if err := reg.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	p := reg.Lookup("gitlab")
	scope := func(method, raw string) Scope {
		u, _ := url.Parse(raw)
		return p.ScopeOf(method, u)
	}
	if s := scope("GET", "https://gitlab.example.com/api/v4/users/7/followers"); s.Key != "GET /api/v4/users/*/followers" || s.Limit != 100 || s.Window != time.Minute {
		t.Errorf("followers: %+v", s)
	}
	if s := scope("GET", "https://gitlab.example.com/api/v4/users/7"); s.Key != "GET /api/v4/users/*" || s.Limit != 300 {
		t.Errorf("users: %+v", s)
	}
	if s := scope("GET", "https://gitlab.example.com/api/v4/projects/7/issues"); s.Key != "/api/v4/projects/*" || s.Limit != 0 {
		t.Errorf("projects: %+v (want the Projects API group, no configured limit)", s)
	}
	if s := scope("POST", "https://gitlab.example.com/api/v4/projects/7/issues"); s.Key != "POST /api/v4/projects/*/issues" {
		t.Errorf("issue creation: %+v", s)
	}
	if s := scope("GET", "https://gitlab.example.com/api/v4/users/7%2Fx"); s.Key != "GET /api/v4/users/*" {
		t.Errorf("users with an encoded slash: %+v", s)
	}
	if s := scope("GET", "https://gitlab.example.com/api/v4/version"); s.Key != "" {
		t.Errorf("version: %+v (want none: the main throttle's)", s)
	}
	if s := Defaults().Lookup("github").ScopeOf("GET", mustURL(t, "https://api.github.com/repos/o/r")); s.Key != "" {
		t.Errorf("github has announced resources, no scopes: %+v", s)
	}
	_, err = ParseConfig([]byte("[providers.gitlab.limits]\n\"GET /api/v4/users/*\" = \"lots\"\n"), "bad.toml")
	if err == nil || !strings.Contains(err.Error(), "bad.toml:2: providers.gitlab.limits.GET /api/v4/users/*") {
		t.Errorf("a bad limit's error %v does not name the file, line and key", err)
	}
}

// GitLab takes a project's path, its slashes encoded, wherever it takes a
// numeric id: a request names the same scope either way, and a namespaced
// project's issue creation is not a read of the Projects API.
func TestGitLabEncodedProjectPathsGetTheirScope(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
[providers.gitlab]
base_url = "https://gitlab.example.com/api/v4"

[providers.gitlab.limits]
"GET /api/v4/projects/*/repository/files/*/raw" = "100/1m"
`), "ratekeeper.toml")
	if err != nil {
		t.Fatal(err)
	}
	reg := Defaults()
	if err := reg.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	gl := reg.Lookup("gitlab")
	for _, c := range []struct{ method, url, want string }{
		{"POST", "https://gitlab.example.com/api/v4/projects/12/issues", "POST /api/v4/projects/*/issues"},
		{"POST", "https://gitlab.example.com/api/v4/projects/group%2Fproject/issues", "POST /api/v4/projects/*/issues"},
		{"POST", "https://gitlab.example.com/api/v4/projects/a%2Fb%2Fc/issues", "POST /api/v4/projects/*/issues"},
		{"POST", "https://gitlab.example.com/api/v4/projects/a%2Fb%2Fc/export", "POST /api/v4/projects/*/export"},
		{"GET", "https://gitlab.example.com/api/v4/projects/a%2Fb%2Fc/issues", "/api/v4/projects/*"},
		{"GET", "https://gitlab.example.com/api/v4/projects/12/repository/files/README.md/raw?ref=HEAD", "GET /api/v4/projects/*/repository/files/*/raw"},
		{"GET", "https://gitlab.example.com/api/v4/projects/a%2Fb%2Fc/repository/files/docs%2FREADME.md/raw?ref=HEAD", "GET /api/v4/projects/*/repository/files/*/raw"},
	} {
		if s := gl.ScopeOf(c.method, mustURL(t, c.url)); s.Key != c.want {
			t.Errorf("%s %s: scope %q, want %q", c.method, c.url, s.Key, c.want)
		}
	}
	// The README request the provider builds itself, its project path
	// one encoded segment, is a read of the Projects API.
	com := Defaults().Lookup("gitlab")
	req, err := com.ReadmeRequest(t.Context(), mustURL(t, "https://gitlab.com/a/b/c"))
	if err != nil {
		t.Fatal(err)
	}
	if s := com.ScopeOf("GET", req.URL); s.Key != "/api/v4/projects/*" {
		t.Errorf("README %s: scope %q, want the Projects API's", req.URL, s.Key)
	}
}

func TestGenericGroupIsThePathsFirstSegments(t *testing.T) {
	for rel, want := range map[string]string{
		"/api/v1/items/5":  "/api/v1/items/*",
		"/api/v1/items":    "/api/v1/items",
		"/repos/o/r":       "/repos/*",
		"/v2/2022-11-28/x": "/v2/2022-11-28/x",
		"/":                "",
	} {
		if got := firstSegmentsGroup(rel); got != want {
			t.Errorf("%s: %q, want %q", rel, got, want)
		}
	}
}
