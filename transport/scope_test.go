package transport

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
)

// hiddenLimit is a server with a generous announced limit (2,000 a
// minute, stated on every answer in the dialect's headers) and, under one
// path, a limit it never announces while it is not exceeded: 40 requests
// per aligned minute, as GitLab's Users API. Its refusals come in one of
// the styles real servers use. It runs in the synctest bubble, on its
// fake clock.
type hiddenLimit struct {
	dialect   string // "gitlab" (RateLimit-*) or "generic" (X-RateLimit-*)
	limited   string // the path prefix of the hidden limit
	refusal   string // "headers", "bare" or "plain"
	perWindow int
	window    time.Duration

	mu          sync.Mutex
	main        int
	mainReset   time.Time
	hidden      int
	hiddenReset time.Time
	refusals    int
	served      int
}

func (h *hiddenLimit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if !now.Before(h.mainReset) {
		h.main, h.mainReset = 0, now.Truncate(time.Minute).Add(time.Minute)
	}
	if !now.Before(h.hiddenReset) {
		h.hidden, h.hiddenReset = 0, now.Truncate(h.window).Add(h.window)
	}
	if strings.HasPrefix(r.URL.Path, h.limited) {
		if h.hidden >= h.perWindow {
			h.refusals++
			h.refuse(w, now)
			return
		}
		h.hidden++
	}
	h.main++
	if h.dialect == "gitlab" {
		w.Header().Set("RateLimit-Limit", "2000")
		w.Header().Set("RateLimit-Remaining", strconv.Itoa(2000-h.main))
		w.Header().Set("RateLimit-Observed", strconv.Itoa(h.main))
		w.Header().Set("RateLimit-Reset", strconv.FormatInt(h.mainReset.Unix(), 10))
	} else {
		w.Header().Set("X-RateLimit-Limit", "2000")
		w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(2000-h.main))
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(h.mainReset.Unix(), 10))
	}
	h.served++
	io.WriteString(w, "{}")
}

func (h *hiddenLimit) refuse(w http.ResponseWriter, now time.Time) {
	switch h.refusal {
	case "headers":
		ra := max(int(h.hiddenReset.Sub(now).Seconds()+0.999), 1) // whole seconds, rounded up
		w.Header().Set("Retry-After", strconv.Itoa(ra))
		w.Header().Set("RateLimit-Name", "throttle_authenticated_users_api")
		// GitLab states a throttle's limit per minute, whatever its period.
		w.Header().Set("RateLimit-Limit", strconv.Itoa(max(h.perWindow*int(time.Minute/time.Second)/int(h.window/time.Second), 1)))
		w.Header().Set("RateLimit-Observed", strconv.Itoa(h.hidden+1))
		w.Header().Set("RateLimit-Remaining", "0")
		w.Header().Set("RateLimit-Reset", strconv.FormatInt(h.hiddenReset.Unix(), 10))
		w.Header().Set("RateLimit-ResetTime", h.hiddenReset.UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "Retry later\n")
	case "plain":
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "Retry later\n")
	default:
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

// refusalWatch is the client's side of the wire: every request the
// transport sends and every refusal it receives. An early retry is a
// request to the refused path sent after the transport received a
// refusal and before the time that refusal named (its Retry-After; a
// second for one that names none). A request sent at the very instant a
// refusal arrives was decided before it: it was in flight.
type refusalWatch struct {
	base    http.RoundTripper
	limited string

	mu       sync.Mutex
	received time.Time // the last refusal's arrival
	until    time.Time // the latest time a refusal named
	early    int
	refusals int
}

func (rw *refusalWatch) RoundTrip(req *http.Request) (*http.Response, error) {
	scoped := strings.HasPrefix(req.URL.Path, rw.limited)
	rw.mu.Lock()
	if now := time.Now(); scoped && now.After(rw.received) && now.Before(rw.until) {
		rw.early++
	}
	rw.mu.Unlock()
	time.Sleep(20 * time.Millisecond) // one way
	resp, err := rw.base.RoundTrip(req)
	time.Sleep(20 * time.Millisecond) // and back
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		return resp, err
	}
	wait := time.Second
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		wait = time.Duration(s) * time.Second
	}
	rw.mu.Lock()
	rw.refusals++
	rw.received = time.Now()
	if u := time.Now().Add(wait); u.After(rw.until) {
		rw.until = u
	}
	rw.mu.Unlock()
	return resp, nil
}

type hiddenRun struct {
	early, refusals, delivered429 int
	projects, all                 time.Duration
}

