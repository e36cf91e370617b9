package sim

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// usersLimited is a GitLab API with one token (owner gina) whose
// GET /api/v4/users/:id allows limit requests per aligned minute.
func usersLimited(refusal string, limit int64) Config {
	return Config{APIs: []APIConfig{{Dialect: "gitlab", Tokens: []TokenConfig{{Token: "tok-gl-1", Owner: "gina"}, {Token: "tok-gl-2", Owner: "olga"}},
		EndpointLimits: []EndpointLimitConfig{{Pattern: "GET /api/v4/users/*", Name: "throttle_users_api", Limit: limit, Window: time.Minute, WindowMode: WindowFixed, Refusal: refusal}}}}}
}

// The four ways an endpoint limit refuses, as GitLab's servers do; while
// it admits, the answers carry the main throttle's headers only.
func TestEndpointLimitRefusalKinds(t *testing.T) {
	glHeaders := []string{"RateLimit-Name", "RateLimit-Limit", "RateLimit-Observed", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-ResetTime"}
	reset := t0 + 60
	cases := []struct {
		refusal     string
		contentType string
		body        string
		want        map[string]string // "" means absent
	}{
		{RefusalHeaders, ctJSON, `{"message":{"error":"This endpoint has been requested too many times. Try again later."}}`, map[string]string{
			"RateLimit-Name": "throttle_users_api", "RateLimit-Limit": "3", "RateLimit-Observed": "4", "RateLimit-Remaining": "0",
			"RateLimit-Reset": strconv.FormatInt(reset, 10), "RateLimit-ResetTime": unix(reset), "Retry-After": "50"}},
		{RefusalRetryAfter, ctJSON, `{"message":{"error":"This endpoint has been requested too many times. Try again later."}}`, map[string]string{"Retry-After": "50"}},
		{RefusalBare, ctJSON, `{"message":{"error":"This endpoint has been requested too many times. Try again later."}}`, map[string]string{"Retry-After": ""}},
		{RefusalPlain, "text/plain", "Retry later\n", map[string]string{"Retry-After": ""}},
	}
	for _, tc := range cases {
		t.Run(tc.refusal, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mustNew(t, usersLimited(tc.refusal, 3))
				c := newClient(t, srv)
				time.Sleep(10 * time.Second)
				for i := range 3 {
					a := c.do("GET", "/api/v4/users/"+strconv.Itoa(100+i), "Private-Token", "tok-gl-1")
					if a.status != 200 {
						t.Fatalf("request %d: %d %s", i+1, a.status, a.body)
					}
					// Only the main throttle speaks on success.
					wantHeaders(t, a, map[string]string{"RateLimit-Name": "throttle_authenticated_api", "RateLimit-Limit": "2000",
						"RateLimit-Remaining": strconv.Itoa(1999 - i), "Retry-After": ""})
				}
				a := c.do("GET", "/api/v4/users/103", "Private-Token", "tok-gl-1")
				if a.status != 429 || a.body != tc.body || a.h("Content-Type") != tc.contentType {
					t.Fatalf("4th request: %d %q %q, want 429 %q %q", a.status, a.h("Content-Type"), a.body, tc.contentType, tc.body)
				}
				want := map[string]string{}
				if tc.refusal != RefusalHeaders {
					for _, h := range glHeaders {
						want[h] = ""
					}
				}
				for k, v := range tc.want {
					want[k] = v
				}
				wantHeaders(t, a, want)

				// Other endpoints and other owners are not limited, and the
				// main throttle still looks healthy.
				p := c.do("GET", "/api/v4/projects/1", "Private-Token", "tok-gl-1")
				wantHeaders(t, p, map[string]string{"RateLimit-Name": "throttle_authenticated_api", "RateLimit-Remaining": "1995"})
				if p.status != 200 {
					t.Errorf("project: %d", p.status)
				}
				if o := c.do("GET", "/api/v4/users/103", "Private-Token", "tok-gl-2"); o.status != 200 {
					t.Errorf("another owner: %d", o.status)
				}
				time.Sleep(50 * time.Second)
				if a := c.do("GET", "/api/v4/users/103", "Private-Token", "tok-gl-1"); a.status != 200 {
					t.Errorf("next window: %d", a.status)
				}

				st := srv.Stats()
				e, ok := st.EndpointLimitFor("gitlab", "gina", "throttle_users_api")
				if !ok || e.Requests != 5 || e.Accepted != 4 || e.Refused != 1 || e.EarlyRetries != 0 {
					t.Errorf("endpoint limit stats %+v", e)
				}
				// The main throttle counted the refused request too, but did
				// not serve it.
				b, _ := st.BucketFor("gitlab", "gina", "")
				if b.Requests != 6 || b.Accepted != 5 || b.Charged != 6 || b.Violations != 0 {
					t.Errorf("gina's bucket %+v", b.Counters)
				}
				if st.Total.Violations != 1 || st.Total.EndpointViolations != 1 || st.APIs[0].EndpointViolations != 1 {
					t.Errorf("total %+v, api %+v", st.Total, st.APIs)
				}
			})
		})
	}
}

