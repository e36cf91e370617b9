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

func TestTokensOfOneOwnerShareABucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", Limit: 10, Secondary: noSecondary(), Tokens: []TokenConfig{
			{Token: "tok-alice-1", Owner: "alice"}, {Token: "tok-alice-2", Owner: "alice"}, {Token: "tok-bob-1", Owner: "bob"},
		}}}})
		c := newClient(t, srv)
		for range 4 {
			c.get("/repos/o/r", "tok-alice-1")
		}
		if a := c.get("/repos/o/r", "tok-alice-2"); a.h("X-RateLimit-Remaining") != "5" || a.h("X-RateLimit-Used") != "5" {
			t.Errorf("alice's second token: remaining %s used %s, want the shared 5/5", a.h("X-RateLimit-Remaining"), a.h("X-RateLimit-Used"))
		}
		if a := c.get("/repos/o/r", "tok-bob-1"); a.h("X-RateLimit-Remaining") != "9" {
			t.Errorf("bob: remaining %s, want his own 9", a.h("X-RateLimit-Remaining"))
		}
		for range 5 {
			c.get("/repos/o/r", "tok-alice-2")
		}
		if a := c.get("/repos/o/r", "tok-alice-1"); a.status != 403 {
			t.Errorf("alice after 10 requests over two tokens: %d, want 403", a.status)
		}
		st := srv.Stats()
		alice, _ := st.BucketFor("github", "alice", "")
		if alice.Accepted != 10 || alice.Violations != 1 {
			t.Errorf("alice's bucket %+v", alice.Counters)
		}
		n := 0
		for _, b := range st.Buckets {
			if b.Owner == "alice" && b.Resource == "core" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("alice has %d core buckets, want 1", n)
		}
		if infos := srv.APIs(); infos[0].Tokens[1].Owner != "alice" || strings.Contains(infos[0].Tokens[1].Masked, "tok-alice-2") {
			t.Errorf("token info %+v", infos[0].Tokens)
		}
	})
}

func TestTokenLimitOverride(t *testing.T) {
	srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", Secondary: noSecondary(), Tokens: []TokenConfig{
		{Token: "tok-app-1", Owner: "app", Limit: 15000}, {Token: "tok-user-1"},
	}}}})
	c := newClient(t, srv)
	if a := c.get("/repos/o/r", "tok-app-1"); a.h("X-RateLimit-Limit") != "15000" {
		t.Errorf("app limit %s", a.h("X-RateLimit-Limit"))
	}
	if a := c.get("/repos/o/r", "tok-user-1"); a.h("X-RateLimit-Limit") != "5000" {
		t.Errorf("user limit %s", a.h("X-RateLimit-Limit"))
	}
}

func TestWindowModes(t *testing.T) {
	for _, tc := range []struct {
		mode              string
		firstReset, later int64 // reset of the first window; of the window after it
	}{
		// Rolling: the window opens with the first request (t0+25) and the
		// next one with the first request after it ended (t0+130).
		{WindowRolling, t0 + 25 + 60, t0 + 130 + 60},
		// Fixed: aligned on multiples of the window.
		{WindowFixed, t0 + 60, t0 + 180},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", Limit: 5, Window: time.Minute, WindowMode: tc.mode,
					Secondary: noSecondary(), Tokens: []TokenConfig{{Token: "tok-w-1"}}}}})
				c := newClient(t, srv)
				time.Sleep(25 * time.Second)
				a := c.get("/repos/o/r", "tok-w-1")
				if got := a.h("X-RateLimit-Reset"); got != strconv.FormatInt(tc.firstReset, 10) {
					t.Errorf("first reset %s, want %d", got, tc.firstReset)
				}
				time.Sleep(105 * time.Second) // t0+130
				a = c.get("/repos/o/r", "tok-w-1")
				if got := a.h("X-RateLimit-Reset"); got != strconv.FormatInt(tc.later, 10) || a.h("X-RateLimit-Used") != "1" {
					t.Errorf("later reset %s used %s, want %d and 1", got, a.h("X-RateLimit-Used"), tc.later)
				}
			})
		})
	}
}

