package cache

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeBackend is an in-memory Backend that can fail on demand.
type fakeBackend struct {
	mu                        sync.Mutex
	blobs                     map[string][]byte
	failGet, failPut, failDel error
	gets, puts                int
}

func newFakeBackend() *fakeBackend { return &fakeBackend{blobs: map[string][]byte{}} }

func (f *fakeBackend) GetBlob(ctx context.Context, key string) ([]byte, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	if f.failGet != nil {
		return nil, false, f.failGet
	}
	v, ok := f.blobs[key]
	return bytes.Clone(v), ok, nil
}

func (f *fakeBackend) PutBlob(ctx context.Context, key string, value []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.puts++
	if f.failPut != nil {
		return f.failPut
	}
	f.blobs[key] = bytes.Clone(value)
	return nil
}

func (f *fakeBackend) DeleteBlob(ctx context.Context, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failDel != nil {
		return f.failDel
	}
	delete(f.blobs, key)
	return nil
}

func (f *fakeBackend) keys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.blobs))
}

func (f *fakeBackend) corrupt(fn func([]byte) []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, v := range f.blobs {
		f.blobs[k] = fn(v)
	}
}

// dropFront empties c's memory front, as a restart would: the next
// lookups read the backend.
func dropFront(c *Cache) {
	c.front = newLRU(c.front.maxBytes)
}

func TestBackendRoundTrip(t *testing.T) {
	o := newOrigin(t)
	o.set("/repos/a/b", resource{body: `{"secret":"no"}`, etag: `W/"v1"`,
		vary: "Accept, Authorization, X-Requested-With", cacheControl: "private, max-age=60"})
	fb := newFakeBackend()
	c := New(Options{Backend: fb, Now: fixedClock(epoch)})

	resp, _ := get(t, c, "alice", o.url("/repos/a/b"), "Authorization", "Bearer tok-alice-1", "X-Requested-With", "xhr")
	mustStatus(t, resp, 200, Miss)
	ks := fb.keys()
	if len(ks) != 1 || !strings.HasPrefix(ks[0], BlobKeyPrefix) || len(ks[0]) != len(BlobKeyPrefix)+64 {
		t.Fatalf("backend keys %q", ks)
	}
	blob := fb.blobs[ks[0]]
	for _, leak := range []string{"tok-alice-1", "alice", "/repos/a/b", "xhr"} {
		if bytes.Contains(blob, []byte(leak)) || strings.Contains(ks[0], leak) {
			t.Fatalf("%q reached the backend", leak)
		}
	}

	// A second process sharing the backend revalidates from it.
	c2 := New(Options{Backend: fb})
	resp, body := get(t, c2, "alice", o.url("/repos/a/b"), "Authorization", "Bearer tok-alice-2", "X-Requested-With", "xhr")
	mustStatus(t, resp, 200, Revalidated)
	if body != `{"secret":"no"}` || o.header().Get("If-None-Match") != `W/"v1"` {
		t.Fatalf("body %q, If-None-Match %q", body, o.header().Get("If-None-Match"))
	}
	if got := resp.Header.Get("Cache-Control"); got != "private, max-age=60" {
		t.Fatalf("stored header lost: Cache-Control %q", got)
	}
	// Vary still holds through the backend.
	req, _ := http.NewRequest("GET", o.url("/repos/a/b"), nil)
	req.Header.Set("X-Requested-With", "other")
	if c2.Prepare(req, "alice") != nil {
		t.Fatal("Vary ignored for a backend entry")
	}
	if s := c2.Stats(); s.Hits != 1 || s.Entries != 1 || s.Errors != 0 { // the front holds it
		t.Fatalf("stats %+v", s)
	}

	// A record decodes to what was stored.
	r, err := decodeRecord(requestKey(req), blob)
	if err != nil {
		t.Fatal(err)
	}
	e := r.variants[0]
	if len(r.variants) != 1 || !e.shared || !e.private || e.owner != partyOf("alice") {
		t.Fatalf("decoded record %+v", r.variants)
	}
	if e.ETag() != `W/"v1"` || !e.StoredAt().Equal(epoch) || !slices.Equal(e.varyNames, []string{"Accept", "X-Requested-With"}) {
		t.Fatalf("decoded %+v", e)
	}
}

