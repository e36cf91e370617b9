package cache

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestStoreThenRevalidateServesStored200(t *testing.T) {
	o := newOrigin(t)
	o.set("/repos/a/b", resource{body: `{"name":"b"}`, etag: `"v1"`})
	c := New(Options{Now: fixedClock(epoch)})

	resp, body := get(t, c, "alice", o.url("/repos/a/b"))
	mustStatus(t, resp, 200, Miss)
	if body != `{"name":"b"}` || resp.ContentLength != int64(len(body)) {
		t.Fatalf("first body %q, length %d", body, resp.ContentLength)
	}
	if got := resp.Header.Get("X-Ratelimit-Remaining"); got != "4999" {
		t.Fatalf("first remaining %q", got)
	}

	resp, body = get(t, c, "alice", o.url("/repos/a/b"))
	mustStatus(t, resp, 200, Revalidated)
	if body != `{"name":"b"}` {
		t.Fatalf("revalidated body %q", body)
	}
	if got := o.header().Get("If-None-Match"); got != `"v1"` {
		t.Fatalf("server saw If-None-Match %q, want %q", got, `"v1"`)
	}
	if _, nm := o.counts(); nm != 1 {
		t.Fatalf("server answered %d 304s, want 1", nm)
	}
	// Headers come fresh from the 304; body framing from the stored 200.
	if got := resp.Header.Get("X-Ratelimit-Remaining"); got != "4998" {
		t.Fatalf("remaining after 304 %q, want the 304's 4998", got)
	}
	if got := resp.Header.Get("Content-Length"); got != "12" || resp.ContentLength != 12 {
		t.Fatalf("Content-Length %q / %d, want the stored 12", got, resp.ContentLength)
	}
	if got := resp.Header.Get("Content-Type"); got != "application/json" {
		t.Fatalf("Content-Type %q, want the stored one", got)
	}
	if resp.Request == nil || resp.Request.URL.Path != "/repos/a/b" {
		t.Fatalf("Request not carried over: %v", resp.Request)
	}

	s := c.Stats()
	if s.Hits != 1 || s.Stores != 1 || s.Misses != 1 || s.Revalidations != 1 || s.Entries != 1 || s.Bytes <= 12 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLastModifiedOnly(t *testing.T) {
	o := newOrigin(t)
	lm := epoch.Add(-time.Hour)
	o.set("/x", resource{body: "hello", lastModified: lm})
	c := New(Options{})

	resp, _ := get(t, c, "", o.url("/x"))
	mustStatus(t, resp, 200, Miss)
	resp, body := get(t, c, "", o.url("/x"))
	mustStatus(t, resp, 200, Revalidated)
	if body != "hello" {
		t.Fatalf("body %q", body)
	}
	h := o.header()
	if got := h.Get("If-Modified-Since"); got != lm.Format(http.TimeFormat) {
		t.Fatalf("If-Modified-Since %q", got)
	}
	if got := h.Get("If-None-Match"); got != "" {
		t.Fatalf("If-None-Match %q sent without a stored ETag", got)
	}
}

func TestChangedResourceReplacesEntry(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "one", etag: `"1"`})
	c := New(Options{})
	get(t, c, "", o.url("/x"))
	o.set("/x", resource{body: "two", etag: `"2"`})

	resp, body := get(t, c, "", o.url("/x"))
	mustStatus(t, resp, 200, Miss)
	if body != "two" {
		t.Fatalf("body %q after the resource changed", body)
	}
	resp, body = get(t, c, "", o.url("/x"))
	mustStatus(t, resp, 200, Revalidated)
	if body != "two" || o.header().Get("If-None-Match") != `"2"` {
		t.Fatalf("body %q, If-None-Match %q", body, o.header().Get("If-None-Match"))
	}
	if s := c.Stats(); s.Entries != 1 || s.Stores != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestAnonymousWithForeignCredentialBypasses(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "data", etag: `"1"`})
	c := New(Options{CredentialHeaders: []string{"x-api-key"}})
	for _, h := range []string{"Authorization", "PRIVATE-TOKEN", "X-Api-Key"} {
		resp, body := get(t, c, "", o.url("/x"), h, "tok-someone-1")
		if body != "data" || resp.Header.Get(HeaderName) != "" {
			t.Fatalf("%s: body %q marker %q, want untouched", h, body, resp.Header.Get(HeaderName))
		}
	}
	if s := c.Stats(); s.Entries != 0 || s.Misses != 0 {
		t.Fatalf("stats %+v: requests with a credential and no owner were cached", s)
	}
}

