package cache

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// The tests of this file are about who may revalidate what: an answer with
// an ETag goes with any credential (the server decides), a Last-Modified
// only with its owner's, and private answers stay with their owner
// through a PrivatePerOwner view.

const (
	authAlice = "Bearer tok-alice-1"
	authBob   = "Bearer tok-bob-1"
	authCarol = "Bearer tok-carol-1"
)

// send is get with an Authorization header.
func send(t *testing.T, c *Cache, owner, auth, url string) (*http.Response, string) {
	t.Helper()
	return get(t, c, owner, url, "Authorization", auth)
}

func TestAnotherOwnerRevalidatesWithTheETag(t *testing.T) {
	o := newOrigin(t)
	lm := epoch.Add(-time.Hour)
	o.set("/x", resource{body: "data", etag: `W/"1"`, lastModified: lm, cacheControl: "private, max-age=60",
		vary: "Accept, Authorization, Cookie, X-GitHub-OTP, Accept-Encoding"})
	c := New(Options{})
	resp, _ := send(t, c, "alice", authAlice, o.url("/x"))
	mustStatus(t, resp, 200, Miss)

	resp, body := send(t, c, "bob", authBob, o.url("/x"))
	mustStatus(t, resp, 200, Revalidated)
	if body != "data" {
		t.Fatalf("body %q", body)
	}
	h := o.header()
	if h.Get("Authorization") != authBob || h.Get("If-None-Match") != `W/"1"` {
		t.Fatalf("server saw Authorization %q, If-None-Match %q", h.Get("Authorization"), h.Get("If-None-Match"))
	}
	// A date says "unchanged", not "the same for you": only the owner's
	// requests carry it.
	if got := h.Get("If-Modified-Since"); got != "" {
		t.Fatalf("another owner sent If-Modified-Since %q", got)
	}
	send(t, c, "alice", authAlice, o.url("/x"))
	if got := o.header().Get("If-Modified-Since"); got != lm.Format(http.TimeFormat) {
		t.Fatalf("the owner's If-Modified-Since %q", got)
	}
	// Anonymous requests too: the server answers 304 only if the
	// anonymous representation is the stored one.
	resp, _ = get(t, c, "", o.url("/x"))
	mustStatus(t, resp, 200, Revalidated)
	if _, nm := o.counts(); nm != 3 {
		t.Fatalf("%d 304s, want 3", nm)
	}
	if s := c.Stats(); s.Entries != 1 || s.Stores != 1 || s.Hits != 3 {
		t.Fatalf("stats %+v: one stored answer serves every owner", s)
	}
}

// TestRefusedCredentialGetsTheRefusal: a credential that may not see the
// resource sends the stored validator and gets the server's 404 or 403,
// never the stored body; the owner's answer stays.
func TestRefusedCredentialGetsTheRefusal(t *testing.T) {
	for _, code := range []int{http.StatusNotFound, http.StatusForbidden} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			o := newOrigin(t)
			o.set("/private", resource{body: "secret", etag: `"s"`, cacheControl: "private",
				denied: map[string]int{authBob: code}})
			c := New(Options{})
			send(t, c, "alice", authAlice, o.url("/private"))

			resp, body := send(t, c, "bob", authBob, o.url("/private"))
			mustStatus(t, resp, code, "")
			if body == "secret" || o.header().Get("If-None-Match") != `"s"` {
				t.Fatalf("bob got %q (If-None-Match %q)", body, o.header().Get("If-None-Match"))
			}
			resp, body = send(t, c, "alice", authAlice, o.url("/private"))
			mustStatus(t, resp, 200, Revalidated)
			if body != "secret" {
				t.Fatalf("alice got %q", body)
			}
		})
	}
}

// TestLastModifiedOnlyStaysWithItsOwner: without an ETag nothing tells
// that another credential's representation is the stored one.
func TestLastModifiedOnlyStaysWithItsOwner(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "data", lastModified: epoch.Add(-time.Hour)})
	c := New(Options{})
	send(t, c, "alice", authAlice, o.url("/x"))
	resp, _ := send(t, c, "bob", authBob, o.url("/x"))
	mustStatus(t, resp, 200, Miss)
	if h := o.header(); h.Get("If-Modified-Since") != "" || h.Get("If-None-Match") != "" {
		t.Fatalf("bob's request carried alice's validators: %v", h)
	}
	// Each keeps its own.
	for _, who := range [][2]string{{"alice", authAlice}, {"bob", authBob}} {
		resp, _ := send(t, c, who[0], who[1], o.url("/x"))
		mustStatus(t, resp, 200, Revalidated)
	}
	if s := c.Stats(); s.Entries != 2 {
		t.Fatalf("stats %+v, want one answer per owner", s)
	}
}