func (f *fakeBackend) counts() (gets, puts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets, f.puts
}

// TestBackendSharedAcrossOwners: one blob per URL holds the answers of
// several owners; another process revalidates with another owner's ETag
// from it.
func TestBackendSharedAcrossOwners(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "data", etag: `"1"`, lastModified: epoch.Add(-time.Hour),
		byAuth: map[string][2]string{authCarol: {"carol's", `"c"`}}})
	fb := newFakeBackend()
	c1 := New(Options{Backend: fb})
	send(t, c1, "alice", authAlice, o.url("/x"))

	c2 := New(Options{Backend: fb})
	resp, body := send(t, c2, "bob", authBob, o.url("/x"))
	mustStatus(t, resp, 200, Revalidated)
	if body != "data" || o.header().Get("If-None-Match") != `"1"` || o.header().Get("If-Modified-Since") != "" {
		t.Fatalf("body %q, request %v", body, o.header())
	}
	resp, _ = send(t, c2, "carol", authCarol, o.url("/x"))
	mustStatus(t, resp, 200, Miss)
	if ks := fb.keys(); len(ks) != 1 {
		t.Fatalf("blobs %q, want one for the URL", ks)
	}
	r, err := decodeRecord(requestKey(request(o.url("/x"), "")), fb.blobs[fb.keys()[0]])
	if err != nil {
		t.Fatal(err)
	}
	if len(r.variants) != 2 || !r.variants[0].shared || r.variants[0].owner != partyOf("carol") ||
		r.variants[1].shared || r.variants[1].owner != partyOf("alice") {
		t.Fatalf("variants %+v", r.variants)
	}
	// The first process reads the record again (its front holds the old
	// one until it is used): alice revalidates her own answer, with her
	// Last-Modified.
	dropFront(c1)
	resp, body = send(t, c1, "alice", authAlice, o.url("/x"))
	mustStatus(t, resp, 200, Revalidated)
	if body != "data" || o.header().Get("If-Modified-Since") == "" {
		t.Fatalf("body %q, request %v", body, o.header())
	}
}

// TestBackendFront: a repeated GET in one process reads the blob table
// once; writes reach it every time.
func TestBackendFront(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "data", etag: `"1"`})
	fb := newFakeBackend()
	c := New(Options{Backend: fb, MaxBytes: 1 << 20})
	get(t, c, "alice", o.url("/x")) // one read (a miss), one write
	for range 5 {
		resp, _ := get(t, c, "alice", o.url("/x"))
		mustStatus(t, resp, 200, Revalidated)
	}
	if gets, puts := fb.counts(); gets != 1 || puts != 1 {
		t.Fatalf("%d reads and %d writes of the backend, want 1 and 1", gets, puts)
	}
	o.set("/x", resource{body: "two", etag: `"2"`})
	resp, body := get(t, c, "alice", o.url("/x"))
	mustStatus(t, resp, 200, Miss)
	if gets, puts := fb.counts(); gets != 1 || puts != 2 || body != "two" {
		t.Fatalf("%d reads and %d writes, body %q", gets, puts, body)
	}
	if s := c.Stats(); s.Entries != 1 || s.Bytes == 0 || s.Bytes > (1<<20)/4 {
		t.Fatalf("stats %+v", s)
	}
	// Another process sees the write.
	c2 := New(Options{Backend: fb})
	resp, body = get(t, c2, "bob", o.url("/x"))
	mustStatus(t, resp, 200, Revalidated)
	if body != "two" {
		t.Fatalf("body %q", body)
	}
}

