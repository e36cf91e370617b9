package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/cache"
	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
)

// simSetup mounts one simulated API at /api on an in-process server and
// returns a transport pointed at it with the given tokens. base is the
// API's base URL; the host is never dialled (the sim's own RoundTripper
// serves every request), so it works inside synctest bubbles.
type simSetup struct {
	t      *Transport
	srv    *sim.Server
	base   string
	events *eventLog
}

type eventLog struct {
	mu sync.Mutex
	ev []Event
}

func (l *eventLog) add(e Event) { l.mu.Lock(); l.ev = append(l.ev, e); l.mu.Unlock() }
func (l *eventLog) count(k EventKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.ev {
		if e.Kind == k {
			n++
		}
	}
	return n
}

func newSim(t testing.TB, api sim.APIConfig, tokens []string, tune func(*Options)) *simSetup {
	t.Helper()
	api.Prefix = "/sim"
	srv, err := sim.New(sim.Config{Seed: 1, APIs: []sim.APIConfig{api}})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://sim.test/sim" + map[string]string{"gitlab": "/api/v4", "gitea": "/api/v1"}[api.Dialect]
	kind := provider.Kind(api.Dialect)
	p, err := provider.New(string(kind), kind, base)
	if err != nil {
		t.Fatal(err)
	}
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		t.Fatal(err)
	}
	var cs []*creds.Credential
	for i, tok := range tokens {
		cs = append(cs, creds.NewToken(p.Name, i+1, tok, "test"))
	}
	if len(cs) == 0 {
		cs = append(cs, creds.NewAnonymous(p.Name, 1))
	}
	events := &eventLog{}
	opts := Options{
		Providers: reg,
		Pools:     map[string]*creds.Pool{p.Name: creds.NewPool(p.Name, cs...)},
		Base:      srv.Transport(""),
		OnEvent:   events.add,
		Policy:    quota.Policy{Kind: quota.Greedy},
	}
	if tune != nil {
		tune(&opts)
	}
	tr, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &simSetup{t: tr, srv: srv, base: base, events: events}
}

// sibling returns another transport, with other tokens, on the same
// simulated API.
func (s *simSetup) sibling(t *testing.T, tokens []string, tune func(*Options)) *simSetup {
	t.Helper()
	p := s.t.reg.Providers()[0]
	var cs []*creds.Credential
	for i, tok := range tokens {
		cs = append(cs, creds.NewToken(p.Name, i+1, tok, "test"))
	}
	opts := Options{
		Providers: s.t.reg,
		Pools:     map[string]*creds.Pool{p.Name: creds.NewPool(p.Name, cs...)},
		Base:      s.srv.Transport(""),
		Policy:    quota.Policy{Kind: quota.Greedy},
	}
	if tune != nil {
		tune(&opts)
	}
	tr, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &simSetup{t: tr, srv: s.srv, base: s.base, events: &eventLog{}}
}

func (s *simSetup) get(t *testing.T, path string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.base+path, nil)
	resp, err := s.t.RoundTrip(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp
}

func drain(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b)
}

// run sends n GETs of distinct repositories with `workers` goroutines and
// returns how many got each status.
func (s *simSetup) run(t *testing.T, n, workers int) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[int]int{}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/repos/org/repo%d", s.base, i), nil)
				resp, err := s.t.RoundTrip(req)
				mu.Lock()
				if err != nil {
					codes[-1]++
					mu.Unlock()
					continue
				}
				codes[resp.StatusCode]++
				mu.Unlock()
				drain(resp)
			}
		}()
	}
	for i := 0; i < n; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return codes
}

func TestPacedBatchHasNoViolations(t *testing.T) {
	for _, kind := range []quota.Kind{quota.Greedy, quota.Spread, quota.Adaptive} {
		t.Run(string(kind), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 20, Window: 10 * time.Second, Latency: 30 * time.Millisecond,
					Tokens: []sim.TokenConfig{{Token: "tok-a", Owner: "alice"}, {Token: "tok-b", Owner: "bob"}, {Token: "tok-c", Owner: "carol"}}},
					[]string{"tok-a", "tok-b", "tok-c"}, func(o *Options) { o.Policy = quota.Policy{Kind: kind, Velocity: 1.5, MaxDelay: time.Minute} })
				start := time.Now()
				codes := s.run(t, 150, 8)
				elapsed := time.Since(start)
				if codes[200] != 150 {
					t.Fatalf("statuses %v", codes)
				}
				st := s.srv.Stats()
				if st.Total.Violations != 0 {
					t.Fatalf("%d violations", st.Total.Violations)
				}
				// 150 requests at 3×20 per 10 s: the first 60 at once,
				// the rest over two more windows (plus 3 validations).
				if kind == quota.Greedy && elapsed > 25*time.Second {
					t.Fatalf("greedy took %v", elapsed)
				}
				if elapsed > 40*time.Second {
					t.Fatalf("%s took %v", kind, elapsed)
				}
			})
		})
	}
}

func TestTokensOfOneOwnerShareABucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 10, Window: 10 * time.Second,
			Tokens: []sim.TokenConfig{{Token: "tok-a1", Owner: "alice"}, {Token: "tok-a2", Owner: "alice"}}},
			[]string{"tok-a1", "tok-a2"}, nil)
		codes := s.run(t, 30, 4)
		if codes[200] != 30 {
			t.Fatalf("statuses %v", codes)
		}
		if v := s.srv.Stats().Total.Violations; v != 0 {
			t.Fatalf("%d violations: two tokens of one owner were paced as two buckets", v)
		}
		pool, _ := s.t.Pool("github")
		a, b := pool.Credentials()[0], pool.Credentials()[1]
		if a.BucketOwner() != b.BucketOwner() {
			t.Fatalf("owners %q %q", a.BucketOwner(), b.BucketOwner())
		}
		// Learnt from the answers' counters: nothing was spent on it.
		if c := s.srv.Stats().Total.Charged; c != 30 {
			t.Fatalf("charged %d for 30 requests", c)
		}
	})
}

func TestInvalidTokenIsDroppedAndRequestRetried(t *testing.T) {
	var logs bytes.Buffer
	s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Minute,
		Tokens: []sim.TokenConfig{{Token: "tok-good", Owner: "alice"}}},
		[]string{"tok-bad-secret-1234", "tok-good"}, func(o *Options) {
			o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			o.SkipValidation = true
		})
	for i := 0; i < 4; i++ {
		resp := s.get(t, fmt.Sprintf("/repos/o/r%d", i))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		drain(resp)
	}
	pool, _ := s.t.Pool("github")
	if st := pool.Credentials()[0].State(time.Now()); st != creds.Invalid {
		t.Fatalf("bad token state %v", st)
	}
	if s.events.count(EventCredentialInvalid) != 1 {
		t.Fatalf("want one invalid-credential event, got %d", s.events.count(EventCredentialInvalid))
	}
	if strings.Contains(logs.String(), "tok-bad-secret-1234") {
		t.Fatal("token text in logs")
	}
	st, err := s.t.Status(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st[0].State != "invalid" || strings.Contains(fmt.Sprint(st), "secret") {
		t.Fatalf("status %+v", st)
	}
}

func TestAllTokensInvalid(t *testing.T) {
	s := newSim(t, sim.APIConfig{Dialect: "github", Tokens: []sim.TokenConfig{{Token: "tok-good"}}},
		[]string{"tok-wrong-1", "tok-wrong-2"}, nil)
	req, _ := http.NewRequest(http.MethodGet, s.base+"/repos/o/r", nil)
	_, err := s.t.RoundTrip(req)
	var nc *NoCredentialError
	if !errors.As(err, &nc) || len(nc.Invalid) != 2 {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "tok-wrong") {
		t.Fatalf("token text in error: %v", err)
	}
}

func TestConditionalRequestsAreFree(t *testing.T) {
	s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-a", Owner: "alice"}}}, []string{"tok-a"}, nil)
	first := s.get(t, "/repos/o/r")
	body1 := drain(first)
	if first.Header.Get(HeaderCache) != "miss" {
		t.Fatalf("first: cache header %q", first.Header.Get(HeaderCache))
	}
	for i := 0; i < 5; i++ {
		// The answer is fresh for 60 s: no-cache makes each repeat
		// ask the server.
		req, _ := http.NewRequest(http.MethodGet, s.base+"/repos/o/r", nil)
		req.Header.Set("Cache-Control", "no-cache")
		resp, err := s.t.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get(HeaderCache) != "revalidated" {
			t.Fatalf("repeat %d: %d %q", i, resp.StatusCode, resp.Header.Get(HeaderCache))
		}
		if drain(resp) != body1 {
			t.Fatal("revalidated body differs")
		}
	}
	b, _ := s.srv.Stats().BucketFor("github", "alice", "core")
	if b.NotModified != 5 || b.Charged != 1 { // the first fetch
		t.Fatalf("not modified %d, charged %d", b.NotModified, b.Charged)
	}
}

func TestSecondaryLimitPausesTheOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-RateLimit-Limit", "5000")
			w.Header().Set("X-RateLimit-Remaining", "4000")
			w.Header().Set("X-RateLimit-Reset", fmt.Sprint(time.Now().Add(time.Hour).Unix()))
			if calls.Add(1) == 1 {
				w.WriteHeader(403)
				io.WriteString(w, `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`)
				return
			}
			io.WriteString(w, `{}`)
		})
		tr := handlerTransport(t, h, func(o *Options) { o.SkipValidation = true })
		start := time.Now()
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/repos/o/r", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		if resp.StatusCode != 200 || calls.Load() != 2 {
			t.Fatalf("status %d after %d calls", resp.StatusCode, calls.Load())
		}
		if waited := time.Since(start); waited < time.Minute || waited > 61*time.Second {
			t.Fatalf("waited %v, want the 60 s secondary minimum", waited)
		}
		if resp.Header.Get(HeaderAttempts) != "2" {
			t.Fatalf("attempts header %q", resp.Header.Get(HeaderAttempts))
		}
	})
}

// handlerTransport is a transport for one github-kind provider at
// http://api.test served by h in-process, with one token.
func handlerTransport(t *testing.T, h http.Handler, tune func(*Options)) *Transport {
	t.Helper()
	p, err := provider.New("github", provider.GitHub, "http://api.test")
	if err != nil {
		t.Fatal(err)
	}
	reg := provider.NewRegistry()
	_ = reg.Add(p)
	opts := Options{
		Providers: reg,
		Pools:     map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-test-0001", "test"))},
		Base:      handlerRT{h},
		Policy:    quota.Policy{Kind: quota.Greedy},
		Rand:      func() float64 { return 0.5 },
	}
	if tune != nil {
		tune(&opts)
	}
	tr, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// handlerRT serves requests with a handler in the calling goroutine.
type handlerRT struct{ h http.Handler }

func (rt handlerRT) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	rt.h.ServeHTTP(rec, req)
	if req.Body != nil {
		req.Body.Close()
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

func TestRetries(t *testing.T) {
	cases := []struct {
		name      string
		method    string
		idemKey   bool
		status    int
		wantCalls int32
	}{
		{"GET 502 retried", http.MethodGet, false, 502, 4},
		{"POST 502 not retried", http.MethodPost, false, 502, 1},
		{"POST with Idempotency-Key retried", http.MethodPost, true, 502, 4},
		{"404 never retried", http.MethodGet, false, 404, 1},
		{"422 never retried", http.MethodGet, false, 422, 1},
		{"400 never retried", http.MethodGet, false, 400, 1},
		{"403 permission never retried", http.MethodGet, false, 403, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int32
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					calls.Add(1)
					w.Header().Set("X-RateLimit-Remaining", "4000")
					w.Header().Set("X-RateLimit-Limit", "5000")
					w.WriteHeader(c.status)
					io.WriteString(w, `{"message":"Not Found"}`)
				})
				tr := handlerTransport(t, h, func(o *Options) { o.SkipValidation = true })
				req, _ := http.NewRequest(c.method, "http://api.test/repos/o/r/issues", strings.NewReader(`{"title":"x"}`))
				if c.idemKey {
					req.Header.Set("Idempotency-Key", "k1")
				}
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				drain(resp)
				if resp.StatusCode != c.status || calls.Load() != c.wantCalls {
					t.Fatalf("status %d after %d calls, want %d calls", resp.StatusCode, calls.Load(), c.wantCalls)
				}
			})
		})
	}
}

func TestNetworkErrorsRetriedWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		base := rtFunc(func(req *http.Request) (*http.Response, error) {
			if calls.Add(1) < 3 {
				return nil, io.ErrUnexpectedEOF
			}
			return handlerRT{http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}.RoundTrip(req)
		})
		tr := handlerTransport(t, nil, func(o *Options) { o.SkipValidation = true; o.Base = base })
		start := time.Now()
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/x", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		// Full jitter at 0.5: 1 s then 2 s.
		if got := time.Since(start); got != 3*time.Second || calls.Load() != 3 {
			t.Fatalf("took %v and %d calls", got, calls.Load())
		}
	})
}

func TestWaitErrorBeyondMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reset := time.Now().Add(time.Hour)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-RateLimit-Limit", "60")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset", fmt.Sprint(reset.Unix()))
			io.WriteString(w, "{}")
		})
		tr := handlerTransport(t, h, func(o *Options) { o.SkipValidation = true; o.MaxWait = time.Minute })
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/a", nil)
		resp, err := tr.RoundTrip(req) // learns that nothing is left
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		_, err = tr.RoundTrip(req)
		var we *WaitError
		if !errors.As(err, &we) {
			t.Fatalf("err = %v, want a WaitError", err)
		}
		var retry interface{ RetryAt() time.Time }
		if !errors.As(err, &retry) || retry.RetryAt().Before(reset) || retry.RetryAt().After(reset.Add(2*time.Second)) {
			t.Fatalf("RetryAt %v, want about %v", we.RetryAt(), reset)
		}
	})
}

func TestContextEndsWaitAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset", fmt.Sprint(time.Now().Add(3*time.Minute).Unix()))
			io.WriteString(w, "{}")
		})
		tr := handlerTransport(t, h, func(o *Options) { o.SkipValidation = true })
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/a", nil)
		resp, _ := tr.RoundTrip(req)
		drain(resp)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(time.Second); cancel() }()
		start := time.Now()
		_, err := tr.RoundTrip(req.WithContext(ctx))
		if !errors.Is(err, context.Canceled) || time.Since(start) != time.Second {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
	})
}

func TestCredentialNeverLeavesItsProvider(t *testing.T) {
	var leaked atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store(r.Header.Get("Authorization"))
		io.WriteString(w, "elsewhere")
	}))
	defer other.Close()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok-test-0001" {
			w.WriteHeader(401)
			return
		}
		http.Redirect(w, r, other.URL+"/download", http.StatusFound)
	}))
	defer api.Close()
	p, _ := provider.New("github", provider.GitHub, api.URL)
	reg := provider.NewRegistry()
	_ = reg.Add(p)
	tr, err := New(Options{Providers: reg, SkipValidation: true,
		Pools: map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-test-0001", "test"))}})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	req, _ := http.NewRequest(http.MethodGet, api.URL+"/repos/o/r/tarball", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if drain(resp) != "elsewhere" {
		t.Fatal("redirect not followed")
	}
	if v, _ := leaked.Load().(string); v != "" {
		t.Fatalf("credential sent to another host: %q", v)
	}
	if req.Header.Get("Authorization") != "" {
		t.Fatal("caller's request was modified")
	}
	if resp.Request.Header.Get("Authorization") != "" {
		t.Fatal("response carries a request with the token")
	}
}

func TestUnknownHostPassesThrough(t *testing.T) {
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	tr := handlerTransport(t, nil, func(o *Options) { o.Base = http.DefaultTransport })
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/x", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
	}
	if v, _ := auth.Load().(string); v != "" {
		t.Fatalf("token sent to an unknown host: %q", v)
	}
}

func TestClockSkewNoViolations(t *testing.T) {
	for _, skew := range []time.Duration{-90 * time.Minute, 45 * time.Minute} {
		t.Run(skew.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 10, Window: 10 * time.Second, Skew: skew,
					Tokens: []sim.TokenConfig{{Token: "tok-a", Owner: "alice"}}}, []string{"tok-a"}, nil)
				start := time.Now()
				codes := s.run(t, 35, 4)
				if codes[200] != 35 || s.srv.Stats().Total.Violations != 0 {
					t.Fatalf("statuses %v, violations %d", codes, s.srv.Stats().Total.Violations)
				}
				if d := time.Since(start); d > 45*time.Second {
					t.Fatalf("skew made the client wait too long: %v", d)
				}
			})
		})
	}
}

func TestGitLabAndHuggingFaceDialects(t *testing.T) {
	yes := true
	for _, dialect := range []string{"gitlab", "huggingface", "gitea"} {
		t.Run(dialect, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t, sim.APIConfig{Dialect: dialect, Limit: 10, Window: 10 * time.Second, RateLimitHeaders: &yes,
					Tokens: []sim.TokenConfig{{Token: "tok-a", Owner: "alice"}, {Token: "tok-b", Owner: "bob"}}},
					[]string{"tok-a", "tok-b"}, nil)
				path := map[string]string{"gitlab": "/projects/%d", "huggingface": "/api/models/o/m%d", "gitea": "/repos/o/r%d"}[dialect]
				var fails int
				for i := 0; i < 45; i++ {
					resp := s.get(t, fmt.Sprintf(path, i))
					if resp.StatusCode >= 400 {
						fails++
					}
					drain(resp)
				}
				if v := s.srv.Stats().Total.Violations; v != 0 || fails != 0 {
					t.Fatalf("%d violations, %d failures", v, fails)
				}
			})
		})
	}
}

