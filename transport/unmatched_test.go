package transport

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
)

// unknownHost answers requests to hosts no provider owns with the
// responses it is given, in turn (nil, or none left: a plain 200),
// recording what it was sent and when.
type unknownHost struct {
	mu      sync.Mutex
	answers []func() *http.Response
	sent    []*http.Request
	at      []time.Time
}

func (h *unknownHost) RoundTrip(req *http.Request) (*http.Response, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sent = append(h.sent, req)
	h.at = append(h.at, time.Now())
	next := func() *http.Response { return &http.Response{StatusCode: 200, Header: http.Header{}} }
	if len(h.answers) > 0 {
		if h.answers[0] != nil {
			next = h.answers[0]
		}
		h.answers = h.answers[1:]
	}
	resp := next()
	resp.Request = req
	if resp.Body == nil {
		resp.Body = io.NopCloser(strings.NewReader("{}"))
	}
	return resp, nil
}

func unmatchedTransport(t *testing.T, base http.RoundTripper, events *eventLog) *Transport {
	t.Helper()
	p, err := provider.New("github", provider.GitHub, "https://api.github.com")
	if err != nil {
		t.Fatal(err)
	}
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		t.Fatal(err)
	}
	tr, err := New(Options{Providers: reg, Base: base, OnEvent: events.add, MaxWait: time.Minute,
		Pools: map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-github-secret", "test"))}})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestUnmatchedHostIsPacedByItsHeaders: a host no provider owns gets no
// token, is named once, and its own rate-limit headers still pace what
// follows: a spent window is waited out, a 429 is retried after its
// Retry-After, and a host that states nothing is never held back.
func TestUnmatchedHostIsPacedByItsHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		spent := func() *http.Response {
			h := http.Header{}
			h.Set("X-RateLimit-Limit", "10")
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", strconv.FormatInt(start.Add(30*time.Second).Unix(), 10))
			return &http.Response{StatusCode: 200, Header: h}
		}
		refused := func() *http.Response {
			h := http.Header{}
			h.Set("Retry-After", "5")
			return &http.Response{StatusCode: 429, Header: h}
		}
		host := &unknownHost{answers: []func() *http.Response{spent, nil, refused, nil}}
		events := &eventLog{}
		tr := unmatchedTransport(t, host, events)
		get := func(url string) *http.Response {
			t.Helper()
			req, _ := http.NewRequest("GET", url, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp
		}
		get("https://api.example.test/a") // leaves nothing until +30s
		get("https://api.example.test/b") // waits for it
		if waited := host.at[1].Sub(host.at[0]); waited < 30*time.Second {
			t.Errorf("the second request went %v after the first, before the reset 30s on", waited)
		}
		resp := get("https://api.example.test/c") // 429, Retry-After 5, then 200
		if resp.StatusCode != 200 || len(host.sent) != 4 || host.at[3].Sub(host.at[2]) < 5*time.Second {
			t.Errorf("after a 429: status %d, %d sent, retried %v later", resp.StatusCode, len(host.sent), host.at[3].Sub(host.at[2]))
		}
		before := time.Now()
		get("https://quiet.example.test/d") // states nothing: no wait
		get("https://quiet.example.test/e")
		if time.Since(before) != 0 {
			t.Errorf("a host that states no limit was held back %v", time.Since(before))
		}
		for _, r := range host.sent {
			if r.Header.Get("Authorization") != "" {
				t.Fatalf("%s was sent a token", r.URL)
			}
		}
		for _, e := range events.ev {
			if e.Kind == EventRateLimited && (e.Provider != "api.example.test" || e.Limit != "primary" || e.Wait != 5*time.Second) {
				t.Errorf("refusal event %+v, want api.example.test, a primary limit and its 5s", e)
			}
		}
		if n := events.count(EventUnmatched); n != 2 {
			t.Errorf("%d unmatched events for two hosts, want one each", n)
		}
	})
}

// TestUnmatchedHostPauseBeyondMaxWait: a pause longer than the max wait is
// a *WaitError, as for a provider.
func TestUnmatchedHostPauseBeyondMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &unknownHost{answers: []func() *http.Response{func() *http.Response {
			h := http.Header{}
			h.Set("Retry-After", "3600")
			return &http.Response{StatusCode: 429, Header: h}
		}}}
		tr := unmatchedTransport(t, host, &eventLog{})
		req, _ := http.NewRequest("GET", "https://api.example.test/a", nil)
		_, err := tr.RoundTrip(req)
		var we *WaitError
		if !errors.As(err, &we) || len(host.sent) != 1 {
			t.Fatalf("%v after %d sent; want a WaitError after one", err, len(host.sent))
		}
	})
}
