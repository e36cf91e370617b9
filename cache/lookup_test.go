package cache

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// storeAnswer stores a 200 for url as owner (and principal, if any) at t0
// through c, with the given Cache-Control and Vary.
func storeAnswer(t *testing.T, c *Cache, owner, principal, url, cacheControl, vary string, t0 time.Time) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer tok-"+owner)
	if principal != "" {
		req = req.WithContext(WithPrincipal(context.Background(), principal))
	}
	h := http.Header{"Etag": {`W/"1"`}, "Cache-Control": {cacheControl}, "Date": {t0.Format(http.TimeFormat)}}
	if vary != "" {
		h.Set("Vary", vary)
	}
	resp := &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader("data")), ContentLength: 4}
	out, err := c.StoreAt(req, owner, resp, t0, t0)
	if err != nil || out.Header.Get(HeaderName) != Miss {
		t.Fatalf("store: %v %v", err, out.Header)
	}
}

// Who may be served a stored answer without asking the server: its owner
// in a private cache; in a shared one its owner and principal for a
// private answer, every principal of a credential's owner for a public
// one; another owner only for a public answer that does not vary on the
// credential.
func TestLookupServesOnlyWhoMaySee(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := t0.Add(10 * time.Second)
	const url = "https://api.test/x"
	look := func(c *Cache, principal string, owners ...string) (Hit, bool) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if principal != "" {
			req = req.WithContext(WithPrincipal(context.Background(), principal))
		}
		return c.Lookup(req, owners, at)
	}
	gh := "private, max-age=60, s-maxage=60"

	private := New(Options{})
	storeAnswer(t, private, "alice", "", url, gh, "Accept, Authorization", t0)
	if h, ok := look(private, "", "bob", "alice"); !ok || h.Owner != "alice" || h.Use != ServeFresh || h.Age != 10*time.Second {
		t.Errorf("a pool with alice: %+v %v", h, ok)
	}
	if _, ok := look(private, "", "bob"); ok {
		t.Errorf("bob got alice's private answer")
	}

	shared := New(Options{}).Shared()
	storeAnswer(t, shared, "alice", "client-1", url, gh, "Accept, Authorization", t0)
	if _, ok := look(shared, "client-1", "alice"); !ok {
		t.Errorf("the principal that received it: not served")
	}
	if _, ok := look(shared, "client-2", "alice"); ok {
		t.Errorf("another client key of the same owner got a private answer")
	}

	public := New(Options{}).Shared()
	storeAnswer(t, public, "alice", "client-1", url, "public, s-maxage=30", "Accept, Authorization", t0)
	if _, ok := look(public, "client-2", "alice"); !ok {
		t.Errorf("a public answer: not served to another client of the owner")
	}
	if _, ok := look(public, "client-2", "bob"); ok {
		t.Errorf("an answer varying on Authorization went to another owner")
	}

	open := New(Options{})
	storeAnswer(t, open, "alice", "", url, "max-age=60", "Accept", t0)
	if h, ok := look(open, "", "bob"); !ok || h.Owner != "" {
		t.Errorf("a public answer that varies on no credential: %+v %v", h, ok)
	}
	if _, ok := look(open.Shared(), "", "bob"); ok {
		t.Errorf("a shared cache served an answer to a request with credentials that is not public")
	}

	off := New(Options{AlwaysRevalidate: true})
	storeAnswer(t, off, "alice", "", url, gh, "", t0)
	if _, ok := look(off, "", "alice"); ok {
		t.Errorf("AlwaysRevalidate served from the cache")
	}
}

// A fresh answer stored by one process is fresh for another sharing the
// backend: the times and the principal travel with the blob.
func TestLookupThroughABackend(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const url = "https://api.test/x"
	fb := newFakeBackend()
	storeAnswer(t, New(Options{Backend: fb}).Shared(), "alice", "client-1", url, "private, max-age=60, s-maxage=60", "Accept, Authorization", t0)
	other := New(Options{Backend: fb}).Shared()
	look := func(principal string, at time.Duration) (Hit, bool) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req = req.WithContext(WithPrincipal(context.Background(), principal))
		return other.Lookup(req, []string{"alice"}, t0.Add(at))
	}
	if h, ok := look("client-1", 20*time.Second); !ok || h.Age != 20*time.Second {
		t.Fatalf("another process: %+v %v, want fresh at age 20 s", h, ok)
	}
	if _, ok := look("client-2", 20*time.Second); ok {
		t.Fatalf("another principal got a private answer through the backend")
	}
	if _, ok := look("client-1", 61*time.Second); ok {
		t.Fatalf("served past its max-age")
	}
}