// Anonymous requests are counted per client IP, with the anonymous limit.
func TestEndpointLimitPerClientIP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := usersLimited(RefusalHeaders, 3)
		cfg.APIs[0].EndpointLimits[0].AnonymousLimit = 1
		srv := mustNew(t, cfg)
		c := newClient(t, srv)
		one, two := c.from("10.0.0.1:5000", srv), c.from("10.0.0.2:5000", srv)
		if a := one.get("/api/v4/users/1", ""); a.status != 200 {
			t.Fatalf("first anonymous: %d", a.status)
		}
		if a := one.get("/api/v4/users/1", ""); a.status != 429 || a.h("RateLimit-Limit") != "1" {
			t.Errorf("second from the same IP: %d limit %q", a.status, a.h("RateLimit-Limit"))
		}
		if a := two.get("/api/v4/users/1", ""); a.status != 200 {
			t.Errorf("another IP: %d", a.status)
		}
	})
}

// A client that retries a refused endpoint 1 s after Retry-After said 3
// is early; one that waits the 3 s is not, and neither is the refusal
// itself.
func TestEarlyRetriesOfAnEndpointLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, usersLimited(RefusalHeaders, 3))
		c := newClient(t, srv)
		time.Sleep(57 * time.Second)
		for _, tok := range []string{"tok-gl-1", "tok-gl-2"} {
			for range 3 {
				c.do("GET", "/api/v4/users/1", "Private-Token", tok)
			}
			if a := c.do("GET", "/api/v4/users/1", "Private-Token", tok); a.status != 429 || a.h("Retry-After") != "3" {
				t.Fatalf("%s: %d Retry-After %q, want 429 and 3", tok, a.status, a.h("Retry-After"))
			}
		}
		time.Sleep(time.Second)
		if a := c.do("GET", "/api/v4/users/1", "Private-Token", "tok-gl-1"); a.status != 429 {
			t.Errorf("gina's early retry: %d", a.status)
		}
		// Other endpoints of the owner are other scopes.
		c.do("GET", "/api/v4/projects/1", "Private-Token", "tok-gl-1")
		time.Sleep(2 * time.Second)
		for _, tok := range []string{"tok-gl-1", "tok-gl-2"} {
			if a := c.do("GET", "/api/v4/users/1", "Private-Token", tok); a.status != 200 {
				t.Errorf("%s after the reset: %d", tok, a.status)
			}
		}
		st := srv.Stats()
		gina, _ := st.EndpointLimitFor("gitlab", "gina", "throttle_users_api")
		olga, _ := st.EndpointLimitFor("gitlab", "olga", "throttle_users_api")
		if gina.EarlyRetries != 1 || gina.Refused != 2 || olga.EarlyRetries != 0 || olga.Refused != 1 {
			t.Errorf("gina %+v\nolga %+v", gina, olga)
		}
		if st.Total.EarlyRetries != 1 || st.APIs[0].EarlyRetries != 1 {
			t.Errorf("total early retries %d, API's %d, want 1", st.Total.EarlyRetries, st.APIs[0].EarlyRetries)
		}
	})
}

