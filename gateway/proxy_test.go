package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

var simTokens = []sim.TokenConfig{
	{Token: "tok-alice-1", Owner: "alice"},
	{Token: "tok-alice-2", Owner: "alice"},
	{Token: "tok-bob-1", Owner: "bob"},
	{Token: "tok-carol-1", Owner: "carol"},
}

// Requests go through the gateway to the simulator with the gateway's
// tokens: both owners' buckets are spent, repeated GETs become free 304s,
// pagination links point back at the gateway, and no token shows.
func TestProxyEndToEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{githubAPI(100, time.Hour, simTokens...)},
			map[string][]string{"github": {"tok-alice-1", "tok-bob-1"}}, nil)

		resp, body := e.get(t, "/github/repos/golang/go")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		var repo map[string]any
		if err := json.Unmarshal([]byte(body), &repo); err != nil || repo["full_name"] != "golang/go" {
			t.Fatalf("body %q (%v)", body, err)
		}
		if c := resp.Header.Get(transport.HeaderCredential); !strings.HasPrefix(c, "#") {
			t.Fatalf("credential header %q", c)
		}
		// The rate-limit fields say what the pool can do (two owners
		// of 100 an hour); the server's own are kept.
		if resp.Header.Get("X-Ratelimit-Limit") != "200" || resp.Header.Get("X-Ratelimit-Remaining") != "199" {
			t.Fatalf("rate-limit fields are not the pool's: %v", resp.Header)
		}
		if resp.Header.Get(transport.HeaderUpstreamPrefix+"X-Ratelimit-Limit") != "100" {
			t.Fatalf("upstream rate-limit headers not passed on: %v", resp.Header)
		}

		// The same GET again is served from the cache while the answer
		// is fresh (s-maxage=60), without going upstream; with no-cache
		// it is revalidated: a free 304 upstream, the stored 200 for the
		// client, whichever of the gateway's tokens (they take turns)
		// goes.
		var body2 string
		before := upstreamRequests(e.srv)
		resp, body2 = e.get(t, "/github/repos/golang/go")
		if resp.StatusCode != http.StatusOK || body2 != body || resp.Header.Get(transport.HeaderCache) != "fresh" || upstreamRequests(e.srv) != before {
			t.Fatalf("GET again: %d %q, same body %v, %d upstream", resp.StatusCode, resp.Header.Get(transport.HeaderCache), body2 == body, upstreamRequests(e.srv)-before)
		}
		revalidated := 0
		for range 3 {
			resp, body2 = e.do(t, http.MethodGet, "/github/repos/golang/go", http.Header{"Cache-Control": {"no-cache"}}, nil)
			if resp.StatusCode != http.StatusOK || body2 != body {
				t.Fatalf("GET again: %d, same body %v", resp.StatusCode, body2 == body)
			}
			if resp.Header.Get(transport.HeaderCache) == "revalidated" {
				revalidated++
			}
		}
		if revalidated != 3 {
			t.Fatalf("%d of 3 repeated GETs with no-cache revalidated", revalidated)
		}

		// A client's own conditional request gets the upstream's 304,
		// whichever token goes: GitHub's tags hash the token, so the
		// transport adds the tag for the token sent, computed from the
		// answer the client's tag names, and the client keeps its tag.
		etag := resp.Header.Get("Etag")
		resp, body3 := e.do(t, http.MethodGet, "/github/repos/golang/go", http.Header{"If-None-Match": {etag}}, nil)
		if etag == "" || resp.StatusCode != http.StatusNotModified || body3 != "" {
			t.Fatalf("If-None-Match %q: %d %q", etag, resp.StatusCode, body3)
		}

		// Distinct reads spread over both owners' buckets.
		for i := range 20 {
			resp, body := e.get(t, "/github/repos/o/r"+string(rune('a'+i)))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %d: %d %s", i, resp.StatusCode, body)
			}
			noSecret(t, "response", headerText(resp.Header)+body, "tok-")
		}
		st := e.srv.Stats()
		alice, _ := st.BucketFor("github", "alice", "core")
		bob, _ := st.BucketFor("github", "bob", "core")
		if alice.Charged == 0 || bob.Charged == 0 {
			t.Fatalf("charged alice %d, bob %d: want both tokens used", alice.Charged, bob.Charged)
		}
		if st.Total.NotModified == 0 {
			t.Fatal("no 304 upstream")
		}
		if st.Total.Violations != 0 {
			t.Fatalf("%d violations", st.Total.Violations)
		}

		// Pagination stays on the gateway.
		resp, _ = e.get(t, "/github/repos/o/r/issues?per_page=5")
		link := resp.Header.Get("Link")
		if resp.StatusCode != http.StatusOK || !strings.Contains(link, "<"+gwBase+"/github/repos/o/r/issues?") || strings.Contains(link, simHost) {
			t.Fatalf("Link %q (status %d)", link, resp.StatusCode)
		}
		next := strings.TrimPrefix(link[strings.Index(link, "<")+1:strings.Index(link, ">")], gwBase)
		if resp, body := e.get(t, next); resp.StatusCode != http.StatusOK {
			t.Fatalf("following %s: %d %s", next, resp.StatusCode, body)
		}

		// /status knows both credentials' buckets, as the transport does.
		rep := e.status(t)
		if len(rep.Credentials) != 2 {
			t.Fatalf("status credentials: %+v", rep.Credentials)
		}
		for _, c := range rep.Credentials {
			if len(c.Resources) == 0 || c.Resources[0].Remaining == nil || *c.Resources[0].Remaining >= 100 {
				t.Fatalf("credential %s: resources %+v", c.Credential, c.Resources)
			}
		}
		want, err := e.gw.Transport().Report(t.Context(), time.Now(), "github")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(rep.Credentials)
		exp, _ := json.Marshal(want.Credentials)
		if string(got) != string(exp) {
			t.Fatalf("/status differs from the transport's report:\n%s\n%s", got, exp)
		}
	})
}