// TestOwnersWithTheirOwnRepresentations: when the server sends each
// credential another representation (per-user fields, or ETags that
// depend on the token as GitHub's do), each owner keeps revalidating its
// own answer instead of replacing the other's at every request.
func TestOwnersWithTheirOwnRepresentations(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "for anyone", etag: `"any"`, byAuth: map[string][2]string{
		authAlice: {"for alice", `"a"`},
		authBob:   {"for bob", `"b"`},
	}})
	c := New(Options{})
	want := map[string]string{"alice": "for alice", "bob": "for bob", "carol": "for anyone"}
	auth := map[string]string{"alice": authAlice, "bob": authBob, "carol": authCarol}
	for _, who := range []string{"alice", "bob", "carol"} {
		resp, body := send(t, c, who, auth[who], o.url("/x"))
		mustStatus(t, resp, 200, Miss)
		if body != want[who] {
			t.Fatalf("%s got %q", who, body)
		}
	}
	// carol tried bob's ETag (the newest shared answer), bob alice's.
	requests, _ := o.counts()
	for round := range 3 {
		for _, who := range []string{"alice", "bob", "carol"} {
			resp, body := send(t, c, who, auth[who], o.url("/x"))
			mustStatus(t, resp, 200, Revalidated)
			if body != want[who] {
				t.Fatalf("round %d: %s got %q", round, who, body)
			}
		}
	}
	if n, nm := o.counts(); n-requests != 9 || nm != 9 {
		t.Fatalf("%d requests, %d 304s; want 9 free repeats", n-requests, nm)
	}
	// dave, a new owner, tries the shared answer (carol's, the newest):
	// the server confirms it for him.
	resp, body := send(t, c, "dave", "Bearer tok-dave-1", o.url("/x"))
	mustStatus(t, resp, 200, Revalidated)
	if body != "for anyone" || o.header().Get("If-None-Match") != `"any"` {
		t.Fatalf("dave got %q with If-None-Match %q", body, o.header().Get("If-None-Match"))
	}
}

// TestChangedResourceSharedAgain: after a change, the first owner to fetch
// the new representation shares it; an owner whose old answer is stale
// fetches it in full once, and the record ends with one shared answer.
func TestChangedResourceSharedAgain(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "one", etag: `"1"`})
	c := New(Options{})
	send(t, c, "alice", authAlice, o.url("/x"))
	o.set("/x", resource{body: "two", etag: `"2"`})

	resp, body := send(t, c, "bob", authBob, o.url("/x"))
	mustStatus(t, resp, 200, Miss)
	resp, body2 := send(t, c, "carol", authCarol, o.url("/x"))
	mustStatus(t, resp, 200, Revalidated)
	if body != "two" || body2 != "two" {
		t.Fatalf("bodies %q %q", body, body2)
	}
	// alice still holds "one": her request says so, and gets "two".
	resp, body = send(t, c, "alice", authAlice, o.url("/x"))
	mustStatus(t, resp, 200, Miss)
	if body != "two" || o.header().Get("If-None-Match") != `"1"` {
		t.Fatalf("alice got %q with If-None-Match %q", body, o.header().Get("If-None-Match"))
	}
	if s := c.Stats(); s.Entries != 1 {
		t.Fatalf("stats %+v: one representation, one answer", s)
	}
	resp, _ = send(t, c, "bob", authBob, o.url("/x"))
	mustStatus(t, resp, 200, Revalidated)
}