// A refusal that names no time (bare, plain) asks for MinRetryWait.
func TestEarlyRetriesAfterABareRefusal(t *testing.T) {
	for _, refusal := range []string{RefusalBare, RefusalPlain} {
		t.Run(refusal, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mustNew(t, usersLimited(refusal, 1))
				c := newClient(t, srv)
				c.do("GET", "/api/v4/users/1", "Private-Token", "tok-gl-1")
				c.do("GET", "/api/v4/users/1", "Private-Token", "tok-gl-1") // refused at 0 s
				time.Sleep(500 * time.Millisecond)
				c.do("GET", "/api/v4/users/1", "Private-Token", "tok-gl-1") // early; refused again, naming 1.5 s
				time.Sleep(time.Second)
				c.do("GET", "/api/v4/users/1", "Private-Token", "tok-gl-1") // waited: not early, yet refused
				e, _ := srv.Stats().EndpointLimitFor("gitlab", "gina", "throttle_users_api")
				if e.EarlyRetries != 1 || e.Refused != 3 {
					t.Errorf("%+v, want 1 early retry of 3 refusals", e)
				}
			})
		})
	}
}

// A request that arrives while the refusal's answer is still on its way
// to the client (the latency delays answers) was in flight: not early.
// One that arrives after the answer left was sent by a client that could
// know: early. One that arrived before the refusal was decided is neither.
func TestEarlyRetriesJudgedByArrival(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := usersLimited(RefusalHeaders, 1)
		cfg.APIs[0].Latency = time.Second
		srv := mustNew(t, cfg)
		c := newClient(t, srv)
		var wg sync.WaitGroup
		wg.Go(func() { c.do("GET", "/api/v4/users/1", "Private-Token", "tok-gl-1") }) // admitted
		synctest.Wait()
		time.Sleep(100 * time.Millisecond)
		wg.Go(func() { c.do("GET", "/api/v4/users/2", "Private-Token", "tok-gl-1") }) // refused at 0.1 s, answered at 1.1 s
		synctest.Wait()
		time.Sleep(400 * time.Millisecond)
		wg.Go(func() { c.do("GET", "/api/v4/users/3", "Private-Token", "tok-gl-1") }) // sent at 0.5 s, before the client could know
		synctest.Wait()
		time.Sleep(700 * time.Millisecond)
		wg.Go(func() { c.do("GET", "/api/v4/users/4", "Private-Token", "tok-gl-1") }) // sent at 1.2 s, after the refusal arrived
		wg.Wait()
		e, _ := srv.Stats().EndpointLimitFor("gitlab", "gina", "throttle_users_api")
		if e.Refused != 3 || e.EarlyRetries != 1 {
			t.Errorf("%+v, want 3 refusals, 1 early retry", e)
		}
	})
}

// An empty bucket's refusal names its reset: a request before it is
// early, at it is not.
func TestEarlyRetriesOfAnEmptyBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", Limit: 2, Window: time.Minute, Secondary: noSecondary(),
			Tokens: []TokenConfig{{Token: "tok-1", Owner: "alice"}}}}})
		c := newClient(t, srv)
		for range 3 {
			c.get("/repos/o/r", "tok-1")
		}
		time.Sleep(59 * time.Second)
		c.get("/repos/o/r", "tok-1") // early
		time.Sleep(time.Second)
		if a := c.get("/repos/o/r", "tok-1"); a.status != 200 {
			t.Errorf("at the reset: %d", a.status)
		}
		b, _ := srv.Stats().BucketFor("github", "alice", "")
		if b.EarlyRetries != 1 || b.PrimaryViolations != 2 {
			t.Errorf("%+v, want 1 early retry of 2 violations", b.Counters)
		}
	})
}