// A body the upstream sends in pieces reaches the client piece by piece,
// and a POST's body is forwarded.
func TestPostBodyForwarded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{githubAPI(100, time.Hour, simTokens...)},
			map[string][]string{"github": {"tok-alice-1"}}, nil)
		resp, body := e.do(t, http.MethodPost, "/github/repos/o/r/issues", http.Header{"Content-Type": {"application/json"}},
			strings.NewReader(`{"title":"from the gateway"}`))
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST: %d %s", resp.StatusCode, body)
		}
		if !strings.Contains(body, "from the gateway") {
			t.Fatalf("created issue %s does not carry the title sent", body)
		}
	})
}

// The provider name in the path is matched case-insensitively and the
// provider root itself is reachable.
func TestRouteForms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{githubAPI(100, time.Hour, simTokens...)},
			map[string][]string{"github": {"tok-alice-1"}}, func(o *Options) {
				o.Hosts = map[string]string{"api.github.local": "github"}
			})
		if resp, body := e.get(t, "/GitHub/rate_limit"); resp.StatusCode != http.StatusOK {
			t.Fatalf("/GitHub/rate_limit: %d %s", resp.StatusCode, body)
		}
		// By Host: the whole path goes to the provider.
		req, _ := http.NewRequest(http.MethodGet, "http://api.github.local:8080/repos/o/r", nil)
		resp, err := e.client.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("host route: %v %v", err, resp)
		}
		resp.Body.Close()
	})
}

// With RefreshEvery, the quota view is filled without spending anything:
// nothing goes out at start; after the interval, GitHub's free /rate_limit
// is read with each token, which charges nothing.
func TestRefreshFillsStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{githubAPI(100, time.Hour, simTokens...)},
			map[string][]string{"github": {"tok-alice-1", "tok-bob-1"}}, nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { e.gw.refreshLoop(ctx, time.Hour); close(done) }()
		synctest.Wait()
		if st := e.srv.Stats().Total; st.Requests != 0 {
			t.Fatalf("%d requests at start, want none", st.Requests)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		rep := e.status(t)
		for _, c := range rep.Credentials {
			if len(c.Resources) < 2 {
				t.Fatalf("after a refresh, %s: %d resources, want /rate_limit's", c.Credential, len(c.Resources))
			}
		}
		if st := e.srv.Stats().Total; st.Requests != 2 || st.Charged != 0 {
			t.Fatalf("a refresh sent %d requests charged %d, want one free /rate_limit per token", st.Requests, st.Charged)
		}
		cancel()
		<-done
	})
}