// TestNotStorableDropsOnlyTheSendersAnswer: a 200 the cache cannot keep
// replaces what its owner had, not another owner's answer.
func TestNotStorableDropsOnlyTheSendersAnswer(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "one", etag: `"1"`, byAuth: map[string][2]string{authBob: {"bob's", `"b"`}}})
	c := New(Options{})
	send(t, c, "alice", authAlice, o.url("/x"))
	send(t, c, "bob", authBob, o.url("/x"))
	o.set("/x", resource{body: "one", etag: `"1"`, byAuth: map[string][2]string{authBob: {"bob's new", `"b2"`}},
		cacheControl: "no-store"})
	resp, _ := send(t, c, "bob", authBob, o.url("/x"))
	mustStatus(t, resp, 200, "")
	o.set("/x", resource{body: "one", etag: `"1"`})
	resp, _ = send(t, c, "alice", authAlice, o.url("/x"))
	mustStatus(t, resp, 200, Revalidated)
	if s := c.Stats(); s.Entries != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestVariantsPerURLBounded(t *testing.T) {
	o := newOrigin(t)
	byAuth := map[string][2]string{}
	for i := range 12 {
		byAuth[fmt.Sprintf("Bearer tok-%d", i)] = [2]string{fmt.Sprintf("body %d", i), fmt.Sprintf(`"%d"`, i)}
	}
	o.set("/x", resource{body: "any", etag: `"any"`, byAuth: byAuth})
	c := New(Options{})
	for i := range 12 {
		send(t, c, fmt.Sprint("owner", i), fmt.Sprintf("Bearer tok-%d", i), o.url("/x"))
	}
	if s := c.Stats(); s.Entries != maxVariants {
		t.Fatalf("stats %+v, want %d answers kept", s, maxVariants)
	}
	// The newest are kept.
	for i := 12 - maxVariants; i < 12; i++ {
		resp, body := send(t, c, fmt.Sprint("owner", i), fmt.Sprintf("Bearer tok-%d", i), o.url("/x"))
		mustStatus(t, resp, 200, Revalidated)
		if body != fmt.Sprintf("body %d", i) {
			t.Fatalf("owner%d got %q", i, body)
		}
	}
}

// TestPrivatePerOwner: through the view (a gateway's clients with their
// own tokens), private answers are neither shared nor taken from others;
// public ones are shared as usual.
func TestPrivatePerOwner(t *testing.T) {
	o := newOrigin(t)
	o.set("/private", resource{body: "mine", etag: `"p"`, cacheControl: "private, max-age=60"})
	o.set("/public", resource{body: "ours", etag: `"q"`, cacheControl: "public, max-age=60"})
	o.set("/operator", resource{body: "operator's", etag: `"g"`, cacheControl: "private"})
	c := New(Options{})
	clients := c.PrivatePerOwner()

	send(t, clients, "alice", authAlice, o.url("/private"))
	resp, _ := send(t, clients, "bob", authBob, o.url("/private"))
	mustStatus(t, resp, 200, Miss)
	if got := o.header().Get("If-None-Match"); got != "" {
		t.Fatalf("bob's request carried alice's private validator %q", got)
	}
	// Nor does the operator's own credential use a client's private answer.
	if e := c.Prepare(request(o.url("/private"), authCarol), "carol"); e != nil {
		t.Fatal("another owner found a client's private answer")
	}
	for _, who := range [][2]string{{"alice", authAlice}, {"bob", authBob}} {
		resp, body := send(t, clients, who[0], who[1], o.url("/private"))
		mustStatus(t, resp, 200, Revalidated)
		if body != "mine" {
			t.Fatalf("%s got %q", who[0], body)
		}
	}

	send(t, clients, "alice", authAlice, o.url("/public"))
	resp, _ = send(t, clients, "bob", authBob, o.url("/public"))
	mustStatus(t, resp, 200, Revalidated)

	// A private answer the operator's credential stored is shared among
	// the operator's credentials, not with the clients (bar its owner).
	send(t, c, "operator", authCarol, o.url("/operator"))
	if e := clients.Prepare(request(o.url("/operator"), authBob), "bob"); e != nil {
		t.Fatal("a client got the operator's private answer")
	}
	if e := c.Prepare(request(o.url("/operator"), "Bearer tok-operator-2"), "operator2"); e == nil {
		t.Fatal("the operator's other credential did not find its answer")
	}
	if e := clients.Prepare(request(o.url("/operator"), authCarol), "operator"); e == nil {
		t.Fatal("the owner did not find its own private answer through the view")
	}
	if c.Stats() != clients.Stats() {
		t.Fatal("the view has counters of its own")
	}
}

func request(url, auth string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", auth)
	return req
}
