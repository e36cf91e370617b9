package sim

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func githubServer(t *testing.T, mod func(*APIConfig)) *Server {
	a := APIConfig{Dialect: DialectGitHub, Tokens: []TokenConfig{{Token: "tok-alice-1", Owner: "alice", UserID: 4242}}, Secondary: noSecondary()}
	if mod != nil {
		mod(&a)
	}
	return mustNew(t, Config{APIs: []APIConfig{a}})
}

// The headers documented in "Rate limits for the REST API": limit,
// remaining, used, reset in UTC epoch seconds, resource; the window starts
// at the first request.
func TestGitHubRateLimitHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := githubServer(t, nil)
		c := newClient(t, srv)
		time.Sleep(7 * time.Second) // the window starts at the first request, not at New
		start := t0 + 7

		cases := []struct {
			name, method, path string
			status             int
			want               map[string]string
		}{
			{"core", "GET", "/repos/octo/hello", 200, map[string]string{
				"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "4999", "X-RateLimit-Used": "1",
				"X-RateLimit-Reset": strconv.FormatInt(start+3600, 10), "X-RateLimit-Resource": "core"}},
			{"unknown path still costs", "GET", "/nope/nope", 404, map[string]string{
				"X-RateLimit-Remaining": "4998", "X-RateLimit-Used": "2", "X-RateLimit-Resource": "core"}},
			{"search has its own minute", "GET", "/search/repositories?q=go", 200, map[string]string{
				"X-RateLimit-Limit": "30", "X-RateLimit-Remaining": "29", "X-RateLimit-Used": "1",
				"X-RateLimit-Reset": strconv.FormatInt(start+60, 10), "X-RateLimit-Resource": "search"}},
			{"code search", "GET", "/search/code?q=func", 200, map[string]string{
				"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "9", "X-RateLimit-Resource": "code_search"}},
			{"rate_limit is free", "GET", "/rate_limit", 200, map[string]string{
				"X-RateLimit-Remaining": "4998", "X-RateLimit-Used": "2", "X-RateLimit-Resource": "core"}},
			{"graphql", "POST", "/graphql", 200, map[string]string{
				"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "4999", "X-RateLimit-Resource": "graphql"}},
		}
		for _, tc := range cases {
			var a answer
			if tc.method == "POST" {
				a = c.do("POST", tc.path, "Authorization", "token tok-alice-1", `{"query":"{ viewer { login } }"}`)
			} else {
				a = c.get(tc.path, "tok-alice-1")
			}
			if a.status != tc.status {
				t.Errorf("%s: status %d, want %d: %s", tc.name, a.status, tc.status, a.body)
			}
			wantHeaders(t, a, tc.want)
			if got, want := a.h("Date"), unix(start); got != want {
				t.Errorf("%s: Date %q, want %q", tc.name, got, want)
			}
		}
	})
}

func TestGitHubRateLimitEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := githubServer(t, nil)
		c := newClient(t, srv)
		c.get("/repos/o/r", "tok-alice-1")
		c.get("/search/issues?q=bug", "tok-alice-1")
		a := c.get("/rate_limit", "tok-alice-1")
		body := a.json(t)
		res := body["resources"].(map[string]any)
		want := map[string][3]float64{ // limit, used, remaining
			"core": {5000, 1, 4999}, "search": {30, 1, 29}, "code_search": {10, 0, 10}, "graphql": {5000, 0, 5000},
		}
		for name, w := range want {
			r := res[name].(map[string]any)
			if r["limit"] != w[0] || r["used"] != w[1] || r["remaining"] != w[2] {
				t.Errorf("resources.%s = %v, want limit/used/remaining %v", name, r, w)
			}
		}
		if body["rate"].(map[string]any)["remaining"] != 4999.0 {
			t.Errorf("rate = %v, want core's", body["rate"])
		}
		if st := srv.Stats(); st.Total.Charged != 2 {
			t.Errorf("charged %d, want 2 (/rate_limit is free)", st.Total.Charged)
		}
	})
}

