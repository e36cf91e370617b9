package cache

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// githubHeader is the header of a typical GitHub API 200.
func githubHeader() http.Header {
	return http.Header{
		"Date":                           {"Sun, 01 Jun 2025 12:00:00 GMT"},
		"Content-Type":                   {"application/json; charset=utf-8"},
		"Cache-Control":                  {"private, max-age=60, s-maxage=60"},
		"Vary":                           {"Accept, Authorization, Cookie, X-GitHub-OTP", "Accept-Encoding, Accept, X-Requested-With"},
		"Etag":                           {`W/"4f9b2ff1a0b1f3c35b1d6b9c55c2e3f5d1e2a3b4c5d6e7f8091a2b3c4d5e6f70"`},
		"Last-Modified":                  {"Sat, 31 May 2025 08:00:00 GMT"},
		"X-Oauth-Scopes":                 {"repo"},
		"X-Accepted-Oauth-Scopes":        {"repo"},
		"X-Github-Media-Type":            {"github.v3; format=json"},
		"X-Github-Api-Version-Selected":  {"2022-11-28"},
		"X-Ratelimit-Limit":              {"5000"},
		"X-Ratelimit-Remaining":          {"4999"},
		"X-Ratelimit-Reset":              {"1748782800"},
		"X-Ratelimit-Used":               {"1"},
		"X-Ratelimit-Resource":           {"core"},
		"Access-Control-Expose-Headers":  {"ETag, Link, Location, Retry-After, X-GitHub-OTP, X-RateLimit-Limit, X-RateLimit-Remaining"},
		"Access-Control-Allow-Origin":    {"*"},
		"Strict-Transport-Security":      {"max-age=31536000; includeSubdomains; preload"},
		"X-Frame-Options":                {"deny"},
		"X-Content-Type-Options":         {"nosniff"},
		"X-Xss-Protection":               {"0"},
		"Referrer-Policy":                {"origin-when-cross-origin, strict-origin-when-cross-origin"},
		"Content-Security-Policy":        {"default-src 'none'"},
		"Server":                         {"github.com"},
		"X-Github-Request-Id":            {"C0DE:1234:5678:9ABC:DEF0"},
		"Content-Length":                 {"4096"},
		"X-Github-Api-Version-Requested": {"2022-11-28"},
	}
}

// github304Header is the header of the matching 304.
func github304Header() http.Header {
	return http.Header{
		"Date":                  {"Sun, 01 Jun 2025 12:01:00 GMT"},
		"Cache-Control":         {"private, max-age=60, s-maxage=60"},
		"Vary":                  {"Accept, Authorization, Cookie, X-GitHub-OTP", "Accept-Encoding, Accept, X-Requested-With"},
		"Etag":                  {`W/"4f9b2ff1a0b1f3c35b1d6b9c55c2e3f5d1e2a3b4c5d6e7f8091a2b3c4d5e6f70"`},
		"Last-Modified":         {"Sat, 31 May 2025 08:00:00 GMT"},
		"X-Ratelimit-Limit":     {"5000"},
		"X-Ratelimit-Remaining": {"4999"},
		"X-Ratelimit-Reset":     {"1748782800"},
		"X-Ratelimit-Used":      {"1"},
		"X-Ratelimit-Resource":  {"core"},
		"Server":                {"github.com"},
		"X-Github-Request-Id":   {"C0DE:1234:5678:9ABC:DEF1"},
	}
}

const benchURL = "https://api.github.com/repos/ratekeeper/ratekeeper/issues?state=open&per_page=100&page=3"