func TestAcceptDoesNotShare(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "json", etag: `"j"`, variants: map[string][2]string{
		"application/vnd.github.raw+json": {"raw", `"r"`},
	}})
	c := New(Options{})
	resp, body := get(t, c, "", o.url("/x"), "Accept", "application/json")
	mustStatus(t, resp, 200, Miss)
	resp, body2 := get(t, c, "", o.url("/x"), "Accept", "application/vnd.github.raw+json")
	mustStatus(t, resp, 200, Miss)
	if body != "json" || body2 != "raw" {
		t.Fatalf("bodies %q %q", body, body2)
	}
	resp, body = get(t, c, "", o.url("/x"), "Accept", "application/json")
	mustStatus(t, resp, 200, Revalidated)
	resp, body2 = get(t, c, "", o.url("/x"), "Accept", "application/vnd.github.raw+json")
	mustStatus(t, resp, 200, Revalidated)
	if body != "json" || body2 != "raw" {
		t.Fatalf("revalidated bodies %q %q", body, body2)
	}
	if s := c.Stats(); s.Entries != 2 {
		t.Fatalf("stats %+v, want 2 entries", s)
	}
}

func TestVaryHonoured(t *testing.T) {
	o := newOrigin(t)
	// GitHub's Vary, which names Authorization: the owner stands for it.
	o.set("/x", resource{body: "data", etag: `"1"`, vary: "Accept, Authorization, Cookie, X-GitHub-OTP, Accept-Encoding, Accept, X-Requested-With"})
	c := New(Options{})
	get(t, c, "alice", o.url("/x"), "Authorization", "Bearer tok-alice-1", "X-Requested-With", "a")

	try := func(header ...string) *Entry {
		req, _ := http.NewRequest("GET", o.url("/x"), nil)
		for i := 0; i < len(header); i += 2 {
			req.Header.Add(header[i], header[i+1])
		}
		return c.Prepare(req, "alice")
	}
	if try("Authorization", "Bearer tok-alice-2", "X-Requested-With", "a") == nil {
		t.Fatal("another token of the same owner missed: Authorization must not be keyed on")
	}
	if try("X-Requested-With", "b") != nil {
		t.Fatal("a different X-Requested-With matched")
	}
	if try() != nil {
		t.Fatal("a missing X-Requested-With matched")
	}
	if try("X-Requested-With", "a", "Accept-Encoding", "gzip") != nil {
		t.Fatal("a different Accept-Encoding matched although the response varies on it")
	}
	if try("X-Requested-With", "a", "Cookie", "s=1") != nil {
		t.Fatal("a different Cookie matched although the response varies on it")
	}
	if try("X-Requested-With", " a ", "X-Unrelated", "z") == nil {
		t.Fatal("a field the response does not vary on, or whitespace, caused a miss")
	}

	// A request for other Vary values stores its own response in place.
	resp, _ := get(t, c, "alice", o.url("/x"), "X-Requested-With", "b")
	mustStatus(t, resp, 200, Miss)
	resp, _ = get(t, c, "alice", o.url("/x"), "X-Requested-With", "b")
	mustStatus(t, resp, 200, Revalidated)
}

