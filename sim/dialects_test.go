package sim

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// GitLab's Rack::Attack headers: fixed periods aligned on the epoch,
// Observed including this request, Limit scaled to a minute, and on 429
// "Retry later" with ResetTime (HTTP date) and Retry-After.
func TestGitLabHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "gitlab", Tokens: []TokenConfig{{Token: "tok-gl-1", Owner: "gina"}}}}})
		c := newClient(t, srv)
		time.Sleep(10 * time.Second)
		reset := t0 + 60 // fixed windows: the reset does not depend on the first request
		a := c.do("GET", "/api/v4/projects/group%2Fproject", "Private-Token", "tok-gl-1")
		if a.status != 200 {
			t.Fatalf("status %d: %s", a.status, a.body)
		}
		wantHeaders(t, a, map[string]string{
			"RateLimit-Name": "throttle_authenticated_api", "RateLimit-Limit": "2000", "RateLimit-Observed": "1",
			"RateLimit-Remaining": "1999", "RateLimit-Reset": strconv.FormatInt(reset, 10),
			"RateLimit-ResetTime": "", "Retry-After": "",
		})
		if p := a.json(t); p["path_with_namespace"] != "group/project" {
			t.Errorf("project %v", p)
		}
		anon := c.get("/api/v4/projects/42", "")
		wantHeaders(t, anon, map[string]string{"RateLimit-Name": "throttle_unauthenticated_api", "RateLimit-Limit": "500", "RateLimit-Observed": "1"})
	})
}

func TestGitLabThrottled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 100 requests per 120 s is reported as 50 a minute, as GitLab does.
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "gitlab", Tokens: []TokenConfig{{Token: "tok-gl-1"}}, Limit: 100, Window: 2 * time.Minute}}})
		c := newClient(t, srv)
		time.Sleep(30 * time.Second)
		for range 100 {
			c.get("/api/v4/user", "tok-gl-1")
		}
		a := c.get("/api/v4/user", "tok-gl-1")
		reset := t0 + 120
		// Rack::Attack's throttled responder sends exactly "text/plain".
		if a.status != 429 || a.body != "Retry later\n" || a.h("Content-Type") != "text/plain" {
			t.Fatalf("throttled: %d %q", a.status, a.body)
		}
		wantHeaders(t, a, map[string]string{
			"RateLimit-Limit": "50", "RateLimit-Observed": "101", "RateLimit-Remaining": "0",
			"RateLimit-Reset": strconv.FormatInt(reset, 10), "RateLimit-ResetTime": unix(reset), "Retry-After": "90",
		})
		// Rack::Attack keeps counting refused requests.
		if a := c.get("/api/v4/user", "tok-gl-1"); a.h("RateLimit-Observed") != "102" {
			t.Errorf("observed %q, want 102", a.h("RateLimit-Observed"))
		}
		time.Sleep(90 * time.Second)
		if a := c.get("/api/v4/user", "tok-gl-1"); a.status != 200 || a.h("RateLimit-Observed") != "1" {
			t.Errorf("next period: %d observed %q", a.status, a.h("RateLimit-Observed"))
		}
	})
}

func TestGitLabEndpoints(t *testing.T) {
	srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "gitlab", Tokens: []TokenConfig{{Token: "tok-gl-1", Owner: "gina", UserID: 77}}}}})
	c := newClient(t, srv)
	if u := c.do("GET", "/api/v4/user", "Authorization", "Bearer tok-gl-1").json(t); u["username"] != "gina" || u["id"] != 77.0 {
		t.Errorf("user %v", u)
	}
	if a := c.get("/api/v4/user?private_token=tok-gl-1", ""); a.status != 200 {
		t.Errorf("private_token query: %d", a.status)
	}
	raw := c.get("/api/v4/projects/grp%2Fproj/repository/files/README.md/raw?ref=main", "tok-gl-1")
	if raw.status != 200 || !strings.HasPrefix(raw.body, "# proj\n") {
		t.Errorf("raw README: %d %q", raw.status, raw.body)
	}
	file := c.get("/api/v4/projects/grp%2Fproj/repository/files/README.md?ref=main", "tok-gl-1").json(t)
	dec, _ := base64.StdEncoding.DecodeString(file["content"].(string))
	if string(dec) != raw.body || file["file_path"] != "README.md" {
		t.Errorf("file JSON %v does not match raw", file)
	}
	nested := c.get("/api/v4/projects/7/repository/files/docs%2Fguide.md/raw", "tok-gl-1")
	if nested.status != 200 || !strings.HasPrefix(nested.body, "docs/guide.md\n") {
		t.Errorf("nested file: %d %q", nested.status, nested.body)
	}
	mr := c.get("/api/v4/projects/grp%2Fproj/merge_requests?per_page=5&page=2", "tok-gl-1")
	var items []map[string]any
	mustJSON(t, mr.body, &items)
	total, _ := strconv.Atoi(mr.h("X-Total"))
	pages := (total + 4) / 5
	wantHeaders(t, mr, map[string]string{"X-Page": "2", "X-Per-Page": "5", "X-Next-Page": "3", "X-Prev-Page": "1", "X-Total-Pages": strconv.Itoa(pages)})
	if len(items) != 5 || items[0]["iid"] != float64(total-5) {
		t.Errorf("page 2 items %d, first iid %v (total %d)", len(items), items[0]["iid"], total)
	}
	if l := mr.h("Link"); !strings.Contains(l, `merge_requests?page=3&per_page=5>; rel="next"`) || !strings.Contains(l, `rel="first"`) || !strings.Contains(l, `page=`+strconv.Itoa(pages)+`&per_page=5>; rel="last"`) {
		t.Errorf("Link %q", l)
	}
	if a := c.get("/api/v4/nothing", "tok-gl-1"); a.status != 404 || a.body != `{"error":"404 Not Found"}` {
		t.Errorf("404: %d %s", a.status, a.body)
	}
	if a := c.get("/api/v4/user", "tok-wrong"); a.status != 401 || a.body != `{"message":"401 Unauthorized"}` {
		t.Errorf("401: %d %s", a.status, a.body)
	}
}