func TestBackendCorruptedBlobIsAMiss(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func([]byte) []byte
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
		{"garbage", func(b []byte) []byte { return []byte("not a blob at all") }},
		{"bad magic", func(b []byte) []byte { c := bytes.Clone(b); c[0] = 'X'; return c }},
		{"magic only", func(b []byte) []byte { return blobMagic }},
		{"empty", func(b []byte) []byte { return nil }},
		{"flipped bytes", func(b []byte) []byte {
			c := bytes.Clone(b)
			for i := len(blobMagic); i < len(c); i += 7 {
				c[i] ^= 0xff
			}
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOrigin(t)
			o.set("/x", resource{body: "data", etag: `"1"`})
			fb := newFakeBackend()
			var logs bytes.Buffer
			c := New(Options{Backend: fb, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			get(t, c, "alice", o.url("/x"))
			fb.corrupt(tc.fn)
			dropFront(c)

			resp, body := get(t, c, "alice", o.url("/x"))
			mustStatus(t, resp, 200, Miss) // fetched in full and stored again
			if body != "data" || o.header().Get("If-None-Match") != "" {
				t.Fatalf("body %q, If-None-Match %q", body, o.header().Get("If-None-Match"))
			}
			if s := c.Stats(); s.Errors != 1 {
				t.Fatalf("stats %+v", s)
			}
			if !strings.Contains(logs.String(), "unreadable cache entry") || strings.Contains(logs.String(), "alice") || strings.Contains(logs.String(), "/x") {
				t.Fatalf("log %q", logs.String())
			}
			resp, _ = get(t, c, "alice", o.url("/x"))
			mustStatus(t, resp, 200, Revalidated)
		})
	}
}

func TestBackendEntryForAnotherKeyRejected(t *testing.T) {
	fb := newFakeBackend()
	c := New(Options{Backend: fb})
	storeDirect(t, c, "https://h/a", 10)
	storeDirect(t, c, "https://h/b", 10)
	ka, kb := fb.keys()[0], fb.keys()[1]
	fb.blobs[kb] = fb.blobs[ka] // a blob copied under the wrong key
	dropFront(c)
	hits := 0
	for _, u := range []string{"https://h/a", "https://h/b"} {
		if cached(c, u) {
			hits++
		}
	}
	if hits != 1 || c.Stats().Errors != 1 {
		t.Fatalf("hits %d, stats %+v", hits, c.Stats())
	}
}

func TestBackendErrorsDoNotFailRequests(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "data", etag: `"1"`})
	fb := newFakeBackend()
	var logs bytes.Buffer
	c := New(Options{Backend: fb, Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	fb.failPut = errors.New("disk full")
	resp, body := get(t, c, "", o.url("/x"))
	mustStatus(t, resp, 200, "") // not stored, no marker
	if body != "data" {
		t.Fatalf("body %q", body)
	}
	fb.failPut = nil
	get(t, c, "", o.url("/x"))

	fb.failGet = errors.New("connection refused")
	dropFront(c)
	resp, body = get(t, c, "", o.url("/x"))
	mustStatus(t, resp, 200, Miss)
	if body != "data" || o.header().Get("If-None-Match") != "" {
		t.Fatalf("body %q, If-None-Match %q", body, o.header().Get("If-None-Match"))
	}
	fb.failGet = nil

	fb.failDel = errors.New("read-only")
	o.set("/x", resource{body: "new", cacheControl: "no-store"})
	resp, body = get(t, c, "", o.url("/x"))
	mustStatus(t, resp, 200, "")
	if body != "new" {
		t.Fatalf("body %q", body)
	}
	// Four: the failed read happens twice, in Prepare and in Store's
	// read of what to replace.
	if s := c.Stats(); s.Errors != 4 {
		t.Fatalf("stats %+v", s)
	}
	for _, msg := range []string{"disk full", "connection refused", "read-only", "level=WARN"} {
		if !strings.Contains(logs.String(), msg) {
			t.Fatalf("log lacks %q: %s", msg, logs.String())
		}
	}
}