// A GitHub secondary refusal without retry-after asks for a minute
// whatever the penalty; with retry-after, the penalty's end. Elsewhere a
// refusal without Retry-After asks for MinRetryWait.
func TestEarlyRetriesOfASecondaryPenalty(t *testing.T) {
	cases := []struct {
		name       string
		dialect    string
		retryAfter bool
		wait       time.Duration // from the refusal to the retry
		early      int64
	}{
		{"github without retry-after, 30s", "github", false, 30 * time.Second, 1},
		{"github without retry-after, 61s", "github", false, 61 * time.Second, 0},
		{"github retry-after 10s, at 5s", "github", true, 5 * time.Second, 1},
		{"github retry-after 10s, at 10s", "github", true, 10 * time.Second, 0},
		{"gitlab without retry-after, at 0.5s", "gitlab", false, 500 * time.Millisecond, 1},
		{"gitlab without retry-after, at 1s", "gitlab", false, time.Second, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: tc.dialect, Tokens: []TokenConfig{{Token: "tok-1", Owner: "alice"}},
					Secondary: &SecondaryConfig{PointsPerMinute: 2, Penalty: 10 * time.Second, RetryAfter: tc.retryAfter}}}})
				c := newClient(t, srv)
				path := "/repos/o/r"
				if tc.dialect == "gitlab" {
					path = "/api/v4/projects/1"
				}
				for range 3 {
					c.get(path, "tok-1")
				}
				time.Sleep(tc.wait)
				c.get(path, "tok-1")
				b, _ := srv.Stats().BucketFor(tc.dialect, "alice", "")
				if b.EarlyRetries != tc.early || b.SecondaryViolations < 1 {
					t.Errorf("%+v, want %d early retries", b.Counters, tc.early)
				}
			})
		})
	}
}

func TestEndpointPatterns(t *testing.T) {
	cases := []struct {
		pattern, method, path string
		want                  bool
	}{
		{"GET /api/v4/users/*", "GET", "/api/v4/users/12", true},
		{"GET /api/v4/users/*", "HEAD", "/api/v4/users/12", true},
		{"GET /api/v4/users/*", "POST", "/api/v4/users/12", false},
		{"GET /api/v4/users/*", "GET", "/api/v4/users/12/followers", false},
		{"GET /api/v4/users/*", "GET", "/api/v4/users", false},
		{"/api/v4/users/**", "GET", "/api/v4/users/12/followers", true},
		{"/api/v4/users/**", "DELETE", "/api/v4/users/12", true},
		{"/api/v4/users/**", "GET", "/api/v4/users", false},
		{"/api/v4/**/raw", "GET", "/api/v4/projects/1/repository/files/a%2Fb/raw", true},
		{"/api/v4/**/raw", "GET", "/api/v4/projects/1/repository/files/a%2Fb", false},
		{"post /api/v4/projects/*/issues", "POST", "/api/v4/projects/7/issues/", true},
		// GitLab takes a project's path as its id, one encoded segment.
		{"POST /api/v4/projects/*/issues", "POST", "/api/v4/projects/group%2Fproject/issues", true},
		{"POST /api/v4/projects/*/issues", "POST", "/api/v4/projects/a%2Fb%2Fc/issues", true},
		{"POST /api/v4/projects/*/issues", "POST", "/api/v4/projects/group/project/issues", false},
		{"/api/v4/projects/group%2Fproject/**", "GET", "/api/v4/projects/group%2fproject/issues", true},
		{"/api/v4/projects/group%2Fproject/**", "GET", "/api/v4/projects/group/project/issues", false},
		{"/**", "GET", "/anything/at/all", true},
	}
	for _, tc := range cases {
		p, err := parseEndpointPattern(tc.pattern)
		if err != nil {
			t.Fatalf("%q: %v", tc.pattern, err)
		}
		if got := p.matches(tc.method, splitPath(tc.path)); got != tc.want {
			t.Errorf("%q matches %s %s = %v, want %v", tc.pattern, tc.method, tc.path, got, tc.want)
		}
	}
}

