package transport

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/cache"
	"github.com/ratekeeper/ratekeeper/sim"
)

// A request its caller made conditional with a tag GitHub gave another
// token — one the caller got through the transport, or one it kept with
// the body (a previous run's output) — goes with the tag GitHub gives the
// token sent now as well, and the 304 keeps the caller's tag.
func TestCallersOwnTagWithAnotherToken(t *testing.T) {
	api := sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-alice-0001", Owner: "alice"}, {Token: "tok-bob-0002", Owner: "bob"}}}
	a := newSim(t, api, []string{"tok-alice-0001"}, nil)
	b := a.sibling(t, []string{"tok-bob-0002"}, nil)
	first := a.get(t, "/repos/o/r")
	tag, body := first.Header.Get("Etag"), drain(first)

	conditional := func(s *simSetup, ctx context.Context, tag string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/repos/o/r", nil)
		req.Header.Set("If-None-Match", tag)
		resp, err := s.t.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		return resp
	}
	// Through the transport that stored it, with the other token: the
	// caller's tag names the stored body.
	a2 := a.sibling(t, []string{"tok-bob-0002"}, func(o *Options) { o.Cache = a.t.cache })
	if resp := conditional(a2, context.Background(), tag); resp.StatusCode != http.StatusNotModified || resp.Header.Get("Etag") != tag {
		t.Fatalf("caller's tag, stored answer, another token: %d ETag %s, want 304 and %s", resp.StatusCode, resp.Header.Get("Etag"), tag)
	}
	// A fresh transport knows nothing: the caller holds the body.
	if resp := conditional(b, context.Background(), tag); resp.StatusCode != http.StatusOK {
		t.Fatalf("without the body: %d, want the full answer", resp.StatusCode)
	}
	held := cache.WithHeldBody(context.Background(), []byte(body))
	if resp := conditional(b, held, tag); resp.StatusCode != http.StatusNotModified || resp.Header.Get("Etag") != tag {
		t.Fatalf("held body, another token: %d ETag %s, want 304 and %s", resp.StatusCode, resp.Header.Get("Etag"), tag)
	}
	bob, _ := a.srv.Stats().BucketFor("github", "bob", "core")
	if bob.NotModified != 2 || bob.Charged != 1 {
		t.Fatalf("bob: %d 304s, %d charged; want 2 and 1", bob.NotModified, bob.Charged)
	}
}