func TestStatusFromState(t *testing.T) {
	s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-a", Owner: "alice"}}}, []string{"tok-a"}, nil)
	drain(s.get(t, "/repos/o/r"))
	st, err := s.t.Status(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || len(st[0].Resources) == 0 {
		t.Fatalf("status %+v", st)
	}
	r := st[0].Resources[0]
	if r.Resource != "core" || r.Limit == nil || *r.Limit != 100 || r.Remaining == nil || *r.Remaining != 99 || r.Health != "HEALTHY" {
		t.Fatalf("resource %+v", r)
	}
	// Refresh asks /rate_limit, which is free.
	before := s.srv.Stats().Total.Charged
	if err := s.t.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.srv.Stats().Total.Charged - before; got != 1 { // the validation GET /user only
		t.Fatalf("refresh charged %d requests", got)
	}
	if st, _ := s.t.Status(context.Background(), time.Now()); st[0].Owner == "" {
		t.Fatalf("the owner is not known after a refresh: %+v", st)
	}
}

// TestHiddenLimitsStillFinish: a server that enforces a limit without
// announcing it (Gitea's default) refuses some requests; the client
// honours the refusals and every request still succeeds.
func TestHiddenLimitsStillFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sim.APIConfig{Dialect: "gitea", Limit: 10, Window: 10 * time.Second,
			Tokens: []sim.TokenConfig{{Token: "tok-a", Owner: "alice"}}}, []string{"tok-a"}, nil)
		for i := 0; i < 25; i++ {
			resp := s.get(t, fmt.Sprintf("/repos/o/r%d", i))
			if resp.StatusCode != 200 {
				t.Fatalf("request %d: status %d", i, resp.StatusCode)
			}
			drain(resp)
		}
	})
}

// TestRepeatWithAnotherOwnersTokenIsFree: a GET first fetched with
// alice's token and repeated with bob's (two transports sharing one cache,
// so which token goes is certain) is a conditional request: the simulator
// answers 304, charges nothing to bob's bucket, and the caller gets the
// stored body. The simulator's tags are GitHub's (they hash the token), so
// the 304 comes only because bob's request carries the tag GitHub gives
// bob, computed from the stored body.
func TestRepeatWithAnotherOwnersTokenIsFree(t *testing.T) {
	api := sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-alice-0001", Owner: "alice"}, {Token: "tok-bob-0002", Owner: "bob"}}}
	shared := cache.New(cache.Options{})
	withCache := func(o *Options) { o.Cache = shared }
	a := newSim(t, api, []string{"tok-alice-0001"}, withCache)
	b := a.sibling(t, []string{"tok-bob-0002"}, withCache)
	want := make([]string, 3)
	for i := range want {
		resp := a.get(t, fmt.Sprintf("/repos/o/r%d", i))
		if resp.Header.Get(HeaderCache) != "miss" {
			t.Fatalf("first fetch %d: cache %q", i, resp.Header.Get(HeaderCache))
		}
		want[i] = drain(resp)
	}
	for i := range want {
		resp := b.get(t, fmt.Sprintf("/repos/o/r%d", i))
		if resp.StatusCode != 200 || resp.Header.Get(HeaderCache) != "revalidated" || !strings.HasSuffix(resp.Header.Get(HeaderCredential), "…002") {
			t.Fatalf("repeat %d: %d, cache %q, credential %q", i, resp.StatusCode, resp.Header.Get(HeaderCache), resp.Header.Get(HeaderCredential))
		}
		if got := drain(resp); got != want[i] {
			t.Fatalf("repeat %d: body %q, want %q", i, got, want[i])
		}
	}
	st := a.srv.Stats()
	alice, _ := st.BucketFor("github", "alice", "core")
	bob, _ := st.BucketFor("github", "bob", "core")
	if alice.Charged != 3 || bob.Charged != 0 || bob.NotModified != 3 {
		t.Fatalf("alice charged %d; bob charged %d with %d 304s; want 3, 0 and 3", alice.Charged, bob.Charged, bob.NotModified)
	}
}