func TestUnknownTokenIs401AndCountedNotCharged(t *testing.T) {
	cases := []struct {
		dialect, path, auth, body string
	}{
		{"github", "/repos/o/r", "token tok-bad-1", `{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest","status":"401"}`},
		{"gitlab", "/api/v4/projects/1", "Bearer tok-bad-1", `{"message":"401 Unauthorized"}`},
		{"hf", "/api/models/o/m", "Bearer tok-bad-1", `{"error":"Invalid credentials in Authorization header"}`},
		{"gitea", "/api/v1/repos/o/r", "token tok-bad-1", `{"message":"invalid username, password or token","url":"http://sim.test/api/swagger"}`},
	}
	for _, tc := range cases {
		t.Run(tc.dialect, func(t *testing.T) {
			srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: tc.dialect, Tokens: []TokenConfig{{Token: "tok-good-1"}}}}})
			c := newClient(t, srv)
			a := c.do("GET", tc.path, "Authorization", tc.auth)
			if a.status != 401 || a.body != tc.body {
				t.Errorf("got %d %s, want 401 %s", a.status, a.body, tc.body)
			}
			st := srv.Stats()
			if st.Total.Unauthorized != 1 || st.Total.Charged != 0 || st.Total.Requests != 1 {
				t.Errorf("stats total %+v", st.Total)
			}
			b, ok := st.BucketFor(apiName(APIConfig{Dialect: tc.dialect}), "127.0.0.1", "")
			if !ok || b.Unauthorized != 1 || !b.Anonymous {
				t.Errorf("the 401 is not on the client IP's bucket: %+v", st.Buckets)
			}
		})
	}
}

func TestRequireAuth(t *testing.T) {
	srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", RequireAuth: true, Tokens: []TokenConfig{{Token: "tok-1"}}}}})
	c := newClient(t, srv)
	if a := c.get("/repos/o/r", ""); a.status != 401 || !strings.Contains(a.body, "Requires authentication") {
		t.Errorf("anonymous with require_auth: %d %s", a.status, a.body)
	}
}

// Secondary limits: concurrency.
func TestSecondaryConcurrency(t *testing.T) {
	for _, retryAfter := range []bool{true, false} {
		t.Run("retry-after="+strconv.FormatBool(retryAfter), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", Latency: time.Second,
					Secondary: &SecondaryConfig{MaxConcurrent: 2, Penalty: 30 * time.Second, RetryAfter: retryAfter},
					Tokens:    []TokenConfig{{Token: "tok-c-1", Owner: "carol"}}}}})
				c := newClient(t, srv)
				answers := make([]answer, 3)
				var wg sync.WaitGroup
				for i := range answers {
					wg.Go(func() { answers[i] = c.get("/repos/o/r", "tok-c-1") })
					synctest.Wait() // in order: each request is in flight before the next starts
				}
				wg.Wait()
				if answers[0].status != 200 || answers[1].status != 200 {
					t.Fatalf("the first two: %d %d", answers[0].status, answers[1].status)
				}
				a := answers[2]
				if a.status != 403 || !strings.Contains(a.body, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.") ||
					!strings.Contains(a.body, "#about-secondary-rate-limits") {
					t.Fatalf("third concurrent request: %d %s", a.status, a.body)
				}
				want := ""
				if retryAfter {
					want = "30"
				}
				wantHeaders(t, a, map[string]string{"Retry-After": want, "X-RateLimit-Remaining": "4998"})
				// During the penalty, every request is refused, even alone.
				time.Sleep(10 * time.Second)
				if a := c.get("/repos/o/r", "tok-c-1"); a.status != 403 || (retryAfter && a.h("Retry-After") != "19") {
					t.Errorf("during the penalty: %d retry-after %q", a.status, a.h("Retry-After"))
				}
				time.Sleep(20 * time.Second)
				if a := c.get("/repos/o/r", "tok-c-1"); a.status != 200 {
					t.Errorf("after the penalty: %d", a.status)
				}
				b, _ := srv.Stats().BucketFor("github", "carol", "core")
				if b.SecondaryViolations != 2 || b.Violations != 2 || b.MaxInFlight != 3 || b.Charged != 3 {
					t.Errorf("stats %+v", b.Counters)
				}
			})
		})
	}
}

