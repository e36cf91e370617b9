package transport

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

func unmatchedTransport(t *testing.T, base http.RoundTripper, events *eventLog, tune ...func(*Options)) *Transport {
	t.Helper()
	p, err := provider.New("github", provider.GitHub, "https://api.github.com")
	if err != nil {
		t.Fatal(err)
	}
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		t.Fatal(err)
	}
	opts := Options{Providers: reg, Base: base, OnEvent: events.add, MaxWait: time.Minute, DisableCache: true,
		Pools: map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-github-secret", "test"))}}
	for _, f := range tune {
		f(&opts)
	}
	tr, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestUnmatchedHostIsPacedByItsHeaders: a host no provider owns (and no
// variable named after it) gets no token, is named once, and its own
// rate-limit headers pace what follows: a spent window is waited out, a
// 429 is retried after its Retry-After.
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
		get("https://quiet.example.test/d") // states nothing: 60 a minute, so no wait for two
		get("https://quiet.example.test/e")
		if time.Since(before) != 0 {
			t.Errorf("two requests to a host that states no limit were held back %v", time.Since(before))
		}
		for _, r := range host.sent {
			if r.Header.Get("Authorization") != "" {
				t.Fatalf("%s was sent a token", r.URL)
			}
		}
		for _, e := range events.ev {
			if e.Kind == EventRateLimited && (e.Provider != "api.example.test" || e.Limit != "bare" || e.Wait != 5*time.Second) {
				t.Errorf("refusal event %+v, want api.example.test, a bare refusal and its 5s", e)
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

// sentTo returns the Authorization headers host was sent, by host.
func (h *unknownHost) auths() map[string][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]string{}
	for _, r := range h.sent {
		out[r.URL.Host] = append(out[r.URL.Host], r.Header.Get("Authorization"))
	}
	return out
}

// A host's own variable is used for that exact host, and announced once
// with the variable's name; a built-in provider's variable is never sent
// to a look-alike host.
func TestUnknownHostTokenFromItsVariable(t *testing.T) {
	t.Setenv("GIT_EXAMPLE_COM_TOKEN", "tok-git-example-1234")
	t.Setenv("GITHUB_TOKEN", "tok-github-env-5678")
	t.Setenv("GITLAB_TOKEN", "tok-gitlab-env-9012")
	host := &unknownHost{}
	events := &eventLog{}
	tr := unmatchedTransport(t, host, events)
	for _, u := range []string{"https://git.example.com/a", "https://git.example.com/b", "https://github.evil.example/x", "https://gitlab.evil.example/y", "https://git.example.com:8443/c"} {
		req, _ := http.NewRequest("GET", u, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	got := host.auths()
	if a := got["git.example.com"]; len(a) != 2 || a[0] != "Bearer tok-git-example-1234" || a[1] != a[0] {
		t.Errorf("git.example.com was sent %q, want its own variable's token twice", a)
	}
	for _, h := range []string{"github.evil.example", "gitlab.evil.example", "git.example.com:8443"} {
		if a := got[h]; len(a) != 1 || a[0] != "" {
			t.Errorf("%s was sent %q, want no token", h, a)
		}
	}
	var announced []Event
	for _, e := range events.ev {
		if e.Kind == EventUnmatched {
			announced = append(announced, e)
		}
	}
	if len(announced) != 4 {
		t.Fatalf("%d announcements for 4 hosts", len(announced))
	}
	if e := announced[0]; e.TokenEnv != "GIT_EXAMPLE_COM_TOKEN" || !e.Auto || e.URL != "https://git.example.com" {
		t.Errorf("announcement %+v, want the variable GIT_EXAMPLE_COM_TOKEN for https://git.example.com", e)
	}
	if e := announced[1]; e.TokenEnv != "" || slicesContains(e.Variables, "GITHUB_TOKEN") {
		t.Errorf("github.evil.example announced %+v: a built-in provider's variable must not be looked at", e)
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A host that states no limit is held to 60 requests a minute, like a
// configured generic provider; NoAutoProviders turns that (and the token)
// off.
func TestUnknownHostWithoutHeadersIsHeldTo60AMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &unknownHost{}
		tr := unmatchedTransport(t, host, &eventLog{}, func(o *Options) { o.MaxWait = time.Hour })
		start := time.Now()
		for i := range 121 {
			req, _ := http.NewRequest("GET", "https://quiet.example.test/r"+strconv.Itoa(i), nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		if d := time.Since(start); d < 2*time.Minute || d > 2*time.Minute+10*time.Second {
			t.Fatalf("121 requests to a host that states no limit took %v, want about 2 minutes (60 a minute)", d)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		t.Setenv("QUIET_EXAMPLE_TEST_TOKEN", "tok-quiet-1234")
		host := &unknownHost{}
		tr := unmatchedTransport(t, host, &eventLog{}, func(o *Options) { o.NoAutoProviders = true })
		start := time.Now()
		for i := range 121 {
			req, _ := http.NewRequest("GET", "https://quiet.example.test/r"+strconv.Itoa(i), nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("with NoAutoProviders a host that states nothing was held back %v", d)
		}
		if a := host.auths()["quiet.example.test"]; a[0] != "" {
			t.Errorf("with NoAutoProviders the host's variable was sent: %q", a[0])
		}
	})
}

// With NoAutoProviders a host that states nothing is sent one first
// request, then its requests go side by side: nothing will ever be known
// of its limits, so holding them to one at a time would only make a batch
// as slow as its requests in a row.
func TestSilentHostNotHeldToOneAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &slowHost{delay: time.Second}
		tr := unmatchedTransport(t, host, &eventLog{}, func(o *Options) { o.NoAutoProviders = true })
		start := time.Now()
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				req, _ := http.NewRequest("GET", "https://silent.example.test/r"+strconv.Itoa(i), nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			})
		}
		wg.Wait()
		// One first answer, then the other 19 together: 2 s, where
		// one at a time takes 20 s.
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("20 requests of 1 s to a host that states nothing took %v, want about 2 s", d)
		}
		if got := host.peak.Load(); got < 19 {
			t.Errorf("at most %d requests in flight, want 19 after the first answer", got)
		}
	})
}

// slowHost answers 200 without any rate-limit header after delay, and
// counts the most requests in flight at once.
type slowHost struct {
	delay          time.Duration
	inFlight, peak atomic.Int64
}

func (h *slowHost) RoundTrip(req *http.Request) (*http.Response, error) {
	n := h.inFlight.Add(1)
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
	time.Sleep(h.delay)
	h.inFlight.Add(-1)
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

// A redirect to another host carries none of the first host's token.
func TestUnknownHostRedirectCarriesNoToken(t *testing.T) {
	t.Setenv("A_EXAMPLE_TEST_TOKEN", "tok-a-example-1234")
	host := &unknownHost{answers: []func() *http.Response{func() *http.Response {
		h := http.Header{}
		h.Set("Location", "https://b.example.test/landing")
		return &http.Response{StatusCode: http.StatusFound, Header: h}
	}}}
	tr := unmatchedTransport(t, host, &eventLog{})
	resp, err := (&http.Client{Transport: tr}).Get("https://a.example.test/start")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := host.auths()
	if a := got["a.example.test"]; len(a) != 1 || a[0] != "Bearer tok-a-example-1234" {
		t.Errorf("a.example.test was sent %q", a)
	}
	if a := got["b.example.test"]; len(a) != 1 || a[0] != "" {
		t.Errorf("the redirect's host was sent %q, want no token", a)
	}
}

// New makes every configured provider's lane, credentials included: a
// request only looks its lane up, and a token variable set after New is
// not read for a configured provider.
func TestLanesAreMadeAtNew(t *testing.T) {
	t.Setenv("GITLAB_TOKEN", "")
	host := &unknownHost{}
	tr := unmatchedTransport(t, host, &eventLog{}, func(o *Options) {
		gl, err := provider.New("gitlab", provider.GitLab, "https://gitlab.example.com/api/v4")
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Providers.Add(gl); err != nil {
			t.Fatal(err)
		}
	})
	for _, p := range tr.reg.Providers() {
		if l := tr.lanes[p]; l == nil || l.pool == nil {
			t.Fatalf("provider %s has no lane with credentials after New", p.Name)
		}
	}
	t.Setenv("GITLAB_TOKEN", "tok-gitlab-late-1234")
	for _, u := range []string{"https://api.github.com/user", "https://gitlab.example.com/api/v4/projects"} {
		req, _ := http.NewRequest("GET", u, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	var sent []string
	for _, r := range host.sent {
		if r.URL.Host == "gitlab.example.com" {
			sent = append(sent, r.Header.Get("Private-Token"))
		}
	}
	if len(sent) != 1 || sent[0] != "" {
		t.Errorf("gitlab.example.com was sent %q, want no token: its credentials were loaded at New", sent)
	}
	if len(tr.late) != 0 {
		t.Errorf("requests to configured providers made %d lanes", len(tr.late))
	}
}

// Requests to a host no provider owns, concurrent ones included (run with
// -race), share one lane, made once: one announcement, one pool, its
// token on every request.
func TestUnknownHostLaneIsMadeOnce(t *testing.T) {
	t.Setenv("GIT_EXAMPLE_COM_TOKEN", "tok-git-example-1234")
	synctest.Test(t, func(t *testing.T) {
		host := &unknownHost{}
		events := &eventLog{}
		tr := unmatchedTransport(t, host, events)
		const n = 8
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			wg.Go(func() {
				req, _ := http.NewRequest("GET", "https://git.example.com/r", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if got := events.count(EventUnmatched); got != 1 {
			t.Errorf("%d announcements of one host, want 1", got)
		}
		if len(tr.auto) != 1 || len(tr.late) != 1 {
			t.Errorf("%d lanes by origin and %d by provider for one host, want 1 and 1", len(tr.auto), len(tr.late))
		}
		if a := host.auths()["git.example.com"]; len(a) != n || a[0] != "Bearer tok-git-example-1234" || a[n-1] != a[0] {
			t.Errorf("git.example.com was sent %q, want its variable's token %d times", a, n)
		}
	})
}

// A provider added to the registry after New gets its lane on its first
// request, with its own credentials and limits.
func TestProviderAddedAfterNewGetsItsLane(t *testing.T) {
	t.Setenv("CORP_TOKEN", "tok-corp-late-1234")
	host := &unknownHost{}
	events := &eventLog{}
	tr := unmatchedTransport(t, host, events)
	corp, err := provider.New("corp", provider.Generic, "https://corp.example.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.reg.Add(corp); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "https://corp.example.test/items", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if a := host.auths()["corp.example.test"]; len(a) != 1 || a[0] != "Bearer tok-corp-late-1234" {
		t.Errorf("corp.example.test was sent %q, want its provider's token", a)
	}
	if pool, err := tr.Pool("corp"); err != nil || pool.Len() != 1 {
		t.Errorf("Pool(corp) = %v, %v; want its one credential", pool, err)
	}
	if got := events.count(EventUnmatched); got != 0 {
		t.Errorf("a configured provider's host was announced as unmatched %d times", got)
	}
}

// A host whose variable cannot be read fails every request with the
// variable's error, sends nothing, and is announced once.
func TestUnknownHostBadVariableFailsItsRequests(t *testing.T) {
	t.Setenv("GIT_EXAMPLE_COM_TOKEN", "tok-git-example-1234,,tok-two-5678")
	host := &unknownHost{}
	events := &eventLog{}
	tr := unmatchedTransport(t, host, events, func(o *Options) { o.MaxWait = time.Second })
	for range 2 {
		req, _ := http.NewRequest("GET", "https://git.example.com/r", nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			t.Fatal("a request went with a malformed token variable")
		}
		if msg := err.Error(); !strings.Contains(msg, "GIT_EXAMPLE_COM_TOKEN: entry #2 is empty") || strings.Contains(msg, "tok-") {
			t.Errorf("error %q, want the variable's entry named and no token", msg)
		}
	}
	if len(host.sent) != 0 {
		t.Errorf("%d requests sent", len(host.sent))
	}
	if got := events.count(EventUnmatched); got != 1 {
		t.Errorf("%d announcements, want 1", got)
	}
}