func TestVaryStarNeverReused(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "data", etag: `"1"`, vary: "Accept, *"})
	c := New(Options{})
	for range 2 {
		resp, body := get(t, c, "", o.url("/x"))
		mustStatus(t, resp, 200, "")
		if body != "data" {
			t.Fatalf("body %q", body)
		}
	}
	if o.header().Get("If-None-Match") != "" {
		t.Fatal("validators sent for a Vary: * response")
	}
	if s := c.Stats(); s.Entries != 0 || s.Stores != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestCallerValidatorsLeftAlone(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "data", etag: `"1"`})
	c := New(Options{})
	get(t, c, "", o.url("/x"))

	req, _ := http.NewRequest("GET", o.url("/x"), nil)
	req.Header.Set("If-None-Match", `"mine"`)
	if e := c.Prepare(req, ""); e != nil {
		t.Fatal("Prepare took over a request with the caller's validators")
	}
	if got := req.Header.Values("If-None-Match"); len(got) != 1 || got[0] != `"mine"` {
		t.Fatalf("If-None-Match changed to %q", got)
	}

	// The caller's own 304 reaches the caller as a 304.
	req, _ = http.NewRequest("GET", o.url("/x"), nil)
	req.Header.Set("If-None-Match", `"1"`)
	resp, err := roundTrip(c, http.DefaultTransport, req, "")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mustStatus(t, resp, 304, "")
	if o.header().Get("If-None-Match") != `"1"` {
		t.Fatalf("server saw If-None-Match %q", o.header().Get("If-None-Match"))
	}
}

func TestNoStore(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "data", etag: `"1"`})
	c := New(Options{})
	get(t, c, "", o.url("/x"))
	if c.Stats().Entries != 1 {
		t.Fatal("not stored")
	}
	// The resource turns no-store: the new 200 is not kept and the old
	// entry goes, as the server has a newer representation.
	o.set("/x", resource{body: "secret", etag: `"2"`, cacheControl: "private, No-Store"})
	resp, body := get(t, c, "", o.url("/x"))
	mustStatus(t, resp, 200, "")
	if body != "secret" {
		t.Fatalf("body %q", body)
	}
	if s := c.Stats(); s.Entries != 0 {
		t.Fatalf("stats %+v: a no-store response left an entry", s)
	}
	get(t, c, "", o.url("/x"))
	if o.header().Get("If-None-Match") != "" {
		t.Fatal("validators sent for a no-store resource")
	}

	// A request saying no-store is neither revalidated nor stored.
	o.set("/y", resource{body: "data", etag: `"1"`})
	get(t, c, "", o.url("/y"), "Cache-Control", "no-store")
	if s := c.Stats(); s.Entries != 0 {
		t.Fatalf("stats %+v: stored for a no-store request", s)
	}
}