// Hugging Face sends the IETF draft's structured fields exactly as its
// docs show: RateLimit: "api";r=R;t=T and
// RateLimit-Policy: "fixed window";"api";q=Q;w=W.
func TestHuggingFaceHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "hf", Tokens: []TokenConfig{{Token: "tok-hf-1", Owner: "hugo"}}}}})
		c := newClient(t, srv)
		time.Sleep(12 * time.Second)
		cases := []struct {
			path, token, rl, policy string
		}{
			{"/api/models/org/model", "tok-hf-1", `"api";r=999;t=288`, `"fixed window";"api";q=1000;w=300`},
			{"/api/whoami-v2", "tok-hf-1", `"api";r=998;t=288`, `"fixed window";"api";q=1000;w=300`},
			{"/org/model/resolve/main/README.md", "tok-hf-1", `"resolvers";r=4999;t=288`, `"fixed window";"resolvers";q=5000;w=300`},
			{"/api/models/org/model", "", `"api";r=499;t=288`, `"fixed window";"api";q=500;w=300`},
			{"/org/model", "", `"pages";r=99;t=288`, `"fixed window";"pages";q=100;w=300`},
		}
		for _, tc := range cases {
			a := c.get(tc.path, tc.token)
			wantHeaders(t, a, map[string]string{"RateLimit": tc.rl, "RateLimit-Policy": tc.policy})
		}
	})
}

func TestHuggingFaceThrottled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "huggingface", Tokens: []TokenConfig{{Token: "tok-hf-1"}}, Limit: 2}}})
		c := newClient(t, srv)
		c.get("/api/models/o/m", "tok-hf-1")
		c.get("/api/models/o/m", "tok-hf-1")
		time.Sleep(100 * time.Second)
		a := c.get("/api/models/o/m", "tok-hf-1")
		if a.status != 429 || !strings.Contains(a.json(t)["error"].(string), "you hit the quota of 2 api requests per 5 minutes period") {
			t.Fatalf("throttled: %d %s", a.status, a.body)
		}
		wantHeaders(t, a, map[string]string{"RateLimit": `"api";r=0;t=200`, "RateLimit-Policy": `"fixed window";"api";q=2;w=300`})
		// The resolvers bucket is separate.
		if a := c.get("/o/m/resolve/main/config.json", "tok-hf-1"); a.status != 200 || a.h("X-Repo-Commit") == "" {
			t.Errorf("resolver while api is empty: %d", a.status)
		}
		time.Sleep(200 * time.Second)
		if a := c.get("/api/models/o/m", "tok-hf-1"); a.status != 200 {
			t.Errorf("next window: %d", a.status)
		}
	})
}

func TestHuggingFaceEndpoints(t *testing.T) {
	srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "hf", Tokens: []TokenConfig{{Token: "tok-hf-1", Owner: "hugo"}}}}})
	c := newClient(t, srv)
	if w := c.get("/api/whoami-v2", "tok-hf-1").json(t); w["name"] != "hugo" || w["type"] != "user" {
		t.Errorf("whoami %v", w)
	}
	if a := c.get("/api/whoami-v2", ""); a.status != 401 || a.body != `{"error":"Invalid credentials in Authorization header"}` {
		t.Errorf("whoami without token: %d %s", a.status, a.body)
	}
	m := c.get("/api/models/org/model", "tok-hf-1").json(t)
	if m["id"] != "org/model" || m["modelId"] != "org/model" || len(m["sha"].(string)) != 40 {
		t.Errorf("model %v", m)
	}
	if d := c.get("/api/datasets/org/data", "tok-hf-1").json(t); d["id"] != "org/data" {
		t.Errorf("dataset %v", d)
	}
	r := c.get("/org/model/resolve/main/README.md", "tok-hf-1")
	if r.status != 200 || !strings.HasPrefix(r.body, "# model\n") || r.h("X-Repo-Commit") != m["sha"] || !strings.HasPrefix(r.h("ETag"), `"`) {
		t.Errorf("resolve: %d %q commit %s etag %s", r.status, r.body, r.h("X-Repo-Commit"), r.h("ETag"))
	}
	if a := c.get("/datasets/org/data/resolve/main/data/train.csv", "tok-hf-1"); a.status != 200 {
		t.Errorf("dataset resolve: %d", a.status)
	}
	if a := c.get("/api/unknown", "tok-hf-1"); a.status != 404 || !strings.Contains(a.body, `"error"`) {
		t.Errorf("404: %d %s", a.status, a.body)
	}
}