func TestGitHubPrimaryExhaustion(t *testing.T) {
	for _, status := range []int{403, 429} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := githubServer(t, func(a *APIConfig) { a.Limit = 3; a.ExhaustedStatus = status })
				c := newClient(t, srv)
				for range 3 {
					if a := c.get("/repos/o/r", "tok-alice-1"); a.status != 200 {
						t.Fatalf("status %d before the limit", a.status)
					}
				}
				a := c.get("/repos/o/r", "tok-alice-1")
				if a.status != status {
					t.Fatalf("status %d, want %d", a.status, status)
				}
				wantHeaders(t, a, map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Used": "3", "X-RateLimit-Limit": "3",
					"X-RateLimit-Reset": strconv.FormatInt(t0+3600, 10), "Retry-After": ""})
				body := a.json(t)
				if msg := body["message"].(string); !strings.HasPrefix(msg, "API rate limit exceeded for user ID 4242.") {
					t.Errorf("message %q", msg)
				}
				if body["documentation_url"] != "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api" || body["status"] != strconv.Itoa(status) {
					t.Errorf("body %v", body)
				}
				// After the window, the bucket is full again.
				time.Sleep(time.Hour)
				if a := c.get("/repos/o/r", "tok-alice-1"); a.status != 200 || a.h("X-RateLimit-Remaining") != "2" {
					t.Errorf("after the reset: status %d remaining %s", a.status, a.h("X-RateLimit-Remaining"))
				}
				st, _ := srv.Stats().BucketFor("github", "alice", "core")
				if st.Violations != 1 || st.PrimaryViolations != 1 || st.Requests != 5 || st.Accepted != 4 {
					t.Errorf("stats %+v", st.Counters)
				}
			})
		})
	}
}

// A GraphQL exhaustion is a 200 with a RATE_LIMITED error (documented).
func TestGitHubGraphQL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := githubServer(t, func(a *APIConfig) { a.Resources = map[string]ResourceConfig{"graphql": {Limit: 2}} })
		c := newClient(t, srv)
		a := c.do("POST", "/graphql", "Authorization", "bearer tok-alice-1", `not json`)
		if a.status != 400 || !strings.Contains(a.body, "Problems parsing JSON") {
			t.Errorf("bad JSON: %d %s", a.status, a.body)
		}
		a = c.do("POST", "/graphql", "Authorization", "bearer tok-alice-1", `{"query":"query { viewer { login } rateLimit { remaining } }"}`)
		data := a.json(t)["data"].(map[string]any)
		if data["viewer"].(map[string]any)["login"] != "alice" || data["rateLimit"].(map[string]any)["remaining"] != 0.0 {
			t.Errorf("data %v", data)
		}
		a = c.do("POST", "/graphql", "Authorization", "bearer tok-alice-1", `{"query":"{ viewer { login } }"}`)
		if a.status != 200 || !strings.Contains(a.body, `"type":"RATE_LIMITED"`) || !strings.Contains(a.body, "API rate limit already exceeded for user ID 4242.") {
			t.Errorf("exhausted graphql: %d %s", a.status, a.body)
		}
		if a.h("X-RateLimit-Remaining") != "0" {
			t.Errorf("remaining %q", a.h("X-RateLimit-Remaining"))
		}
		a = c.do("POST", "/graphql", `{"query":"{ viewer { login } }"}`)
		if a.status != 401 || !strings.Contains(a.body, "This endpoint requires you to be authenticated.") {
			t.Errorf("anonymous graphql: %d %s", a.status, a.body)
		}
	})
}