func TestValidateEndpointLimits(t *testing.T) {
	cfg := func(l ...EndpointLimitConfig) Config {
		return Config{APIs: []APIConfig{{Dialect: "gitlab", EndpointLimits: l}}}
	}
	ok := EndpointLimitConfig{Pattern: "GET /api/v4/users/*", Limit: 40, Window: time.Minute}
	with := func(mod func(*EndpointLimitConfig)) EndpointLimitConfig { l := ok; mod(&l); return l }
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"missing pattern", cfg(with(func(l *EndpointLimitConfig) { l.Pattern = "" })), `apis[0].endpoint_limits[0].pattern: missing (want "[METHOD ]PATH"`},
		{"method", cfg(with(func(l *EndpointLimitConfig) { l.Pattern = "FETCH /x" })), `apis[0].endpoint_limits[0].pattern: "FETCH /x": unknown method "FETCH"`},
		{"relative", cfg(with(func(l *EndpointLimitConfig) { l.Pattern = "GET users/*" })), "the path does not start with /"},
		{"partial star", cfg(with(func(l *EndpointLimitConfig) { l.Pattern = "/users/ab*" })), `segment "ab*" mixes * with text`},
		{"query", cfg(with(func(l *EndpointLimitConfig) { l.Pattern = "/users?page=1" })), "has a query"},
		{"root", cfg(with(func(l *EndpointLimitConfig) { l.Pattern = "/" })), "matches only the root"},
		{"missing limit", cfg(with(func(l *EndpointLimitConfig) { l.Limit = 0 })), "apis[0].endpoint_limits[0].limit: missing (want the requests admitted per window"},
		{"negative limit", cfg(with(func(l *EndpointLimitConfig) { l.Limit = -2 })), "apis[0].endpoint_limits[0].limit: -2 is negative"},
		{"missing window", cfg(with(func(l *EndpointLimitConfig) { l.Window = 0 })), "apis[0].endpoint_limits[0].window: missing"},
		{"fractional window", cfg(with(func(l *EndpointLimitConfig) { l.Window = 1500 * time.Millisecond })), "window: 1.5s is not a whole, positive number of seconds"},
		{"mode", cfg(with(func(l *EndpointLimitConfig) { l.WindowMode = "sliding" })), `window_mode: unknown mode "sliding" (want fixed or rolling)`},
		{"refusal", cfg(with(func(l *EndpointLimitConfig) { l.Refusal = "silent" })), `apis[0].endpoint_limits[0].refusal: unknown refusal "silent" (want headers, retry-after, bare or plain)`},
		{"anonymous", cfg(with(func(l *EndpointLimitConfig) { l.AnonymousLimit = -1 })), "anonymous_limit: -1 is negative"},
		{"name", cfg(with(func(l *EndpointLimitConfig) { l.Name = "users api" })), "name: \"users api\" contains spaces"},
		{"duplicate name", cfg(ok, with(func(l *EndpointLimitConfig) { l.Name = "endpoint_limit_1" })), `apis[0].endpoint_limits[1].name: "endpoint_limit_1" is also the name of endpoint_limits[0]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if err := cfg(ok, with(func(l *EndpointLimitConfig) {
		l.Pattern = "/api/v4/projects/**"
		l.Refusal = "Bare"
		l.WindowMode = "rolling"
	})).Validate(); err != nil {
		t.Errorf("valid limits: %v", err)
	}
	if err := cfg(GitLabUsersAPILimits(RefusalPlain)...).Validate(); err != nil {
		t.Errorf("GitLab's users API limits: %v", err)
	}
}

// The file keys of an endpoint limit, in TOML and JSON, and what /_stats
// shows of it.
func TestEndpointLimitFromFileAndStats(t *testing.T) {
	toml := `
[[apis]]
dialect = "gitlab"
tokens = [{ token = "tok-gl-1", owner = "gina" }]

[[apis.endpoint_limits]]
pattern = "GET /api/v4/users/*"
name = "throttle_authenticated_users_api"
limit = 1
window = "60s"
window_mode = "fixed"
refusal = "retry-after"
`
	js := `{"apis":[{"dialect":"gitlab","tokens":[{"token":"tok-gl-1","owner":"gina"}],
"endpoint_limits":[{"pattern":"GET /api/v4/users/*","name":"throttle_authenticated_users_api","limit":1,"window":"60s","window_mode":"fixed","refusal":"retry-after"}]}]}`
	for format, text := range map[string]string{"toml": toml, "json": js} {
		cfg, err := ParseConfig([]byte(text), format)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		want := EndpointLimitConfig{Pattern: "GET /api/v4/users/*", Name: "throttle_authenticated_users_api", Limit: 1, Window: time.Minute, WindowMode: "fixed", Refusal: "retry-after"}
		if got := cfg.APIs[0].EndpointLimits; len(got) != 1 || got[0] != want {
			t.Errorf("%s: %+v", format, got)
		}
	}
	if _, err := ParseConfig([]byte(strings.Replace(toml, "refusal", "refusl", 1)), "toml"); err == nil || !strings.Contains(err.Error(), "apis.endpoint_limits.refusl: unknown field") {
		t.Errorf("misspelt key: %v", err)
	}

	cfg, _ := ParseConfig([]byte(toml), "toml")
	// On the real clock: an hour's window makes crossing its end between
	// two requests unlikely enough.
	cfg.APIs[0].EndpointLimits[0].Window = time.Hour
	srv := mustNew(t, cfg)
	ts := httptest.NewServer(srv)
	defer ts.Close()
	for range 3 {
		req, _ := http.NewRequest("GET", ts.URL+"/api/v4/users/5", nil)
		req.Header.Set("Private-Token", "tok-gl-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(ts.URL + "/_stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		EndpointLimits []map[string]any `json:"endpoint_limits"`
		APIs           []map[string]any `json:"apis"`
		Total          map[string]any   `json:"total"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if len(st.EndpointLimits) != 1 || st.EndpointLimits[0]["name"] != "throttle_authenticated_users_api" || st.EndpointLimits[0]["refused"] != 2.0 ||
		st.EndpointLimits[0]["owner"] != "gina" || st.EndpointLimits[0]["pattern"] != "GET /api/v4/users/*" {
		t.Errorf("endpoint limits %v", st.EndpointLimits)
	}
	// The third request came before the end of the window the second's
	// refusal named.
	if st.Total["endpoint_violations"] != 2.0 || st.Total["early_retries"] != 1.0 || st.APIs[0]["early_retries"] != 1.0 {
		t.Errorf("total %v, apis %v", st.Total, st.APIs)
	}
}

