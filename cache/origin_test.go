package cache

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// resource is what the test origin serves at one path.
type resource struct {
	body         string
	etag         string // sent as ETag when set
	lastModified time.Time
	vary         string
	cacheControl string
	setCookie    string
	chunked      bool // no Content-Length: the body is flushed in pieces
	// variants maps a request's Accept to another body and ETag.
	variants map[string][2]string
	// byAuth maps a request's Authorization to another body and ETag: a
	// representation of its own for that credential.
	byAuth map[string][2]string
	// denied maps a request's Authorization to the status it gets instead
	// (a credential that may not see the resource), whatever validators
	// it carries.
	denied map[string]int
	// tags, when set, computes the ETag from the request and the body,
	// as GitHub does (see testRule).
	tags func(h http.Header, body []byte) string
}

// origin is an httptest server answering conditional GETs the way GitHub
// does: 304 when If-None-Match matches the current ETag (or, without one,
// when If-Modified-Since is not before Last-Modified), with fresh rate-limit
// headers on every response.
type origin struct {
	t   *testing.T
	srv *httptest.Server

	mu        sync.Mutex
	resources map[string]*resource
	remaining int
	requests  int
	notMod    int
	lastReq   http.Header // header of the latest request
}

func newOrigin(t *testing.T) *origin {
	o := &origin{t: t, resources: map[string]*resource{}, remaining: 5000}
	o.srv = httptest.NewServer(http.HandlerFunc(o.serve))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *origin) set(path string, r resource) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.resources[path] = &r
}

func (o *origin) counts() (requests, notModified int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.requests, o.notMod
}

func (o *origin) header() http.Header {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lastReq.Clone()
}

func (o *origin) serve(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.requests++
	o.lastReq = r.Header.Clone()
	res, ok := o.resources[r.URL.Path]
	var cp resource
	if ok {
		cp = *res
	}
	o.remaining--
	remaining := o.remaining
	o.mu.Unlock()

	h := w.Header()
	h.Set("X-Ratelimit-Limit", "5000")
	h.Set("X-Ratelimit-Remaining", strconv.Itoa(remaining))
	if !ok {
		http.NotFound(w, r)
		return
	}
	if code, found := cp.denied[r.Header.Get("Authorization")]; found {
		http.Error(w, http.StatusText(code), code)
		return
	}
	body, etag := cp.body, cp.etag
	if v, found := cp.variants[r.Header.Get("Accept")]; found {
		body, etag = v[0], v[1]
	}
	if v, found := cp.byAuth[r.Header.Get("Authorization")]; found {
		body, etag = v[0], v[1]
	}
	if cp.tags != nil {
		etag = cp.tags(r.Header, []byte(body))
	}
	if etag != "" {
		h.Set("ETag", etag)
	}
	if !cp.lastModified.IsZero() {
		h.Set("Last-Modified", cp.lastModified.UTC().Format(http.TimeFormat))
	}
	if cp.vary != "" {
		h.Set("Vary", cp.vary)
	}
	if cp.cacheControl != "" {
		h.Set("Cache-Control", cp.cacheControl)
	}
	if cp.setCookie != "" {
		h.Set("Set-Cookie", cp.setCookie)
	}
	if o.notModified(r, etag, cp.lastModified) {
		o.mu.Lock()
		o.notMod++
		o.mu.Unlock()
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/json")
	if !cp.chunked {
		h.Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body)
		return
	}
	for len(body) > 0 {
		n := min(len(body), 4096)
		io.WriteString(w, body[:n])
		w.(http.Flusher).Flush()
		body = body[n:]
	}
}

func (o *origin) notModified(r *http.Request, etag string, lm time.Time) bool {
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		for _, tag := range strings.Split(inm, ",") {
			if etag != "" && strings.TrimPrefix(strings.TrimSpace(tag), "W/") == strings.TrimPrefix(etag, "W/") {
				return true
			}
		}
		return false
	}
	if ims := r.Header.Get("If-Modified-Since"); ims != "" && !lm.IsZero() {
		t, err := http.ParseTime(ims)
		return err == nil && !lm.Truncate(time.Second).After(t)
	}
	return false
}

func (o *origin) url(path string) string { return o.srv.URL + path }

// get sends one GET through c the way a RoundTripper does (Prepare, send,
// Revalidated or Store) and returns the response with its body read.
func get(t *testing.T, c *Cache, owner, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := roundTrip(c, http.DefaultTransport, req, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// roundTrip is the cache's part of a RoundTripper.
func roundTrip(c *Cache, next http.RoundTripper, req *http.Request, owner string) (*http.Response, error) {
	req = req.Clone(req.Context())
	entry := c.Prepare(req, owner)
	resp, err := next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if entry != nil && resp.StatusCode == http.StatusNotModified {
		return c.Revalidated(entry, resp), nil
	}
	return c.Store(req, owner, resp)
}

// fixedClock returns a Now that always says t.
func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

var epoch = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func mustStatus(t *testing.T, resp *http.Response, code int, marker string) {
	t.Helper()
	if resp.StatusCode != code {
		t.Fatalf("status %d, want %d", resp.StatusCode, code)
	}
	if got := resp.Header.Get(HeaderName); got != marker {
		t.Fatalf("%s: %q, want %q", HeaderName, got, marker)
	}
}

func jsonBody(n int) string {
	var b strings.Builder
	b.WriteString("[")
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "{\"id\":%d},", i)
	}
	return b.String()[:n-1] + "]"
}