// TestRevalidationRefusedGetsTheRefusal: a credential that may not see a
// resource sends the stored validator and gets the server's 404 or 403,
// not the body stored from another credential's answer.
func TestRevalidationRefusedGetsTheRefusal(t *testing.T) {
	for _, code := range []int{http.StatusNotFound, http.StatusForbidden} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			var sawValidator atomic.Bool
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer tok-test-0001" {
					sawValidator.Store(r.Header.Get("If-None-Match") == `"secret-v1"`)
					w.WriteHeader(code)
					io.WriteString(w, `{"message":"Not Found"}`)
					return
				}
				w.Header().Set("ETag", `"secret-v1"`)
				w.Header().Set("Cache-Control", "private")
				if r.Header.Get("If-None-Match") == `"secret-v1"` {
					w.WriteHeader(http.StatusNotModified)
					return
				}
				io.WriteString(w, `{"secret":true}`)
			})
			shared := cache.New(cache.Options{})
			owner := handlerTransport(t, h, func(o *Options) { o.SkipValidation = true; o.Cache = shared })
			other := handlerTransport(t, h, func(o *Options) {
				o.SkipValidation = true
				o.Cache = shared
				o.Pools = map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-other-0002", "test"))}
			})
			get := func(tr *Transport) *http.Response {
				req, _ := http.NewRequest(http.MethodGet, "http://api.test/repos/o/secret", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			drain(get(owner))
			resp := get(other)
			if body := drain(resp); resp.StatusCode != code || strings.Contains(body, "secret") {
				t.Fatalf("status %d, body %q", resp.StatusCode, body)
			}
			if !sawValidator.Load() {
				t.Fatal("the other credential's request did not carry the stored validator")
			}
			resp = get(owner)
			if body := drain(resp); resp.Header.Get(HeaderCache) != "revalidated" || body != `{"secret":true}` {
				t.Fatalf("owner: cache %q, body %q", resp.Header.Get(HeaderCache), body)
			}
		})
	}
}

// TestCallersOwnAuthDoesNotCondemnTheCredential: a caller that sends its
// own Authorization gets the server's 401 back, and the transport's
// credential, never sent, stays usable.
func TestCallersOwnAuthDoesNotCondemnTheCredential(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok-test-0001" {
			w.WriteHeader(401)
			return
		}
		io.WriteString(w, "{}")
	})
	tr := handlerTransport(t, h, func(o *Options) { o.SkipValidation = true })
	req, _ := http.NewRequest(http.MethodGet, "http://api.test/user", nil)
	req.Header.Set("Authorization", "Bearer someone-elses")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	drain(resp)
	if resp.StatusCode != 401 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	pool, _ := tr.Pool("github")
	if st := pool.Credentials()[0].State(time.Now()); st == creds.Invalid {
		t.Fatal("the transport's credential was marked invalid for the caller's token")
	}
}

// A response body that fails while the cache reads it is a failed round
// trip, not an answer with a closed body; and no two responses share a
// header value slice.
func TestCacheReadErrorAndOwnHeaderSlices(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("X-RateLimit-Limit", "5000")
		w.Header().Set("X-RateLimit-Remaining", "4999")
		io.WriteString(w, `{"ok":true}`)
	})
	broken := false
	tr := handlerTransport(t, h, func(o *Options) {
		// A body that keeps breaking is retried as a network failure
		// (quickly here), then returned as an error.
		o.RetryBase = time.Millisecond
		o.Base = rtFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := handlerRT{h}.RoundTrip(req)
			if broken && err == nil {
				resp.Body = io.NopCloser(io.MultiReader(strings.NewReader(`{"ok"`), errReader{errors.New("connection reset")}))
				resp.ContentLength = -1
			}
			return resp, err
		})
	})
	get := func(path string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://api.test"+path, nil)
		return tr.RoundTrip(req)
	}
	a, err := get("/repos/o/a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := get("/repos/o/b")
	if err != nil {
		t.Fatal(err)
	}
	a.Header[HeaderCredential][0] = "changed"
	if got := b.Header.Get(HeaderCredential); got == "changed" {
		t.Fatal("two responses share a header value slice")
	}
	drain(a)
	drain(b)
	broken = true
	if resp, err := get("/repos/o/c"); err == nil {
		t.Fatalf("a body that failed while being stored came back as an answer: %d", resp.StatusCode)
	}
}
