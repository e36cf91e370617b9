package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
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

// 300 clients with made-up tokens: each token is sent upstream once (its
// owner is asked for, the provider answers 401), the tracked set never
// grows past its bound and keeps no rejected token, and sending the same
// tokens again costs no upstream request until their refusal period ends.
// A valid token keeps working meanwhile.
func TestPassThroughFakeTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const fakes, bound, refusal = 300, 50, 10 * time.Minute
		e := newEnv(t, []sim.APIConfig{githubAPI(1000, time.Hour, simTokens...)}, map[string][]string{"github": {"tok-bob-1"}},
			func(o *Options) { o.PassThrough = true; o.MaxPassThrough = bound; o.PassThroughRefusal = refusal })
		fake := func(i int) string { return fmt.Sprintf("ghp_fake%04d", i) }
		unauthorized := func() int64 { return e.srv.Stats().Total.Unauthorized }

		var wg sync.WaitGroup
		var mu sync.Mutex
		most := 0
		for i := range fakes {
			wg.Go(func() {
				resp, body := e.do(t, http.MethodGet, "/github/repos/o/r", bearer(fake(i)), nil)
				if resp.StatusCode != http.StatusUnauthorized || errorOf(t, body).Error != "token_rejected" {
					t.Errorf("fake token %d: %d %s", i, resp.StatusCode, body)
				}
				noSecret(t, "answer", headerText(resp.Header)+body, fake(i))
				mu.Lock()
				most = max(most, e.gw.pt.len())
				mu.Unlock()
			})
		}
		wg.Wait()
		if most > bound {
			t.Errorf("%d tokens tracked at once, bound %d", most, bound)
		}
		if n := unauthorized(); n != fakes {
			t.Fatalf("%d upstream 401s for %d fake tokens, want one each", n, fakes)
		}
		if n := len(e.status(t).Credentials); n != 1 {
			t.Errorf("/status lists %d credentials, want the gateway's one: rejected tokens are not tracked", n)
		}

		// Again: refused by the gateway itself, nothing sent.
		time.Sleep(refusal - time.Second)
		for i := range fakes {
			resp, body := e.do(t, http.MethodGet, "/github/repos/o/r", bearer(fake(i)), nil)
			if resp.StatusCode != http.StatusUnauthorized || errorOf(t, body).Error != "token_refused" ||
				!strings.Contains(body, "refuses it without sending it again") || resp.Header.Get("WWW-Authenticate") == "" {
				t.Fatalf("fake token %d again: %d %s %v", i, resp.StatusCode, body, resp.Header)
			}
		}
		if n := unauthorized(); n != fakes {
			t.Fatalf("%d upstream 401s after sending the fake tokens again, want still %d", n, fakes)
		}
		if resp, body := e.do(t, http.MethodGet, "/github/repos/o/r", bearer("tok-alice-1"), nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("valid token: %d %s", resp.StatusCode, body)
		}

		// After the refusal period a token is given its chance again.
		time.Sleep(time.Second)
		if resp, body := e.do(t, http.MethodGet, "/github/repos/o/r", bearer(fake(0)), nil); resp.StatusCode != http.StatusUnauthorized || errorOf(t, body).Error != "token_rejected" {
			t.Fatalf("after the refusal period: %d %s", resp.StatusCode, body)
		}
		if n := unauthorized(); n != fakes+1 {
			t.Fatalf("%d upstream 401s, want %d", n, fakes+1)
		}
	})
}

// The tracked set is a least-recently-used set: beyond its bound the
// token used longest ago is forgotten, and /status lists what is tracked.
func TestPassThroughTrackedBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{githubAPI(1000, time.Hour, simTokens...)}, nil,
			func(o *Options) { o.PassThrough = true; o.MaxPassThrough = 2 })
		for _, tok := range []string{"tok-alice-1", "tok-bob-1", "tok-alice-1", "tok-carol-1"} {
			if resp, body := e.do(t, http.MethodGet, "/github/repos/o/r", bearer(tok), nil); resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d %s", tok, resp.StatusCode, body)
			}
		}
		var owners []string
		for _, c := range e.status(t).Credentials {
			if c.Owner != "" {
				owner, _, _ := strings.Cut(c.Owner, " ")
				owners = append(owners, owner)
			}
		}
		if strings.Join(owners, " ") != "alice carol" {
			t.Fatalf("tracked owners %v, want alice and carol (bob was used longest ago)", owners)
		}
	})
}

// Clients' private answers stay their own: a repeated GET with another
// client's token, or with the gateway's, does not carry the stored
// validator, while the same client (any of its owner's tokens) gets free
// 304s. The simulated GitHub marks every authenticated answer private and
// gives every token the same ETag, so only the gateway's rules keep the
// answers apart.
func TestPassThroughPrivateAnswersStayWithTheirOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{githubAPI(100, time.Hour, simTokens...)}, map[string][]string{"github": {"tok-bob-1"}},
			func(o *Options) { o.PassThrough = true })
		const path = "/github/repos/o/r"
		try := func(h http.Header, wantCache string) string {
			t.Helper()
			resp, body := e.do(t, http.MethodGet, path, h, nil)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Ratekeeper-Cache") != wantCache {
				t.Fatalf("%v: %d, cache %q; want 200, %q", resp.Header.Get("X-Ratekeeper-Credential"), resp.StatusCode,
					resp.Header.Get("X-Ratekeeper-Cache"), wantCache)
			}
			if !strings.Contains(resp.Header.Get("Cache-Control"), "private") {
				t.Fatalf("the simulator's answer is not private: %q", resp.Header.Get("Cache-Control"))
			}
			return body
		}
		notModified := func(owner string) int64 {
			b, _ := e.srv.Stats().BucketFor("github", owner, "core")
			return b.NotModified
		}
		first := try(bearer("tok-alice-1"), "miss")
		// Another client: a full answer, although the server would have
		// confirmed alice's for carol.
		if body := try(bearer("tok-carol-1"), "miss"); body != first {
			t.Fatalf("carol's body differs: the test needs identical representations")
		}
		// The gateway's own token neither: its clients are not alice.
		try(nil, "miss")
		if n := notModified("carol") + notModified("bob"); n != 0 {
			t.Fatalf("%d 304s for carol and the gateway, want none", n)
		}
		// alice's answer is fresh for alice, with either token, once
		// the gateway knows the token is hers: a new token's first
		// request, before its owner is known, revalidates.
		try(http.Header{"Authorization": {"token tok-alice-2"}}, "revalidated")
		try(http.Header{"Authorization": {"token tok-alice-2"}}, "fresh")
		try(bearer("tok-alice-1"), "fresh")
		// Each keeps revalidating its own, alice with either token.
		noCache := func(h http.Header) http.Header {
			if h == nil {
				h = http.Header{}
			}
			h.Set("Cache-Control", "no-cache")
			return h
		}
		try(noCache(bearer("tok-alice-1")), "revalidated")
		try(noCache(http.Header{"Authorization": {"token tok-alice-2"}}), "revalidated")
		try(noCache(bearer("tok-carol-1")), "revalidated")
		try(noCache(nil), "revalidated")
		if a, c, b := notModified("alice"), notModified("carol"), notModified("bob"); a != 3 || c != 1 || b != 1 {
			t.Fatalf("304s: alice %d, carol %d, gateway %d; want 3, 1, 1", a, c, b)
		}
	})
}