// Secondary limits: points per minute (GET 1, write 5) and write spacing.
func TestSecondaryPointsAndWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github",
			Secondary: &SecondaryConfig{PointsPerMinute: 12, Penalty: time.Minute, Status: 429},
			Tokens:    []TokenConfig{{Token: "tok-p-1", Owner: "pat"}}}}})
		c := newClient(t, srv)
		for i := range 7 {
			if a := c.get("/repos/o/r", "tok-p-1"); a.status != 200 {
				t.Fatalf("GET %d: %d", i+1, a.status)
			}
		}
		post := func() answer {
			return c.do("POST", "/repos/o/r/issues", "Authorization", "token tok-p-1", `{"title":"x"}`)
		}
		if a := post(); a.status != 201 { // 7 + 5 = 12 points
			t.Fatalf("write at 12 points: %d %s", a.status, a.body)
		}
		a := c.get("/repos/o/r", "tok-p-1") // 13 > 12
		if a.status != 429 || a.h("Retry-After") != "" || !strings.Contains(a.body, "secondary rate limit") {
			t.Fatalf("over the points: %d retry-after %q %s", a.status, a.h("Retry-After"), a.body)
		}
		time.Sleep(61 * time.Second) // penalty over, and the minute's points expired
		if a := c.get("/repos/o/r", "tok-p-1"); a.status != 200 {
			t.Errorf("a minute later: %d", a.status)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github",
			Secondary: &SecondaryConfig{WriteSpacing: time.Second, Penalty: 5 * time.Second, RetryAfter: true},
			Tokens:    []TokenConfig{{Token: "tok-p-1"}}}}})
		c := newClient(t, srv)
		post := func() answer {
			return c.do("POST", "/repos/o/r/issues", "Authorization", "token tok-p-1", `{"title":"x"}`)
		}
		if a := post(); a.status != 201 {
			t.Fatalf("first write: %d", a.status)
		}
		if a := c.get("/repos/o/r", "tok-p-1"); a.status != 200 {
			t.Errorf("a read between writes: %d", a.status)
		}
		time.Sleep(500 * time.Millisecond)
		if a := post(); a.status != 403 || a.h("Retry-After") != "5" {
			t.Errorf("write 0.5 s after a write: %d retry-after %q", a.status, a.h("Retry-After"))
		}
		time.Sleep(5 * time.Second)
		if a := post(); a.status != 201 {
			t.Errorf("write after the penalty: %d", a.status)
		}
		time.Sleep(time.Second)
		if a := post(); a.status != 201 {
			t.Errorf("write 1 s later: %d", a.status)
		}
	})
}

// The default GitHub secondary limits apply when Secondary is nil.
func TestGitHubDefaultSecondaryLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", Tokens: []TokenConfig{{Token: "tok-d-1"}}}}})
		if s := srv.APIs()[0].Secondary; s == nil || s.MaxConcurrent != 100 || s.PointsPerMinute != 900 || !s.RetryAfter {
			t.Fatalf("default secondary %+v", s)
		}
		c := newClient(t, srv)
		for i := range 900 {
			if a := c.get("/repos/o/r", "tok-d-1"); a.status != 200 {
				t.Fatalf("request %d: %d", i+1, a.status)
			}
		}
		if a := c.get("/repos/o/r", "tok-d-1"); a.status != 403 || a.h("Retry-After") != "60" {
			t.Errorf("901st request in a minute: %d retry-after %q", a.status, a.h("Retry-After"))
		}
	})
}