func benchRequest(b *testing.B) *http.Request {
	req, err := http.NewRequest("GET", benchURL, nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-Github-Api-Version", "2022-11-28")
	req.Header.Set("User-Agent", "go-github/v75.0.0")
	req.Header.Set("Authorization", "Bearer tok-bench-1")
	return req
}

// BenchmarkPrepareMiss is the cost every cacheable GET pays when nothing
// is stored for it.
func BenchmarkPrepareMiss(b *testing.B) {
	c := New(Options{})
	req := benchRequest(b)
	b.ReportAllocs()
	for b.Loop() {
		if c.Prepare(req, "alice") != nil {
			b.Fatal("hit")
		}
	}
}

// BenchmarkRevalidateHit is the cache's whole work on a repeated GET the
// server answers 304: Prepare finds the entry and sets validators,
// Revalidated builds the stored 200 with fresh headers, the caller reads
// the body.
func BenchmarkRevalidateHit(b *testing.B) { benchRevalidate(b, nil) }

// BenchmarkRevalidateHitWithTagRule is the same repeat sent with another
// token through a WithTagRule view: Prepare computes the tag the server
// gives that token (a SHA-256 of the 4 KiB body).
func BenchmarkRevalidateHitWithTagRule(b *testing.B) { benchRevalidate(b, testRule{}) }

func benchRevalidate(b *testing.B, rule TagRule) {
	c := New(Options{}).WithTagRule(rule)
	body := strings.Repeat("x", 4096)
	stored := benchRequest(b)
	h200, h304 := githubHeader(), github304Header()
	base := benchRequest(b)
	if rule != nil {
		// The server's tags follow the rule; the repeat goes with
		// another token.
		base.Header.Set("Authorization", "Bearer tok-bench-2")
		h200.Set("Etag", ruleTag(stored.Header, []byte(body)))
		h304.Set("Etag", ruleTag(base.Header, []byte(body)))
	}
	resp := &http.Response{StatusCode: 200, Header: h200, ContentLength: 4096,
		Body: io.NopCloser(strings.NewReader(body))}
	if _, err := c.Store(stored, "alice", resp); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 8192)
	b.ReportAllocs()
	// net/http builds each 304 (Revalidated takes its header over): that
	// is not the cache's cost, so they are made in batches off the clock.
	var batch []*http.Response
	for b.Loop() {
		if len(batch) == 0 {
			b.StopTimer()
			for range 1024 {
				batch = append(batch, &http.Response{StatusCode: 304, Header: h304.Clone(), Body: http.NoBody, Request: base})
			}
			b.StartTimer()
		}
		r304 := batch[len(batch)-1]
		batch = batch[:len(batch)-1]
		// The transport clones the request; resetting the validators
		// Prepare added stands in for that.
		delete(base.Header, "If-None-Match")
		delete(base.Header, "If-Modified-Since")
		e := c.Prepare(base, "alice")
		if e == nil {
			b.Fatal("miss")
		}
		r := c.Revalidated(e, r304)
		if n, _ := io.ReadFull(r.Body, buf[:4096]); n != 4096 {
			b.Fatal("short body")
		}
	}
	if r := c.memory().get(requestKey(stored)); r == nil || r.variants[0].etag != h200.Get("Etag") {
		b.Fatal("a 304 to the tag sent rewrote the entry")
	}
}

// BenchmarkStoreMiss is the work on a cacheable 200 (body read and stored).
func BenchmarkStoreMiss(b *testing.B) {
	c := New(Options{})
	body := strings.Repeat("x", 4096)
	req := benchRequest(b)
	h := githubHeader()
	b.ReportAllocs()
	for b.Loop() {
		// Building the response is the server's and net/http's work.
		b.StopTimer()
		resp := &http.Response{StatusCode: 200, Header: h.Clone(), ContentLength: 4096,
			Body: io.NopCloser(strings.NewReader(body))}
		b.StartTimer()
		if _, err := c.Store(req, "alice", resp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFreshHit: a repeat served from the cache without a request —
// Lookup (key, record, freshness) and Serve (the response) — for a
// typical GitHub answer of 4 KiB.
//
//	go test -run '^$' -bench FreshHit ./cache/
func BenchmarkFreshHit(b *testing.B) {
	c := New(Options{})
	req, _ := http.NewRequest(http.MethodGet, "https://api.github.com/repos/golang/go", nil)
	req.Header.Set("Authorization", "Bearer tok-alice-1")
	h := githubHeader()
	t0, _ := http.ParseTime(h.Get("Date"))
	resp := &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(strings.Repeat("x", 4096))), ContentLength: 4096}
	if _, err := c.StoreAt(req, "alice", resp, t0, t0); err != nil {
		b.Fatal(err)
	}
	owners := []string{"alice"}
	now := t0.Add(30e9)
	b.ReportAllocs()
	for b.Loop() {
		hit, ok := c.Lookup(req, owners, now)
		if !ok {
			b.Fatal("no hit")
		}
		c.Serve(req, hit).Body.Close()
	}
}
