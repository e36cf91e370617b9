package transport

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
)

// githubAnswer answers with the header fields api.github.com sends with a
// JSON answer (about two dozen), plenty of quota left: the overhead of
// what the transport does to an answer's header is measured on a header
// of a real answer's size, where BenchmarkTransportOverheadInProcess has
// only the rate-limit fields.
func githubAnswer() http.Handler {
	body := []byte(`{"login":"octocat","id":1}`)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json; charset=utf-8")
		h.Set("Cache-Control", "private, max-age=60, s-maxage=60")
		h.Set("Vary", "Accept, Authorization, Cookie, X-GitHub-OTP,Accept-Encoding, Accept, X-Requested-With")
		h.Set("X-Oauth-Scopes", "repo")
		h.Set("X-Accepted-Oauth-Scopes", "")
		h.Set("Github-Authentication-Token-Expiration", "2030-01-01 00:00:00 UTC")
		h.Set("X-Github-Media-Type", "github.v3; format=json")
		h.Set("X-Github-Api-Version-Selected", "2022-11-28")
		h.Set("X-RateLimit-Limit", "5000000")
		h.Set("X-RateLimit-Remaining", "4999999")
		h.Set("X-RateLimit-Used", "1")
		h.Set("X-RateLimit-Reset", fmt.Sprint(time.Now().Add(time.Hour).Unix()))
		h.Set("X-RateLimit-Resource", "core")
		h.Set("Access-Control-Expose-Headers", "ETag, Link, Location, Retry-After, X-GitHub-OTP, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Used, X-RateLimit-Resource, X-RateLimit-Reset")
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Strict-Transport-Security", "max-age=31536000; includeSubdomains; preload")
		h.Set("X-Frame-Options", "deny")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Xss-Protection", "0")
		h.Set("Referrer-Policy", "origin-when-cross-origin, strict-origin-when-cross-origin")
		h.Set("Content-Security-Policy", "default-src 'none'")
		h.Set("Server", "github.com")
		h.Set("X-Github-Request-Id", "0000:0000:000000:000000:00000000")
		w.Write(body)
	})
}

func BenchmarkTransportOverheadInProcessGitHubAnswer(b *testing.B) {
	loop(b, benchTransport(b, handlerRT{githubAnswer()}, "http://api.test"), "http://api.test")
}

// BenchmarkPoolViewPerAnswer is what the pool's fields add to one answer,
// alone: its reading applied to the view, and the figures of a pool of
// four tokens (three buckets) written over a GitHub answer's rate-limit
// fields.
func BenchmarkPoolViewPerAnswer(b *testing.B) {
	p, _ := provider.New("github", provider.GitHub, "http://api.test")
	reg := provider.NewRegistry()
	_ = reg.Add(p)
	var cs []*creds.Credential
	for i, owner := range []string{"alice", "alice", "bob", "carol"} {
		c := creds.NewToken("github", i+1, fmt.Sprintf("tok-bench-%04d", i), "bench")
		c.SetOwner(provider.Owner{Name: owner})
		cs = append(cs, c)
	}
	pool := creds.NewPool("github", cs...)
	tr, err := New(Options{Providers: reg, Pools: map[string]*creds.Pool{"github": pool}, SkipValidation: true})
	if err != nil {
		b.Fatal(err)
	}
	l := tr.laneFor(p)
	now := time.Now()
	rec := httptest.NewRecorder()
	githubAnswer().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://api.test/user", nil))
	resp := rec.Result()
	r := quota.Read(200, resp.Header, nil, now, 0)
	ans := quota.Answer{Reading: &r, Counted: true}
	for _, c := range cs {
		tr.view.observe(l.slot(c, provider.Request{Resource: "core"}), &ans, now)
	}
	// The fields showPool replaces are put back after each round; the
	// upstream fields it adds are the same keys every round.
	saved := http.Header{}
	for _, k := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Used", "X-Ratelimit-Reset"} {
		saved[k] = resp.Header[k]
	}
	x := &exchange{t: tr, l: l, pool: pool, class: provider.Request{Resource: "core"}}
	id := l.slot(cs[0], provider.Request{Resource: "core"})
	b.ReportAllocs()
	for b.Loop() {
		tr.view.observe(id, &ans, now)
		x.showPool(resp)
		for k, v := range saved {
			resp.Header[k] = v
		}
	}
}