// runHidden sends 400 URLs of the free part and users URLs of the hidden
// limit (shuffled, one goroutine each) through a transport of provider p
// with one token, and reports the batch.
func runHidden(t *testing.T, h *hiddenLimit, p *provider.Provider, base string, users int) hiddenRun {
	var run hiddenRun
	synctest.Test(t, func(t *testing.T) {
		reg := provider.NewRegistry()
		if err := reg.Add(p); err != nil {
			t.Fatal(err)
		}
		watch := &refusalWatch{base: handlerRT{h}, limited: h.limited}
		tr, err := New(Options{Providers: reg, Base: watch, SkipValidation: true, DisableCache: true, MaxWait: time.Hour,
			Policy: quota.Policy{Kind: quota.Greedy},
			Pools:  map[string]*creds.Pool{p.Name: creds.NewPool(p.Name, creds.NewToken(p.Name, 1, "tok-hidden-1234", "test"))}})
		if err != nil {
			t.Fatal(err)
		}
		var urls []string
		origin := base[:strings.Index(base[len("https://"):], "/")+len("https://")]
		for i := range users {
			urls = append(urls, fmt.Sprintf("%s%s%d", origin, h.limited, i))
		}
		for i := range 400 {
			urls = append(urls, fmt.Sprintf("%s/projects/%d", base, i))
		}
		rand.New(rand.NewPCG(1, 2)).Shuffle(len(urls), func(i, j int) { urls[i], urls[j] = urls[j], urls[i] })
		start := time.Now()
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, u := range urls {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodGet, u, nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Errorf("%s: %v", u, err)
					return
				}
				resp.Body.Close()
				mu.Lock()
				defer mu.Unlock()
				if resp.StatusCode == http.StatusTooManyRequests {
					run.delivered429++
				}
				if strings.Contains(u, "/projects/") {
					run.projects = max(run.projects, time.Since(start))
				}
			})
		}
		wg.Wait()
		run.all = time.Since(start)
		run.early, run.refusals = watch.early, watch.refusals
	})
	return run
}

// A server's hidden per-path limit (GitLab's Users API: 40 a minute, no
// headers until exceeded) is obeyed at its real numbers in each refusal
// style: no request goes to the refused path before the time the refusal
// named, the refusal episodes are few, no refusal reaches the caller
// (every wait is within the max wait), and the rest of the API is not held
// back (the project URLs end within their time alone, less what the
// users requests the window allows take of the owner's concurrency). On
// main before scopes the headed case saw 880 refusals, 879 early, 80
// handed to the caller.
func TestHiddenLimitIsObeyedAndLearnt(t *testing.T) {
	gitlab := func() *provider.Provider {
		p, _ := provider.New("gitlab", provider.GitLab, "https://gitlab.test/api/v4")
		return p
	}
	generic := func() *provider.Provider {
		p, _ := provider.New("corp", provider.Generic, "https://api.corp.test")
		return p
	}
	for _, tc := range []struct {
		name, dialect, refusal, limited, base string
		provider                              func() *provider.Provider
		maxRefusals                           int
	}{
		// The limit written in the config: paced from the first request,
		// never refused.
		{"gitlab-configured", "gitlab", "bare", "/api/v4/users/", "https://gitlab.test/api/v4", func() *provider.Provider {
			p := gitlab()
			l, err := provider.ParseEndpointLimit("GET /api/v4/users/*", "40/1m")
			if err != nil {
				panic(err)
			}
			p.EndpointLimits = []provider.EndpointLimit{l}
			return p
		}, 0},
		// The first refusal's Retry-After and stated limit teach
		// everything: one episode (the requests in flight when it came).
		{"gitlab-headers", "gitlab", "headers", "/api/v4/users/", "https://gitlab.test/api/v4", gitlab, 60},
		// Nothing stated: backoff from a second, the window and limit
		// learnt from the episode; each refusal after the first is of
		// a probe at the end of a backoff.
		{"gitlab-bare", "gitlab", "bare", "/api/v4/users/", "https://gitlab.test/api/v4", gitlab, 80},
		{"gitlab-plain", "gitlab", "plain", "/api/v4/users/", "https://gitlab.test/api/v4", gitlab, 80},
		{"generic-bare", "generic", "bare", "/v1/users/", "https://api.corp.test/v1", generic, 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newServer := func() *hiddenLimit {
				return &hiddenLimit{dialect: tc.dialect, limited: tc.limited, refusal: tc.refusal, perWindow: 40, window: time.Minute}
			}
			h := newServer()
			run := runHidden(t, h, tc.provider(), tc.base, 120)
			alone := runHidden(t, newServer(), tc.provider(), tc.base, 0)
			t.Logf("%s: %d refusals, %d early, %d handed to the caller; projects %v (alone %v), batch %v; served %d",
				tc.name, run.refusals, run.early, run.delivered429, run.projects, alone.projects, run.all, h.served)
			if run.early != 0 {
				t.Errorf("%d requests went to the refused path before the time its refusal named", run.early)
			}
			if run.delivered429 != 0 {
				t.Errorf("%d refusals were handed to the caller although every wait was within the max wait", run.delivered429)
			}
			if run.refusals > tc.maxRefusals {
				t.Errorf("%d refusals, want at most %d", run.refusals, tc.maxRefusals)
			}
			// The owner's requests in flight are capped, and the 40
			// users requests each window allows share the cap with the
			// 400 projects: 440 ÷ 400 of their time alone, and a
			// twentieth for the ramp.
			if limit := alone.projects * 440 / 400 * 21 / 20; run.projects > limit {
				t.Errorf("the project URLs took %v, %v alone: the hidden limit held them back", run.projects, alone.projects)
			}
			if h.served != 520 {
				t.Errorf("served %d, want 520", h.served)
			}
		})
	}
}