// Gitea and Forgejo send no rate-limit headers and limit nothing unless
// told to; then they refuse like Codeberg's proxy (429, Retry-After, no
// body), with X-RateLimit-* only when RateLimitHeaders is set.
func TestGiteaRateLimiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{
			{Dialect: "gitea", Prefix: "/plain", Tokens: []TokenConfig{{Token: "tok-gt-1"}}},
			{Name: "proxied", Dialect: "codeberg", Prefix: "/proxied", Tokens: []TokenConfig{{Token: "tok-gt-1"}}, Limit: 2, Window: time.Minute},
			{Name: "headers", Dialect: "forgejo", Prefix: "/headers", Tokens: []TokenConfig{{Token: "tok-gt-1"}}, Limit: 2, Window: time.Minute, RateLimitHeaders: boolp(true)},
		}})
		c := newClient(t, srv)
		for range 50 {
			a := c.do("GET", "/plain/api/v1/repos/o/r", "Authorization", "token tok-gt-1")
			if a.status != 200 {
				t.Fatalf("unlimited gitea: %d", a.status)
			}
			wantHeaders(t, a, map[string]string{"X-RateLimit-Limit": "", "X-RateLimit-Remaining": "", "RateLimit": "", "Retry-After": ""})
		}
		c.get("/proxied/api/v1/repos/o/r", "tok-gt-1")
		a := c.get("/proxied/api/v1/repos/o/r", "tok-gt-1")
		wantHeaders(t, a, map[string]string{"X-RateLimit-Limit": ""})
		time.Sleep(15 * time.Second)
		a = c.get("/proxied/api/v1/repos/o/r", "tok-gt-1")
		if a.status != 429 || a.body != "" {
			t.Errorf("proxy refusal: %d %q", a.status, a.body)
		}
		wantHeaders(t, a, map[string]string{"Retry-After": "45", "X-RateLimit-Limit": ""})

		a = c.get("/headers/api/v1/repos/o/r", "tok-gt-1")
		wantHeaders(t, a, map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": strconv.FormatInt(t0+15+60, 10)})
	})
}

func TestGiteaEndpoints(t *testing.T) {
	srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "gitea", Tokens: []TokenConfig{{Token: "tok-gt-1", Owner: "gitty"}}}}})
	c := newClient(t, srv)
	if u := c.do("GET", "/api/v1/user", "Authorization", "token tok-gt-1").json(t); u["login"] != "gitty" {
		t.Errorf("user %v", u)
	}
	if a := c.get("/api/v1/user?access_token=tok-gt-1", ""); a.status != 200 {
		t.Errorf("access_token query: %d", a.status)
	}
	if a := c.get("/api/v1/user", ""); a.status != 401 || !strings.Contains(a.body, `"message":"token is required"`) {
		t.Errorf("no token: %d %s", a.status, a.body)
	}
	if a := c.get("/api/v1/user", "tok-nope"); a.status != 401 || !strings.Contains(a.body, `"message":"invalid username, password or token"`) {
		t.Errorf("bad token: %d %s", a.status, a.body)
	}
	raw := c.get("/api/v1/repos/o/r/raw/README.md", "tok-gt-1")
	contents := c.get("/api/v1/repos/o/r/contents/README.md", "tok-gt-1").json(t)
	dec, _ := base64.StdEncoding.DecodeString(contents["content"].(string))
	if !strings.HasPrefix(raw.body, "# r\n") || string(dec) != raw.body {
		t.Errorf("raw %q vs contents %q", raw.body, dec)
	}
	is := c.get("/api/v1/repos/o/r/issues?limit=5", "tok-gt-1")
	if is.h("X-Total-Count") == "" || !strings.Contains(is.h("Link"), `rel="next"`) {
		t.Errorf("issues headers %v", is.header)
	}
	if a := c.do("POST", "/api/v1/repos/o/r/issues", "Authorization", "token tok-gt-1", `{"title":"t"}`); a.status != 201 {
		t.Errorf("create: %d %s", a.status, a.body)
	}
	if a := c.get("/api/v1/nothing", "tok-gt-1"); a.status != 404 || !strings.Contains(a.body, `"message":"The target couldn't be found."`) {
		t.Errorf("404: %d %s", a.status, a.body)
	}
}