func TestNotCacheable(t *testing.T) {
	o := newOrigin(t)
	o.set("/novalidator", resource{body: "data"})
	o.set("/x", resource{body: "data", etag: `"1"`})
	c := New(Options{})

	resp, _ := get(t, c, "", o.url("/novalidator"))
	mustStatus(t, resp, 200, "")
	resp, _ = get(t, c, "", o.url("/missing"))
	mustStatus(t, resp, 404, "")

	// HEAD and Range requests pass through.
	get(t, c, "", o.url("/x"))
	head, _ := http.NewRequest(http.MethodHead, o.url("/x"), nil)
	if c.Prepare(head, "") != nil {
		t.Fatal("HEAD was revalidated")
	}
	rng, _ := http.NewRequest(http.MethodGet, o.url("/x"), nil)
	rng.Header.Set("Range", "bytes=0-1")
	if c.Prepare(rng, "") != nil {
		t.Fatal("a Range request was revalidated")
	}
	post, _ := http.NewRequest(http.MethodPost, o.url("/x"), nil)
	resp, err := roundTrip(c, http.DefaultTransport, post, "")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mustStatus(t, resp, 200, "")
	if s := c.Stats(); s.Entries != 1 || s.Stores != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestCanonicalURL(t *testing.T) {
	mk := func(u string) *http.Request {
		req, err := http.NewRequest("GET", u, nil)
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	base := requestKey(mk("https://api.github.com/repos/a/b?page=2"))
	for _, same := range []string{
		"HTTPS://API.GitHub.com/repos/a/b?page=2",
		"https://api.github.com:443/repos/a/b?page=2",
		"https://api.github.com/repos/a/b?page=2#frag",
	} {
		if requestKey(mk(same)) != base {
			t.Errorf("%s: different key, want the same", same)
		}
	}
	for _, other := range []string{
		"http://api.github.com/repos/a/b?page=2",
		"https://api.github.com:8443/repos/a/b?page=2",
		"https://api.github.com/repos/a/B?page=2",
		"https://api.github.com/repos/a/b?page=3",
		"https://api.github.com/repos/a/b?PAGE=2",
		"https://api.github.com/repos/a/b",
		"https://api.github.com/repos/a/b%2Fc?page=2",
	} {
		if requestKey(mk(other)) == base {
			t.Errorf("%s: same key, want a different one", other)
		}
	}
	// The credential is not part of the key.
	withAuth := mk("https://api.github.com/repos/a/b?page=2")
	withAuth.Header.Set("Authorization", "Bearer tok-1")
	if requestKey(withAuth) != base {
		t.Error("a credential header changed the key")
	}
	// Field boundaries cannot be shifted: Accept "a, b" as one value
	// differs from "a" and "b" as two.
	r1, r2 := mk("https://h/x"), mk("https://h/x")
	r1.Header.Set("Accept", "a,b")
	r2.Header.Add("Accept", "a")
	r2.Header.Add("Accept", "b")
	if requestKey(r1) == requestKey(r2) {
		t.Error("length prefixes missing")
	}
	if a := partyOf("alice"); a == partyOf("bob") || a == partyOf("") || a != partyOf(string([]byte("alice"))) {
		t.Error("owner digests")
	}
}

func TestLargeBodyStreamedNotStored(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		name := "known length"
		if chunked {
			name = "unknown length"
		}
		t.Run(name, func(t *testing.T) {
			o := newOrigin(t)
			big := jsonBody(100_000)
			o.set("/big", resource{body: big, etag: `"big"`, chunked: chunked})
			o.set("/small", resource{body: "small", etag: `"s"`, chunked: chunked})
			c := New(Options{MaxEntryBytes: 10_000})

			resp, body := get(t, c, "", o.url("/big"))
			mustStatus(t, resp, 200, "")
			if body != big {
				t.Fatalf("body of %d bytes came back as %d bytes", len(big), len(body))
			}
			if chunked != (resp.ContentLength == -1) {
				t.Fatalf("ContentLength %d", resp.ContentLength)
			}
			resp, body = get(t, c, "", o.url("/small"))
			mustStatus(t, resp, 200, Miss)
			if body != "small" {
				t.Fatalf("small body %q", body)
			}
			if s := c.Stats(); s.Entries != 1 || s.Stores != 1 {
				t.Fatalf("stats %+v", s)
			}
			get(t, c, "", o.url("/big"))
			if o.header().Get("If-None-Match") != "" {
				t.Fatal("validators sent for an unstored body")
			}
		})
	}
}

// TestReadUpToBoundaries checks the body reader at the limit exactly, one
// past it, and for bodies longer than announced.
func TestReadUpToBoundaries(t *testing.T) {
	data := []byte(strings.Repeat("x", 100))
	for _, tc := range []struct {
		name     string
		n, size  int64
		limit    int64
		complete bool
	}{
		{"known, at limit", 100, 100, 100, true},
		{"unknown, at limit", 100, -1, 100, true},
		{"unknown, one past", 100, -1, 99, false},
		{"unknown, empty", 0, -1, 10, true},
		{"known, empty", 0, 0, 10, true},
		{"announced short, fits", 100, 50, 200, true},
		{"announced short, too long", 100, 50, 60, false},
		{"announced at limit, longer", 100, 60, 60, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := iotest.HalfReader(bytes.NewReader(data[:tc.n]))
			b, complete, err := readUpTo(r, tc.size, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if complete != tc.complete {
				t.Fatalf("complete %v", complete)
			}
			rest, _ := io.ReadAll(r)
			if got := append(b, rest...); !bytes.Equal(got, data[:tc.n]) {
				t.Fatalf("read %d + rest %d bytes, want %d", len(b), len(rest), tc.n)
			}
			if !complete && int64(len(b)) != tc.limit+1 {
				t.Fatalf("read %d bytes before giving up, want limit+1 = %d", len(b), tc.limit+1)
			}
		})
	}
}

func TestBodyReadErrorFailsStore(t *testing.T) {
	c := New(Options{})
	req, _ := http.NewRequest("GET", "https://api.example/x", nil)
	boom := errors.New("connection reset")
	closed := false
	resp := &http.Response{
		StatusCode:    200,
		Header:        http.Header{"Etag": {`"1"`}},
		ContentLength: -1,
		Body: readCloser{io.MultiReader(strings.NewReader("partial"), iotest.ErrReader(boom)),
			func() error { closed = true; return nil }},
	}
	got, err := c.Store(req, "", resp)
	if !errors.Is(err, boom) || got != nil {
		t.Fatalf("Store = %v, %v; want nil and an error wrapping %v", got, err, boom)
	}
	if !closed {
		t.Fatal("body not closed")
	}
	if c.Stats().Entries != 0 {
		t.Fatal("a partial body was stored")
	}

	// Short of its Content-Length is an error too.
	resp = &http.Response{StatusCode: 200, Header: http.Header{"Etag": {`"1"`}},
		ContentLength: 10, Body: io.NopCloser(strings.NewReader("short"))}
	if _, err := c.Store(req, "", resp); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err %v, want unexpected EOF", err)
	}
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }

