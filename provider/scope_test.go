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