// A learnt scope shows in /status (origin "learnt", its pause) and in the
// metrics.
func TestLearntScopeShows(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := provider.New("gitlab", provider.GitLab, "https://gitlab.test/api/v4")
	providers := provider.NewRegistry()
	_ = providers.Add(p)
	h := &hiddenLimit{dialect: "gitlab", limited: "/api/v4/users/", refusal: "headers", perWindow: 1, window: time.Minute}
	tr, err := New(Options{Providers: providers, Base: handlerRT{h}, SkipValidation: true, DisableCache: true, MaxWait: time.Millisecond, Metrics: m,
		Pools: map[string]*creds.Pool{"gitlab": creds.NewPool("gitlab", creds.NewToken("gitlab", 1, "tok-shows-1234", "test"))}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		req, _ := http.NewRequest(http.MethodGet, "https://gitlab.test/api/v4/users/1", nil)
		if resp, err := tr.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
	}
	creds, err := tr.Status(t.Context(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var found *ResourceStatus
	for _, c := range creds {
		for i, r := range c.Resources {
			if r.Resource == "/api/v4/users/*" {
				found = &c.Resources[i]
			}
		}
	}
	if found == nil || found.Origin != "learnt" || found.Name != "throttle_authenticated_users_api" || found.BlockedUntil == nil || found.Limit == nil || *found.Limit != 1 {
		t.Fatalf("status shows the scope as %+v", found)
	}
	out, err := testutil.CollectAndFormat(m.scopes, expfmt.TypeTextPlain, "ratekeeper_scope_limit", "ratekeeper_scope_paused_until_timestamp_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `ratekeeper_scope_limit{origin="learnt",owner=`) || !strings.Contains(string(out), `scope="/api/v4/users/*"} 1`) {
		t.Errorf("metrics:\n%s", out)
	}
}

// The pool's figures a caller sees are the announced bucket's: a refusal of
// the request's scope, which states another throttle's 40 and 0, leaves
// the shadow the answers feed as it was, as it leaves the bucket.
func TestScopeRefusalLeavesThePoolFigures(t *testing.T) {
	var v poolView
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	slot := Slot{Bucket: BucketID{Provider: "gitlab x", Owner: "alice", Resource: "api"}}
	slot.Scope = BucketID{Provider: "gitlab x", Owner: "alice", Resource: "/api/v4/users/*"}
	ok := &headers.Reading{Status: 200, Limit: 2000, Remaining: 1990, Used: quota.UnknownCount, Reset: now.Add(50 * time.Second)}
	v.observe(slot, &quota.Answer{Reading: ok, Counted: true}, now)
	refusal := &headers.Reading{Status: 429, Limit: 40, Remaining: 0, Used: quota.UnknownCount, Reset: now.Add(50 * time.Second),
		RetryAfter: 50 * time.Second, HasRetryAfter: true, Resource: "throttle_authenticated_users_api", Limited: headers.Primary}
	v.observe(slot, &quota.Answer{Reading: refusal, Counted: true}, now)
	if b := v.buckets[slot.Bucket]; b.Remaining != 1990 || b.Limit != 2000 || !b.BlockedUntil.IsZero() {
		t.Errorf("the shadow took the scope's refusal: %d/%d, blocked until %v", b.Remaining, b.Limit, b.BlockedUntil)
	}
}

// Against the simulator's unannounced users limit (sim.UsersThrottle:
// GitLab's 2,000 a minute announced, /api/v4/users/* 40 per aligned minute
// and silent until it refuses), at GitLab's real minute, through the
// transport with one goroutine per URL: the simulator counts 0 early
// retries — no request reached the refused limit before the time its
// refusal named — in each refusal style, and every URL is answered 200.
func TestUnannouncedLimitNoEarlyRetries(t *testing.T) {
	for _, refusal := range []string{sim.RefusalHeaders, sim.RefusalRetryAfter, sim.RefusalBare, sim.RefusalPlain} {
		t.Run(refusal, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				u := sim.UsersThrottle{Refusal: refusal, Latency: 20 * time.Millisecond}
				srv, err := sim.New(u.Config())
				if err != nil {
					t.Fatal(err)
				}
				p, _ := provider.New("gitlab", provider.GitLab, "https://gitlab.test/api/v4")
				reg := provider.NewRegistry()
				_ = reg.Add(p)
				tr, err := New(Options{Providers: reg, Base: srv.Transport(""), SkipValidation: true, MaxWait: time.Hour,
					Pools: map[string]*creds.Pool{"gitlab": creds.NewPool("gitlab", creds.NewToken("gitlab", 1, "tok-bench-1", "test"))}})
				if err != nil {
					t.Fatal(err)
				}
				urls, _ := u.Workload("https://gitlab.test", 120, 400, 1)
				var failed sync.Map
				var wg sync.WaitGroup
				for _, raw := range urls {
					wg.Go(func() {
						req, _ := http.NewRequest(http.MethodGet, raw, nil)
						resp, err := tr.RoundTrip(req)
						if err != nil {
							failed.Store(raw, err.Error())
							return
						}
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK {
							failed.Store(raw, resp.Status)
						}
					})
				}
				wg.Wait()
				st := srv.Stats().Total
				limit, _ := srv.Stats().EndpointLimitFor("gitlab", sim.UsersThrottleOwner, sim.UsersThrottleName)
				t.Logf("%s: %d early retries, %d refused by the users limit", refusal, st.EarlyRetries, limit.Refused)
				if st.EarlyRetries != 0 {
					t.Errorf("%d early retries, want 0", st.EarlyRetries)
				}
				failed.Range(func(k, v any) bool { t.Errorf("%s: %v", k, v); return true })
			})
		})
	}
}

// With ScopeMaxWait (the durable commands' 2 s), a request whose wait is
// its scope's pause returns its *WaitError at once, naming the scope, so a
// worker is free for the rest of the API; a request of another scope
// goes, and a wait that is the bucket's own keeps the max wait.
func TestScopeMaxWaitFreesTheWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &hiddenLimit{dialect: "gitlab", limited: "/api/v4/users/", refusal: "headers", perWindow: 1, window: time.Minute}
		p, _ := provider.New("gitlab", provider.GitLab, "https://gitlab.test/api/v4")
		reg := provider.NewRegistry()
		_ = reg.Add(p)
		tr, err := New(Options{Providers: reg, Base: handlerRT{h}, SkipValidation: true, DisableCache: true,
			MaxWait: time.Hour, ScopeMaxWait: 2 * time.Second,
			Pools: map[string]*creds.Pool{"gitlab": creds.NewPool("gitlab", creds.NewToken("gitlab", 1, "tok-scope-1234", "test"))}})
		if err != nil {
			t.Fatal(err)
		}
		get := func(path string) (*http.Response, error) {
			req, _ := http.NewRequest(http.MethodGet, "https://gitlab.test"+path, nil)
			return tr.RoundTrip(req)
		}
		for _, path := range []string{"/api/v4/users/1", "/api/v4/users/2"} {
			resp, err := get(path)
			if err == nil {
				resp.Body.Close()
			}
		}
		start := time.Now()
		_, err = get("/api/v4/users/3")
		var we *WaitError
		if !errors.As(err, &we) || we.Scope != "/api/v4/users/*" || time.Since(start) > 0 {
			t.Fatalf("a request to the paused scope: %v after %v, want a WaitError naming the scope at once", err, time.Since(start))
		}
		if resp, err := get("/api/v4/projects/1"); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("a project request: %v", err)
		}
	})
}