// A 304 costs nothing on GitHub; elsewhere it costs like any request.
func TestConditionalRequests(t *testing.T) {
	srv := mustNew(t, Config{APIs: []APIConfig{
		{Dialect: "github", Prefix: "/gh", Secondary: noSecondary(), Tokens: []TokenConfig{{Token: "tok-e-1"}}},
		{Dialect: "gitlab", Prefix: "/gl", Tokens: []TokenConfig{{Token: "tok-e-1"}}},
	}})
	c := newClient(t, srv)
	first := c.get("/gh/repos/o/r/issues", "tok-e-1")
	etag := first.h("ETag")
	if !strings.HasPrefix(etag, `W/"`) {
		t.Fatalf("ETag %q", etag)
	}
	nm := c.get("/gh/repos/o/r/issues", "tok-e-1", "If-None-Match", etag)
	if nm.status != 304 || nm.body != "" || nm.h("ETag") != etag || nm.h("X-RateLimit-Remaining") != "4999" || nm.h("X-RateLimit-Used") != "1" {
		t.Errorf("304: %d %q etag %q remaining %s", nm.status, nm.body, nm.h("ETag"), nm.h("X-RateLimit-Remaining"))
	}
	if other := c.get("/gh/repos/o/r/issues", "tok-e-1", "If-None-Match", `"nope"`); other.status != 200 {
		t.Errorf("stale tag: %d", other.status)
	}
	// A touch changes the content and its tag.
	if err := srv.Touch("/gh/repos/o/r/issues"); err != nil {
		t.Fatal(err)
	}
	changed := c.get("/gh/repos/o/r/issues", "tok-e-1", "If-None-Match", etag)
	if changed.status != 200 || changed.h("ETag") == etag {
		t.Errorf("after a touch: %d etag %q", changed.status, changed.h("ETag"))
	}
	// So does a write to the listing, over HTTP too.
	etag = changed.h("ETag")
	c.do("POST", "/gh/repos/o/r/issues", "Authorization", "token tok-e-1", `{"title":"new"}`)
	if a := c.get("/gh/repos/o/r/issues", "tok-e-1", "If-None-Match", etag); a.status != 200 {
		t.Errorf("after a write: %d", a.status)
	}
	etag = c.get("/gh/repos/o/r/readme", "tok-e-1").h("ETag")
	if a := c.do("POST", "/_sim/touch?path=/gh/repos/o/r/readme"); a.status != 204 {
		t.Errorf("POST /_sim/touch: %d %s", a.status, a.body)
	}
	if a := c.get("/gh/repos/o/r/readme", "tok-e-1", "If-None-Match", etag); a.status != 200 || a.h("ETag") == etag {
		t.Errorf("readme after touch: %d etag %q", a.status, a.h("ETag"))
	}
	if raw := c.get("/gh/repos/o/r/readme", "tok-e-1", "Accept", "application/vnd.github.raw"); !strings.Contains(raw.body, "Revision 1.") {
		t.Errorf("touched readme %q", raw.body)
	}
	if a := c.do("POST", "/_sim/touch?path=/nowhere/x"); a.status != 404 {
		t.Errorf("touch of an unmounted path: %d", a.status)
	}

	gl := c.get("/gl/api/v4/projects/1", "tok-e-1")
	gnm := c.get("/gl/api/v4/projects/1", "tok-e-1", "If-None-Match", gl.h("ETag"))
	if gnm.status != 304 || gnm.h("RateLimit-Observed") != "2" {
		t.Errorf("GitLab 304: %d observed %s, want 304 and 2", gnm.status, gnm.h("RateLimit-Observed"))
	}
	st := srv.Stats()
	gh, _ := st.BucketFor("github", "user1", "core")
	if gh.NotModified != 1 || gh.Charged != gh.Accepted-1 {
		t.Errorf("github stats %+v", gh.Counters)
	}
}

func TestEventsChangeOnSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", EventsEvery: 30 * time.Second, PollInterval: 15 * time.Second,
			Secondary: noSecondary(), Tokens: []TokenConfig{{Token: "tok-ev-1"}}}}})
		c := newClient(t, srv)
		a := c.get("/repos/o/r/events", "tok-ev-1")
		if a.h("X-Poll-Interval") != "15" {
			t.Errorf("X-Poll-Interval %q", a.h("X-Poll-Interval"))
		}
		time.Sleep(20 * time.Second)
		if b := c.get("/repos/o/r/events", "tok-ev-1", "If-None-Match", a.h("ETag")); b.status != 304 {
			t.Errorf("before the schedule: %d", b.status)
		}
		time.Sleep(10 * time.Second)
		b := c.get("/repos/o/r/events", "tok-ev-1", "If-None-Match", a.h("ETag"))
		if b.status != 200 {
			t.Fatalf("after 30 s: %d", b.status)
		}
		var before, after []map[string]any
		mustJSON(t, a.body, &before)
		mustJSON(t, b.body, &after)
		if after[0]["id"] == before[0]["id"] || after[1]["id"] != before[0]["id"] {
			t.Errorf("a new event should lead: %v then %v", before[0]["id"], after[0]["id"])
		}
	})
}

func TestClockSkewAndLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", Skew: -90 * time.Second, Latency: 250 * time.Millisecond,
			Secondary: noSecondary(), Tokens: []TokenConfig{{Token: "tok-s-1"}}}}})
		c := newClient(t, srv)
		start := time.Now()
		a := c.get("/repos/o/r", "tok-s-1")
		if took := time.Since(start); took != 250*time.Millisecond {
			t.Errorf("answer took %v, want the 250ms latency", took)
		}
		wantHeaders(t, a, map[string]string{"Date": unix(t0 - 90), "X-RateLimit-Reset": strconv.FormatInt(t0-90+3600, 10)})
	})
}

func TestStatsTimelineAndHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", Limit: 4, Secondary: noSecondary(), Tokens: []TokenConfig{{Token: "tok-t-1", Owner: "tim"}}}}})
		c := newClient(t, srv)
		for range 3 {
			c.get("/repos/o/r", "tok-t-1")
		}
		time.Sleep(2500 * time.Millisecond)
		c.get("/repos/o/r", "tok-t-1")
		c.get("/repos/o/r", "tok-t-1") // refused: not on the timeline
		st := srv.Stats()
		b, ok := st.BucketFor("github", "tim", "core")
		if !ok || len(b.Timeline) != 3 || b.Timeline[0] != 3 || b.Timeline[1] != 0 || b.Timeline[2] != 1 {
			t.Errorf("timeline %v", b.Timeline)
		}
		if !st.Start.Equal(time.Unix(t0, 0)) || b.Used != 4 || b.Remaining != 0 || b.Limit != 4 || b.WindowSeconds != 3600 || b.WindowMode != "rolling" {
			t.Errorf("bucket %+v start %v", b, st.Start)
		}
		if st.Total.Requests != 5 || st.Total.Violations != 1 || st.Total.Accepted != 4 {
			t.Errorf("total %+v", st.Total)
		}

		var got Stats
		mustJSON(t, c.get("/_stats", "").body, &got)
		gb, _ := got.BucketFor("github", "tim", "core")
		if gb.Violations != 1 || gb.Requests != 5 || gb.Timeline != nil {
			t.Errorf("/_stats bucket %+v", gb)
		}
		mustJSON(t, c.get("/_stats?timeline=1", "").body, &got)
		if gb, _ := got.BucketFor("github", "tim", "core"); len(gb.Timeline) != 3 {
			t.Errorf("/_stats?timeline=1 timeline %v", gb.Timeline)
		}
		var raw map[string]any
		_ = json.Unmarshal([]byte(c.get("/_stats", "").body), &raw)
		bk := raw["buckets"].([]any)[0].(map[string]any)
		for _, k := range []string{"requests", "not_modified", "unauthorized", "violations", "max_in_flight", "primary_violations", "secondary_violations"} {
			if _, ok := bk[k]; !ok {
				t.Errorf("/_stats bucket lacks %q: %v", k, bk)
			}
		}

		if a := c.do("POST", "/_sim/reset"); a.status != 204 {
			t.Fatalf("reset: %d", a.status)
		}
		if st := srv.Stats(); st.Total.Requests != 0 || !st.Start.Equal(time.Unix(t0, 0).Add(2500*time.Millisecond)) {
			t.Errorf("after reset %+v", st)
		}
		if a := c.get("/repos/o/r", "tok-t-1"); a.status != 200 || a.h("X-RateLimit-Remaining") != "3" {
			t.Errorf("after reset: %d remaining %s", a.status, a.h("X-RateLimit-Remaining"))
		}
	})
}

