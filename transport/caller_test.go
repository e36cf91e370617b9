package transport

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// coreOf returns the core resource of the status of the pool's credential
// #index, or nil when nothing is known of it.
func coreOf(t *testing.T, tr *Transport, index int) *ResourceStatus {
	t.Helper()
	sts, err := tr.Status(context.Background(), time.Now(), "github")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if !strings.HasPrefix(st.Credential, "#"+string(rune('0'+index))+" ") {
			continue
		}
		for _, r := range st.Resources {
			if r.Resource == "core" && !r.Assumed && r.Limit != nil {
				return &r
			}
		}
	}
	return nil
}

// A request that carries its caller's own credential — its Authorization
// header (a token, or Basic credentials), or user:pass@ in its URL — is
// sent with that credential alone and accounted to it: the response says
// "own credential …", and the pool's token, never sent, has no reading;
// a bad token's 401 (with the anonymous limit, 60) is not stored for it
// either, nor does it condemn it. A request carrying the pool token's own
// text is that credential's.
func TestCallersOwnCredentialIsCharged(t *testing.T) {
	api := sim.APIConfig{Name: "github", Dialect: sim.DialectGitHub, Limit: 5000, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}, {Token: "tok-bob-000001", Owner: "bob"}}}
	s := newSim(t, api, []string{"tok-alice-1"}, func(o *Options) { o.SkipValidation = true })
	send := func(url string, header ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := s.t.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		return resp
	}
	withUser := strings.Replace(s.base, "http://", "http://x:tok-bob-000001@", 1)
	for _, c := range []struct {
		name, url string
		header    []string
		status    int
		via       string
	}{
		{"bearer", s.base + "/repos/o/r1", []string{"Authorization", "Bearer tok-bob-000001"}, 200, "own credential …001"},
		{"basic", s.base + "/repos/o/r2", []string{"Authorization", "Basic eDp0b2stYm9iLTAwMDAwMQ=="}, 200, "own credential …001"},
		{"url user info", withUser + "/repos/o/r3", nil, 200, "own credential …001"},
		{"bad token", s.base + "/repos/o/r4", []string{"Authorization", "token not-a-token-at-all"}, 401, "own credential …-all"},
	} {
		resp := send(c.url, c.header...)
		if resp.StatusCode != c.status || resp.Header.Get(HeaderCredential) != c.via {
			t.Errorf("%s: %d via %q, want %d via %q", c.name, resp.StatusCode, resp.Header.Get(HeaderCredential), c.status, c.via)
		}
	}
	if core := coreOf(t, s.t, 1); core != nil {
		t.Errorf("the pool's token, never sent, has a reading: %d/%d", *core.Remaining, *core.Limit)
	}
	pool, _ := s.t.Pool("github")
	if st := pool.Credentials()[0].State(time.Now()); st.String() == "invalid" {
		t.Error("the pool's token was condemned for the caller's")
	}
	if got := s.srv.Stats().Total.Requests; got != 4 {
		t.Errorf("%d requests at the server, want 4", got)
	}

	// The pool token's own text: that credential's request.
	resp := send(s.base+"/repos/o/r5", "Authorization", "token tok-alice-1")
	if via := resp.Header.Get(HeaderCredential); !strings.HasPrefix(via, "#1 ") {
		t.Errorf("the pool's token sent by the caller: via %q, want #1", via)
	}
	if core := coreOf(t, s.t, 1); core == nil || *core.Limit != 5000 || *core.Remaining != 4999 {
		t.Errorf("the pool's token after its own request: %+v, want 4999/5000", core)
	}
}

// The callers' tokens are remembered up to maxCallerCredentials, the least
// recently used forgotten with what the transport kept for them.
func TestCallersCredentialsAreBounded(t *testing.T) {
	api := sim.APIConfig{Name: "github", Dialect: sim.DialectGitHub, Limit: 5000, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}}}
	s := newSim(t, api, []string{"tok-alice-1"}, func(o *Options) { o.SkipValidation = true })
	for i := range maxCallerCredentials + 50 {
		req, _ := http.NewRequest(http.MethodGet, s.base+"/repos/o/r", nil)
		req.Header.Set("Authorization", fmt.Sprintf("Bearer caller-token-%04d", i))
		resp, err := s.t.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
	}
	pools := 0
	s.t.learnings.Range(func(any, any) bool { pools++; return true })
	if n := s.t.callers.order.Len(); n != maxCallerCredentials || len(s.t.callers.byKey) != n || pools > n+1 {
		t.Errorf("%d callers' tokens remembered (%d by key), %d pools learning; want %d, and the main pool besides", n, len(s.t.callers.byKey), pools, maxCallerCredentials)
	}
}