func TestGitHubEndpoints(t *testing.T) {
	srv := githubServer(t, nil)
	c := newClient(t, srv)

	user := c.get("/user", "tok-alice-1").json(t)
	if user["login"] != "alice" || user["id"] != 4242.0 {
		t.Errorf("/user = %v", user)
	}
	// Basic credentials: the token as the password, or as the user name.
	for _, basic := range []string{"x:tok-alice-1", "tok-alice-1:"} {
		u := c.do("GET", "/user", "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(basic)))
		if u.status != 200 || u.json(t)["login"] != "alice" {
			t.Errorf("/user with Basic %q: %d %s", basic, u.status, u.body)
		}
	}
	if u := c.get("/users/alice", "").json(t); u["id"] != 4242.0 || u["login"] != "alice" {
		t.Errorf("/users/alice = %v", u)
	}
	repo := c.get("/repos/octo/hello", "tok-alice-1").json(t)
	if repo["full_name"] != "octo/hello" || repo["url"] != "http://sim.test/repos/octo/hello" {
		t.Errorf("repo = %v", repo)
	}
	if again := c.get("/repos/octo/hello", "tok-alice-1").json(t); again["id"] != repo["id"] || again["description"] != repo["description"] {
		t.Errorf("content is not deterministic: %v vs %v", again, repo)
	}

	readme := c.get("/repos/octo/hello/readme", "tok-alice-1")
	raw := c.get("/repos/octo/hello/readme", "tok-alice-1", "Accept", "application/vnd.github.raw")
	enc := readme.json(t)["content"].(string)
	dec, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(enc, "\n", ""))
	if err != nil || string(dec) != raw.body || !strings.HasPrefix(raw.body, "# hello\n") {
		t.Errorf("readme base64 %q decodes to %q (%v), raw is %q", enc, dec, err, raw.body)
	}
	if readme.h("ETag") == raw.h("ETag") {
		t.Error("raw and JSON readme share an ETag")
	}

	a := c.get("/repos/octo/hello/issues?per_page=10&page=2&state=open", "tok-alice-1")
	var issues []map[string]any
	mustJSON(t, a.body, &issues)
	if len(issues) != 10 {
		t.Errorf("page 2 has %d issues, want 10", len(issues))
	}
	link := a.h("Link")
	for _, want := range []string{
		`<http://sim.test/repos/octo/hello/issues?page=3&per_page=10&state=open>; rel="next"`,
		`<http://sim.test/repos/octo/hello/issues?page=1&per_page=10&state=open>; rel="prev"`,
		`rel="last"`, `rel="first"`,
	} {
		if !strings.Contains(link, want) {
			t.Errorf("Link %q lacks %q", link, want)
		}
	}

	created := c.do("POST", "/repos/octo/hello/issues", "Authorization", "token tok-alice-1", `{"title":"It broke"}`)
	if created.status != 201 || created.json(t)["title"] != "It broke" || created.h("Location") == "" {
		t.Errorf("create issue: %d %s", created.status, created.body)
	}
	if bad := c.do("POST", "/repos/octo/hello/issues", "Authorization", "token tok-alice-1", `{}`); bad.status != 422 {
		t.Errorf("issue without title: %d", bad.status)
	}

	ev := c.get("/repos/octo/hello/events", "tok-alice-1")
	if ev.h("X-Poll-Interval") != "60" {
		t.Errorf("X-Poll-Interval %q", ev.h("X-Poll-Interval"))
	}
	for _, p := range []string{"/events", "/users/alice/events"} {
		if a := c.get(p, ""); a.status != 200 || a.h("X-Poll-Interval") != "60" {
			t.Errorf("%s: %d, X-Poll-Interval %q", p, a.status, a.h("X-Poll-Interval"))
		}
	}
	if a := c.get("/search/code?q=x", ""); a.status != 401 {
		t.Errorf("anonymous code search: %d", a.status)
	}
	nf := c.get("/repos/octo", "tok-alice-1")
	if nf.status != 404 || nf.body != `{"message":"Not Found","documentation_url":"https://docs.github.com/rest","status":"404"}` {
		t.Errorf("404: %d %s", nf.status, nf.body)
	}
}

func TestGitHubAnonymousBucketPerIP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := githubServer(t, nil)
		c1 := newClient(t, srv).from("10.0.0.1:5000", srv)
		c2 := newClient(t, srv).from("10.0.0.2:5000", srv)
		for i := range 60 {
			if a := c1.get("/repos/o/r", ""); a.status != 200 || a.h("X-RateLimit-Remaining") != strconv.Itoa(59-i) {
				t.Fatalf("request %d: %d remaining %s", i+1, a.status, a.h("X-RateLimit-Remaining"))
			}
		}
		a := c1.get("/repos/o/r", "")
		if a.status != 403 || !strings.Contains(a.body, "API rate limit exceeded for 10.0.0.1. (But here's the good news: Authenticated requests get a higher rate limit.") {
			t.Errorf("61st anonymous request: %d %s", a.status, a.body)
		}
		if a.h("Cache-Control") != "public, max-age=60, s-maxage=60" {
			t.Errorf("anonymous Cache-Control %q", a.h("Cache-Control"))
		}
		if a := c2.get("/repos/o/r", ""); a.status != 200 || a.h("X-RateLimit-Limit") != "60" || a.h("X-RateLimit-Remaining") != "59" {
			t.Errorf("another IP: %d %s/%s", a.status, a.h("X-RateLimit-Remaining"), a.h("X-RateLimit-Limit"))
		}
		st := srv.Stats()
		b1, ok1 := st.BucketFor("github", "10.0.0.1", "core")
		b2, ok2 := st.BucketFor("github", "10.0.0.2", "core")
		if !ok1 || !ok2 || !b1.Anonymous || b1.Accepted != 60 || b1.Violations != 1 || b2.Accepted != 1 {
			t.Errorf("anonymous stats %+v %+v", b1, b2)
		}
	})
}