func TestMounts(t *testing.T) {
	srv := mustNew(t, Config{APIs: []APIConfig{
		{Dialect: "github", Tokens: []TokenConfig{{Token: "tok-m-1"}}},
		{Dialect: "gitlab", Tokens: []TokenConfig{{Token: "tok-m-1"}}},
		{Dialect: "hf", Tokens: []TokenConfig{{Token: "tok-m-1"}}},
		{Dialect: "gitea", Tokens: []TokenConfig{{Token: "tok-m-1"}}},
	}})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	infos := srv.APIs()
	want := map[string]string{"github": "/repos/o/r", "gitlab": "/api/v4/projects/1", "hf": "/api/models/o/m", "gitea": "/api/v1/repos/o/r"}
	for _, info := range infos {
		if info.Prefix != "/"+info.Name {
			t.Errorf("%s mounted at %q", info.Name, info.Prefix)
		}
		req, _ := http.NewRequest("GET", info.URL(ts.URL)+want[info.Name], nil)
		req.Header.Set("Authorization", "Bearer tok-m-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", info.Name, resp.StatusCode)
		}
	}
	resp, err := http.Get(ts.URL + "/bitbucket/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("unmounted path: %d", resp.StatusCode)
	}

	root := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github"}}})
	if info := root.APIs()[0]; info.Prefix != "/" || info.URL("http://h:1/") != "http://h:1" {
		t.Errorf("single API: prefix %q url %q", info.Prefix, info.URL("http://h:1/"))
	}
	if a := newClient(t, root).get("/repos/o/r", ""); a.status != 200 {
		t.Errorf("root mount: %d", a.status)
	}
}

func TestHEADAndUnknownMethod(t *testing.T) {
	srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", Secondary: noSecondary(), Tokens: []TokenConfig{{Token: "tok-h-1"}}}}})
	c := newClient(t, srv)
	a := c.do("HEAD", "/repos/o/r", "Authorization", "token tok-h-1")
	if a.status != 200 || a.body != "" || a.h("ETag") == "" {
		t.Errorf("HEAD: %d %q", a.status, a.body)
	}
	if a := c.do("DELETE", "/repos/o/r", "Authorization", "token tok-h-1"); a.status != 404 {
		t.Errorf("DELETE: %d", a.status)
	}
}

// Odd paths and methods never break the server: every dialect answers
// with a status, never a panic.
func TestOddRequests(t *testing.T) {
	srv := mustNew(t, Config{APIs: []APIConfig{
		{Dialect: "github", Secondary: noSecondary(), Tokens: []TokenConfig{{Token: "tok-o-1"}}}, {Dialect: "gitlab"}, {Dialect: "hf"}, {Dialect: "gitea"},
	}})
	c := newClient(t, srv)
	paths := []string{"", "/", "//", "/repos", "/repos//", "/repos/o//readme", "/users//events", "/search/", "/search/code",
		"/api", "/api/v4/projects/", "/api/v4/projects//repository/files//raw", "/api/v4/projects/%2F", "/api/models//",
		"/a/b/resolve/", "/a/b/resolve/main/", "/datasets/resolve", "/api/v1/repos/o/r/raw/", "/api/v1/users//",
		"/repos/o/r/issues?page=-1&per_page=0", "/repos/o/r/issues?page=99999", "/%zz", "/rate_limit?x=%zz"}
	for _, prefix := range []string{"/github", "/gitlab", "/hf", "/gitea"} {
		for _, p := range paths {
			for _, m := range []string{"GET", "POST", "PUT", "HEAD"} {
				a, err := c.try(m, prefix+p, "Authorization", "Bearer nobody")
				if err != nil {
					continue // not a valid URL for the client
				}
				if a.status < 200 || a.status > 599 {
					t.Errorf("%s %s%s: status %d", m, prefix, p, a.status)
				}
				b, err := c.try(m, prefix+p, "{}")
				if err == nil && (b.status < 200 || b.status > 599) {
					t.Errorf("%s %s%s anonymous: status %d", m, prefix, p, b.status)
				}
			}
		}
	}
	if a := c.get("/github/repos/o/r/issues?page=99999", "tok-o-1"); a.status != 200 || a.body != "[]" {
		t.Errorf("a page past the end: %d %q", a.status, a.body)
	}
}