func TestParseEndpointLimit(t *testing.T) {
	l, err := ParseEndpointLimit("GET /api/v4/users/*=40/60s,refusal=bare,name=throttle_users_api,mode=rolling,anonymous=10")
	want := EndpointLimitConfig{Pattern: "GET /api/v4/users/*", Name: "throttle_users_api", Limit: 40, AnonymousLimit: 10,
		Window: time.Minute, WindowMode: "rolling", Refusal: "bare"}
	if err != nil || l != want {
		t.Errorf("got %+v, %v\nwant %+v", l, err, want)
	}
	for spec, msg := range map[string]string{
		"GET /x":           "no =LIMIT/WINDOW",
		"GET /x=40":        `"40" is not LIMIT/WINDOW`,
		"GET /x=40/soon":   `window "soon" is not a duration`,
		"GET /x=4/1s,ttl=": `unknown setting "ttl="`,
	} {
		if _, err := ParseEndpointLimit(spec); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want %q", spec, err, msg)
		}
	}
	cfg, err := QuickConfig(QuickOptions{Dialects: []string{"gitea"}, EndpointLimits: []EndpointLimitConfig{want}})
	if err != nil || len(cfg.APIs[0].EndpointLimits) != 1 {
		t.Errorf("quick config %+v, %v", cfg, err)
	}
	if _, err := QuickConfig(QuickOptions{Dialects: []string{"gitea"}, EndpointLimits: []EndpointLimitConfig{{Pattern: "x", Limit: 1, Window: time.Second}}}); err == nil ||
		!strings.Contains(err.Error(), "apis[0].endpoint_limits[0].pattern") {
		t.Errorf("bad quick limit: %v", err)
	}
}

// A request counted after a later refusal of the same period, but that
// arrived after the first, is early; one that arrived before any refusal,
// or at its very instant (in flight with it), is not.
func TestRefusalScopeKeepsThePeriodsStart(t *testing.T) {
	base := time.Unix(t0, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	var s refusalScope
	s.refuse(at(1000), at(5000))
	s.refuse(at(2000), at(5000))
	for ms, want := range map[int]bool{999: false, 1000: false, 1001: true, 1500: true, 4999: true, 5000: false} {
		if got := s.early(at(ms)); got != want {
			t.Errorf("arrived at %d ms: early %v, want %v", ms, got, want)
		}
	}
	s.refuse(at(6000), at(7000)) // a new period
	if s.early(at(5500)) || !s.early(at(6500)) {
		t.Errorf("the new period starts at its refusal: %+v", s)
	}
}
