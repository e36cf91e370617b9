package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
)

// testRule computes tags the way GitHub does: the Authorization value, if
// any, then the body.
type testRule struct{}

func (testRule) EntityTag(h http.Header, body []byte) (string, bool) {
	return ruleTag(h, body), true
}

func ruleTag(h http.Header, body []byte) string {
	sum := sha256.New()
	if v, ok := h["Authorization"]; ok {
		sum.Write([]byte(v[0] + ":"))
	}
	sum.Write(body)
	return `W/"` + hex.EncodeToString(sum.Sum(nil)) + `"`
}

// A server whose tags depend on the token: through a view with its rule,
// a repeat with another token — another owner's, or the same owner's
// rotated token — sends the tag the server gives that token, and gets the
// free 304; the record is not rewritten for it.
func TestTagRuleMakesRepeatsFreeWithAnyToken(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: `{"id":1}`, tags: ruleTag, vary: "Accept, Authorization, Cookie"})
	c := New(Options{}).WithTagRule(testRule{})
	resp, _ := send(t, c, "alice", authAlice, o.url("/x"))
	mustStatus(t, resp, 200, Miss)
	for _, who := range [][2]string{{"bob", authBob}, {"alice", "Bearer tok-alice-rotated"}, {"", ""}} {
		var body string
		if who[1] == "" {
			resp, body = get(t, c, "", o.url("/x"))
		} else {
			resp, body = send(t, c, who[0], who[1], o.url("/x"))
		}
		mustStatus(t, resp, 200, Revalidated)
		want := ruleTag(o.header(), []byte(`{"id":1}`))
		if got := o.header().Get("If-None-Match"); got != want || body != `{"id":1}` {
			t.Fatalf("%s sent If-None-Match %s, want its own tag %s (body %q)", who[1], got, want, body)
		}
	}
	if _, nm := o.counts(); nm != 3 {
		t.Fatalf("%d 304s, want 3", nm)
	}
	if s := c.Stats(); s.Stores != 1 || s.Hits != 3 {
		t.Fatalf("stats %+v: one stored answer, three free repeats", s)
	}
	// Without the rule the stored tag goes, and the server's answer is
	// a full one: what every repeat with another token cost before.
	plain := New(Options{})
	send(t, plain, "alice", authAlice, o.url("/x"))
	resp, _ = send(t, plain, "bob", authBob, o.url("/x"))
	mustStatus(t, resp, 200, Miss)
}

// When the server's tags do not follow the rule (it changed it), the
// stored tag is sent as is: never worse than without a rule.
func TestTagRuleThatDoesNotHold(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: "data", etag: `W/"v1"`})
	c := New(Options{}).WithTagRule(testRule{})
	send(t, c, "alice", authAlice, o.url("/x"))
	resp, _ := send(t, c, "bob", authBob, o.url("/x"))
	mustStatus(t, resp, 200, Revalidated)
	if got := o.header().Get("If-None-Match"); got != `W/"v1"` {
		t.Fatalf("If-None-Match %s, want the stored tag", got)
	}
}

// A checked rule survives the shared blob table: another process (a fresh
// memory front) computes the tag for its own token.
func TestTagRuleThroughABackend(t *testing.T) {
	o := newOrigin(t)
	o.set("/x", resource{body: `{"id":2}`, tags: ruleTag})
	b := newFakeBackend()
	c := New(Options{Backend: b}).WithTagRule(testRule{})
	send(t, c, "alice", authAlice, o.url("/x"))
	other := New(Options{Backend: b}).WithTagRule(testRule{})
	resp, _ := send(t, other, "bob", authBob, o.url("/x"))
	mustStatus(t, resp, 200, Revalidated)
	// The view keeps PrivatePerOwner, and PrivatePerOwner keeps the rule.
	if v := c.PrivatePerOwner(); v.rule == nil || !c.WithTagRule(testRule{}).PrivatePerOwner().privatePerOwner {
		t.Fatal("views lose their settings")
	}
}