func TestHTTPSLinksThroughTransport(t *testing.T) {
	srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github"}}})
	req, _ := http.NewRequest("GET", "https://api.github.com/repos/o/r", nil)
	resp, err := srv.Transport("").RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var repo map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&repo); err != nil || repo["url"] != "https://api.github.com/repos/o/r" {
		t.Errorf("repo url %v (%v)", repo["url"], err)
	}
}

// GitHub mixes the request's Accept, Authorization and Cookie into its
// entity tags, so a tag stored for one token never matches another's
// request: only the tag computed for the token sent gets the free 304.
func TestGitHubEntityTagsFollowTheRequest(t *testing.T) {
	srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", Secondary: noSecondary(),
		Tokens: []TokenConfig{{Token: "tok-a", Owner: "alice"}, {Token: "tok-b", Owner: "alice"}, {Token: "tok-c", Owner: "carol"}}}}})
	c := newClient(t, srv)
	a := c.get("/repos/o/r", "tok-a", "Accept", "application/vnd.github+json")
	rule := func(body string, parts ...string) string {
		s := ""
		for _, p := range parts {
			s += p + ":"
		}
		return `W/"` + sha256Hex([]byte(s+body)) + `"`
	}
	if want := rule(a.body, "application/vnd.github+json", "Bearer tok-a"); a.h("ETag") != want {
		t.Fatalf("ETag %s, want %s (Accept:Authorization:body)", a.h("ETag"), want)
	}
	if anon := c.get("/repos/o/r", ""); anon.h("ETag") != rule(anon.body) || anon.body != a.body {
		t.Errorf("anonymous ETag %s, want the body's hash alone %s", anon.h("ETag"), rule(anon.body))
	}
	cookie := c.get("/repos/o/r", "tok-a", "Cookie", "k=v")
	if want := rule(cookie.body, "Bearer tok-a", "k=v"); cookie.h("ETag") != want {
		t.Errorf("with a cookie and no Accept: %s, want %s", cookie.h("ETag"), want)
	}
	// Another token of the same owner: the stored tag is a full answer,
	// the tag computed for it a free 304.
	stale := c.get("/repos/o/r", "tok-b", "Accept", "application/vnd.github+json", "If-None-Match", a.h("ETag"))
	if stale.status != 200 {
		t.Errorf("another token's tag: %d, want 200", stale.status)
	}
	mine := rule(a.body, "application/vnd.github+json", "Bearer tok-b")
	for _, tok := range []string{"tok-b", "tok-c"} {
		want := rule(a.body, "application/vnd.github+json", "Bearer "+tok)
		if nm := c.get("/repos/o/r", tok, "Accept", "application/vnd.github+json", "If-None-Match", want); nm.status != 304 || nm.h("ETag") != want {
			t.Errorf("%s with its own tag: %d ETag %s, want 304 and %s", tok, nm.status, nm.h("ETag"), want)
		}
	}
	if stale.h("ETag") != mine {
		t.Errorf("full answer's ETag %s, want %s", stale.h("ETag"), mine)
	}
	st := srv.Stats()
	if st.Total.NotModified != 2 {
		t.Errorf("%d 304s, want 2", st.Total.NotModified)
	}
}

// A conditional request that would be a free 304 is refused at an empty
// bucket, as GitHub appears to (a production mirror falls back to its
// stored copy on exactly that 403): a client must not count on a free
// 304 it cannot be given.
func TestConditionalRequestRefusedAtAnEmptyBucket(t *testing.T) {
	srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", Limit: 2, Secondary: noSecondary(), Tokens: []TokenConfig{{Token: "tok-f-1"}}}}})
	c := newClient(t, srv)
	etag := c.get("/repos/o/r", "tok-f-1").h("ETag")
	if a := c.get("/repos/o/r", "tok-f-1", "If-None-Match", etag); a.status != 304 {
		t.Fatalf("with quota left: %d, want a free 304", a.status)
	}
	c.get("/repos/o/r2", "tok-f-1") // the last unit
	if a := c.get("/repos/o/r", "tok-f-1", "If-None-Match", etag); a.status != 403 || a.h("X-RateLimit-Remaining") != "0" {
		t.Errorf("at an empty bucket: %d remaining %s, want 403 and 0", a.status, a.h("X-RateLimit-Remaining"))
	}
}
