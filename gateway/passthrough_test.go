package gateway

import (
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

func bearer(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

// With pass-through, a client's own token goes upstream and its quota is
// tracked under its owner; without a token the gateway's own is used; a
// token the provider rejects gets 401; no token shows in any answer.
func TestPassThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{githubAPI(20, time.Hour, simTokens...)}, map[string][]string{"github": {"tok-bob-1"}},
			func(o *Options) { o.PassThrough = true; o.Client.MaxWait = time.Second })

		for i := range 3 {
			resp, body := e.do(t, http.MethodGet, "/github/repos/o/a"+string(rune('0'+i)), bearer("tok-alice-1"), nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("pass-through GET: %d %s", resp.StatusCode, body)
			}
			noSecret(t, "answer", headerText(resp.Header)+body, "tok-alice-1")
		}
		// The other token of the same owner spends the same bucket.
		resp, body := e.do(t, http.MethodGet, "/github/repos/o/b", http.Header{"Authorization": {"token tok-alice-2"}}, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("second token of alice: %d %s", resp.StatusCode, body)
		}
		if resp, body := e.get(t, "/github/repos/o/c"); resp.StatusCode != http.StatusOK {
			t.Fatalf("no token: %d %s", resp.StatusCode, body)
		}
		st := e.srv.Stats()
		alice, _ := st.BucketFor("github", "alice", "core")
		bob, _ := st.BucketFor("github", "bob", "core")
		// alice: 2 validations + 4 reads; bob: 1 validation + 1 read.
		if alice.Charged != 6 || bob.Charged != 2 {
			t.Fatalf("charged alice %d (want 6), bob %d (want 2)", alice.Charged, bob.Charged)
		}

		rep := e.status(t)
		var seen []string
		for _, c := range rep.Credentials {
			owner, _, _ := strings.Cut(c.Owner, " ")
			seen = append(seen, c.Credential+"/"+owner)
			if owner == "alice" {
				if len(c.Resources) == 0 || c.Resources[0].Remaining == nil || *c.Resources[0].Remaining != 20-6 {
					t.Fatalf("alice's pass-through credential %s: %+v", c.Credential, c.Resources)
				}
			}
		}
		if strings.Join(seen, " ") != "#1 …-1/bob #2 …-1/alice #3 …-2/alice" {
			t.Fatalf("status credentials: %v", seen)
		}
		_, raw := e.get(t, "/status")
		noSecret(t, "/status", raw, "tok-")

		// Alice's quota binds for her tokens, and only for them.
		for i := 0; ; i++ {
			resp, body := e.do(t, http.MethodGet, "/github/repos/o/d"+string(rune('a'+i)), bearer("tok-alice-2"), nil)
			if resp.StatusCode == http.StatusTooManyRequests {
				if resp.Header.Get("Retry-After") == "" {
					t.Fatal("429 without Retry-After")
				}
				break
			}
			if resp.StatusCode != http.StatusOK || i > 20 {
				t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
			}
		}
		if resp, body := e.get(t, "/github/repos/o/e"); resp.StatusCode != http.StatusOK {
			t.Fatalf("bob after alice ran out: %d %s", resp.StatusCode, body)
		}

		// A rejected token: 401, from the gateway, naming no token.
		for range 2 {
			resp, body := e.do(t, http.MethodGet, "/github/repos/o/r", bearer("tok-wrong-1"), nil)
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("bad token: %d %s", resp.StatusCode, body)
			}
			noSecret(t, "401", headerText(resp.Header)+body, "tok-wrong-1")
		}
		if v := e.srv.Stats().Total.PrimaryViolations; v != 0 {
			t.Fatalf("%d violations", v)
		}
	})
}

// Two clients' tokens are two identities: their identical GETs are not
// coalesced, while one token's are.
func TestPassThroughCoalescesPerToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{slowGitHub()}, nil, func(o *Options) { o.PassThrough = true })
		e.do(t, http.MethodGet, "/github/user", bearer("tok-alice-1"), nil)
		e.do(t, http.MethodGet, "/github/user", bearer("tok-carol-1"), nil)
		before := upstreamRequests(e.srv)
		var reqs []*http.Request
		for _, tok := range []string{"tok-alice-1", "tok-alice-1", "tok-carol-1", "tok-carol-1"} {
			reqs = append(reqs, getRequest("/github/repos/o/r", "Authorization", "Bearer "+tok))
		}
		for i, a := range e.concurrently(t, reqs) {
			if a.status != http.StatusOK {
				t.Fatalf("answer %d: %+v", i, a)
			}
		}
		if n := upstreamRequests(e.srv) - before; n != 2 {
			t.Fatalf("%d upstream requests, want one per token", n)
		}
	})
}

// Credentials in the wrong place are refused, not silently dropped.
func TestPassThroughRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{githubAPI(20, time.Hour, simTokens...)}, nil, func(o *Options) { o.PassThrough = true })
		cases := []struct {
			header http.Header
			code   string
		}{
			{http.Header{"Authorization": {"Basic dXNlcjpwYXNz"}}, "basic_auth"},
			{http.Header{"Authorization": {"Bearer tok-alice-1 extra"}}, "auth_scheme"},
			{http.Header{"Authorization": {"Bearer tok-alice-1"}, "Private-Token": {"tok-bob-1"}}, "two_credentials"},
		}
		for _, c := range cases {
			resp, body := e.do(t, http.MethodGet, "/github/repos/o/r", c.header, nil)
			if resp.StatusCode != http.StatusBadRequest || errorOf(t, body).Error != c.code {
				t.Errorf("%v: %d %s, want 400 %s", c.header, resp.StatusCode, body, c.code)
			}
			noSecret(t, "answer", body, "tok-", "dXNlcjpwYXNz")
		}
	})
}