func TestHeadersRefreshedAndIsolated(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "data", etag: `"1"`, setCookie: "session=s1"})
	c := New(Options{})
	resp, _ := get(t, c, "", o.url("/x"))
	if resp.Header.Get("Set-Cookie") != "session=s1" {
		t.Fatal("Set-Cookie not passed to the caller")
	}
	o.set("/x", resource{body: "data", etag: `"1"`})
	resp, _ = get(t, c, "", o.url("/x"))
	mustStatus(t, resp, 200, Revalidated)
	if got := resp.Header.Get("Set-Cookie"); got != "" {
		t.Fatalf("a stored Set-Cookie %q was replayed", got)
	}

	// A caller editing its response cannot reach the stored entry.
	resp.Header["Content-Type"][0] = "text/evil"
	resp.Header.Add("Content-Type", "more")
	resp.Header.Set("X-Ratelimit-Remaining", "0")
	resp, _ = get(t, c, "", o.url("/x"))
	if got := resp.Header.Values("Content-Type"); len(got) != 1 || got[0] != "application/json" {
		t.Fatalf("stored Content-Type became %q", got)
	}
}

func TestRevalidatedWithNewValidatorUpdatesEntry(t *testing.T) {
	c := New(Options{Now: fixedClock(epoch)})
	req, _ := http.NewRequest("GET", "https://api.example/x", nil)
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Etag": {`W/"1"`}, "X-A": {"old"}, "Content-Length": {"4"}},
		ContentLength: 4, Body: io.NopCloser(strings.NewReader("data")), Request: req}
	if _, err := c.Store(req, "", resp); err != nil {
		t.Fatal(err)
	}
	req2 := req.Clone(req.Context())
	e := c.Prepare(req2, "")
	if e == nil || e.ETag() != `W/"1"` || !e.StoredAt().Equal(epoch) || e.Size() < 4 {
		t.Fatalf("entry %+v", e)
	}
	// A 304 describing its own empty framing must not change the stored
	// body's.
	r304 := &http.Response{StatusCode: 304, Header: http.Header{"Etag": {`W/"2"`}, "X-A": {"new"},
		"Content-Length": {"0"}, "Content-Encoding": {"gzip"}, "Connection": {"close"}},
		Body: http.NoBody, Request: req2}
	got := c.Revalidated(e, r304)
	if got.Header.Get("X-A") != "new" || got.Header.Get("Etag") != `W/"2"` {
		t.Fatalf("header %v", got.Header)
	}
	if got.Header.Get("Content-Length") != "4" || got.Header.Get("Content-Encoding") != "" || got.Header.Get("Connection") != "" {
		t.Fatalf("framing fields taken from the 304: %v", got.Header)
	}
	req3 := req.Clone(req.Context())
	e3 := c.Prepare(req3, "")
	if e3 == nil || e3.ETag() != `W/"2"` || req3.Header.Get("If-None-Match") != `W/"2"` {
		t.Fatalf("entry not updated to the 304's ETag: %v", req3.Header)
	}
	// The old handle stays usable; it no longer replaces the newer entry.
	if c.Revalidated(e, &http.Response{StatusCode: 304, Header: http.Header{"Etag": {`W/"3"`}}, Body: http.NoBody}) == nil {
		t.Fatal("nil response")
	}
	if e4 := c.Prepare(req.Clone(req.Context()), ""); e4.ETag() != `W/"2"` {
		t.Fatalf("a stale handle overwrote the entry: ETag %s", e4.ETag())
	}
	// Not a 304: returned unchanged.
	other := &http.Response{StatusCode: 200}
	if c.Revalidated(e, other) != other {
		t.Fatal("a 200 was changed")
	}
}

func TestNilCache(t *testing.T) {
	var c *Cache
	req, _ := http.NewRequest("GET", "https://api.example/x", nil)
	if c.Prepare(req, "") != nil {
		t.Fatal("nil cache prepared")
	}
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Etag": {`"1"`}}, Body: http.NoBody}
	if got, err := c.Store(req, "", resp); got != resp || err != nil {
		t.Fatal("nil cache changed the response")
	}
	if c.Stats() != (Stats{}) {
		t.Fatal("stats")
	}
}

func TestOptionsDefaults(t *testing.T) {
	c := New(Options{MaxBytes: -1, MaxEntryBytes: -5})
	if c.mem.maxBytes != DefaultMaxBytes || c.maxEntry != DefaultMaxEntryBytes {
		t.Fatalf("defaults %d %d", c.mem.maxBytes, c.maxEntry)
	}
	c = New(Options{MaxBytes: 1000, MaxEntryBytes: 5000})
	if c.maxEntry != 1000 {
		t.Fatalf("MaxEntryBytes %d not clamped to MaxBytes", c.maxEntry)
	}
}

func TestHopByHopFieldsNotStored(t *testing.T) {
	c := New(Options{})
	req, _ := http.NewRequest("GET", "https://api.example/x", nil)
	resp := &http.Response{StatusCode: 200, ContentLength: 4, Body: io.NopCloser(strings.NewReader("data")),
		Header: http.Header{
			"Last-Modified": {"Sat, 31 May 2025 08:00:00 GMT"},
			"Connection":    {"keep-alive, X-Hop"},
			"Keep-Alive":    {"timeout=5"},
			"X-Hop":         {"1"},
			"X-Kept":        {"2"},
			HeaderName:      {"revalidated"}, // from an upstream ratekeeper
		}}
	got, err := c.Store(req, "", resp)
	if err != nil || got.Header.Get(HeaderName) != Miss {
		t.Fatalf("Store: %v, marker %q", err, got.Header.Get(HeaderName))
	}
	e := c.Prepare(req.Clone(req.Context()), "")
	if e == nil || e.LastModified() != "Sat, 31 May 2025 08:00:00 GMT" || e.ETag() != "" {
		t.Fatalf("entry %v", e)
	}
	h := e.Header()
	for _, gone := range []string{"Connection", "Keep-Alive", "X-Hop", HeaderName} {
		if _, ok := h[gone]; ok {
			t.Errorf("%s stored", gone)
		}
	}
	if h.Get("X-Kept") != "2" {
		t.Errorf("X-Kept lost: %v", h)
	}
}
