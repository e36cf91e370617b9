package transport

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
)

// Each answer says what the pool can still do: with two owners of 3
// requests a window, the i-th answer says 6 − i remaining and 6 the
// limit, whichever token sent it, in the server's dialect; the token's own
// counts are under X-Ratekeeper-Upstream-NAME. Remaining reaches 0 only
// with the last request both buckets allow, while the first bucket to run
// dry said 0 earlier; the reset is the soonest of the two buckets'.
func TestAnswersCarryThePool(t *testing.T) {
	cases := []struct {
		dialect, path                    string
		limit, remaining, used, reset    string
		upstreamRemaining, structuredOld string
	}{
		{dialect: "github", path: "/repos/o/r%d", limit: "X-Ratelimit-Limit", remaining: "X-Ratelimit-Remaining",
			used: "X-Ratelimit-Used", reset: "X-Ratelimit-Reset", upstreamRemaining: "X-Ratekeeper-Upstream-X-Ratelimit-Remaining"},
		{dialect: "gitlab", path: "/projects/%d", limit: "Ratelimit-Limit", remaining: "Ratelimit-Remaining",
			used: "Ratelimit-Observed", reset: "Ratelimit-Reset", upstreamRemaining: "X-Ratekeeper-Upstream-Ratelimit-Remaining"},
		{dialect: "huggingface", path: "/api/models/o/m%d", structuredOld: "X-Ratekeeper-Upstream-Ratelimit"},
	}
	for _, c := range cases {
		t.Run(c.dialect, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tokens := []sim.TokenConfig{{Token: "tok-pv-a1", Owner: "alice"}, {Token: "tok-pv-b1", Owner: "bob"}}
				// A max wait shorter than the window: once both buckets
				// are dry nothing can serve within it.
				s := newSim(t, sim.APIConfig{Dialect: c.dialect, Limit: 3, Window: time.Minute, Tokens: tokens},
					[]string{"tok-pv-a1", "tok-pv-b1"}, func(o *Options) { o.MaxWait = 10 * time.Second })
				start := time.Now()
				sawOwnZero := false
				for i := 1; i <= 6; i++ {
					resp := s.get(t, fmt.Sprintf(c.path, i))
					drain(resp)
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("request %d: %s", i, resp.Status)
					}
					h := resp.Header
					if c.structuredOld != "" {
						checkStructured(t, i, h, 6-i, 6, c.structuredOld)
						if strings.HasPrefix(h.Get(c.structuredOld), `"api";r=0;`) && i < 6 {
							sawOwnZero = true
						}
						continue
					}
					if got, want := h.Get(c.remaining), strconv.Itoa(6-i); got != want {
						t.Fatalf("request %d: %s %q, want %s (the pool's); header:\n%s", i, c.remaining, got, want, headerDump(h))
					}
					if got := h.Get(c.limit); got != "6" {
						t.Fatalf("request %d: %s %q, want 6", i, c.limit, got)
					}
					if got, want := h.Get(c.used), strconv.Itoa(i); got != want {
						t.Fatalf("request %d: %s %q, want %s", i, c.used, got, want)
					}
					own := h.Get(c.upstreamRemaining)
					if own == "" {
						t.Fatalf("request %d: no %s; header:\n%s", i, c.upstreamRemaining, headerDump(h))
					}
					if own == "0" && i < 6 {
						sawOwnZero = true
					}
					reset, err := strconv.ParseInt(h.Get(c.reset), 10, 64)
					if err != nil || reset < start.Unix() || reset > start.Add(time.Minute+2*time.Second).Unix() {
						t.Fatalf("request %d: %s %q, want a Unix time within the window from %d", i, c.reset, h.Get(c.reset), start.Unix())
					}
				}
				if !sawOwnZero {
					t.Fatalf("no token ran dry before the pool did: the test shows nothing")
				}
			})
		})
	}
}

// checkStructured checks the IETF draft's fields (Hugging Face): the
// RateLimit item's r= is the pool's remaining and RateLimit-Policy's q=
// its limit, the item's name and other parameters as the server sent them.
func checkStructured(t *testing.T, i int, h http.Header, remaining, limit int, upstream string) {
	t.Helper()
	rl, pol := h.Get("Ratelimit"), h.Get("Ratelimit-Policy")
	if !strings.HasPrefix(rl, `"api";r=`+strconv.Itoa(remaining)+";t=") {
		t.Fatalf("request %d: RateLimit %q, want \"api\";r=%d;t=…; header:\n%s", i, rl, remaining, headerDump(h))
	}
	if !strings.Contains(pol, `"api";q=`+strconv.Itoa(limit)+";w=60") {
		t.Fatalf("request %d: RateLimit-Policy %q, want q=%d", i, pol, limit)
	}
	if !strings.HasPrefix(h.Get(upstream), `"api";r=`) {
		t.Fatalf("request %d: %s %q, want the server's RateLimit", i, upstream, h.Get(upstream))
	}
}

func headerDump(h http.Header) string {
	var b strings.Builder
	_ = h.Write(&b)
	return b.String()
}

// The reserve is not the caller's: with a reserve of one request, two
// buckets of 3 show a limit of 4, and Remaining 0 once each bucket is down
// to its reserve.
func TestPoolFieldsLeaveTheReserveOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tokens := []sim.TokenConfig{{Token: "tok-pv-a1", Owner: "alice"}, {Token: "tok-pv-b1", Owner: "bob"}}
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 3, Window: time.Minute, Tokens: tokens},
			[]string{"tok-pv-a1", "tok-pv-b1"}, func(o *Options) { o.Policy.Reserve = 1; o.MaxWait = 10 * time.Second })
		for i := 1; i <= 4; i++ {
			resp := s.get(t, fmt.Sprintf("/repos/o/r%d", i))
			drain(resp)
			if got, want := resp.Header.Get("X-Ratelimit-Remaining"), strconv.Itoa(4-i); got != want {
				t.Fatalf("request %d: X-RateLimit-Remaining %q, want %s; header:\n%s", i, got, want, headerDump(resp.Header))
			}
			if got := resp.Header.Get("X-Ratelimit-Limit"); got != "4" {
				t.Fatalf("request %d: X-RateLimit-Limit %q, want 4", i, got)
			}
		}
	})
}

// Options.UpstreamRateLimitHeaders delivers the server's fields as sent.
func TestUpstreamRateLimitHeadersOption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tokens := []sim.TokenConfig{{Token: "tok-pv-a1", Owner: "alice"}, {Token: "tok-pv-b1", Owner: "bob"}}
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 3, Window: time.Minute, Tokens: tokens},
			[]string{"tok-pv-a1", "tok-pv-b1"}, func(o *Options) { o.UpstreamRateLimitHeaders = true })
		for i := 1; i <= 3; i++ {
			resp := s.get(t, fmt.Sprintf("/repos/o/r%d", i))
			drain(resp)
			if got := resp.Header.Get("X-Ratelimit-Limit"); got != "3" {
				t.Fatalf("request %d: X-RateLimit-Limit %q, want the server's 3", i, got)
			}
			for k := range resp.Header {
				if strings.HasPrefix(k, HeaderUpstreamPrefix) {
					t.Fatalf("request %d: %s set with the server's headers asked for", i, k)
				}
			}
		}
	})
}

// A refusal that reaches the caller (here: no retries after rate-limit
// refusals) tells in Retry-After when the pool can go, not when the
// refused token can: the other token can go at once.
// A primary refusal (no Retry-After from GitHub) gets one too.
func TestDeliveredRefusalTellsThePoolsRetryAfter(t *testing.T) {
	t.Run("secondary", func(t *testing.T) { deliveredRefusal(t, false) })
	t.Run("primary", func(t *testing.T) { deliveredRefusal(t, true) })
}

func deliveredRefusal(t *testing.T, primary bool) {
	synctest.Test(t, func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			refused := r.Header.Get("Authorization") == "Bearer tok-pv-a1"
			w.Header().Set("X-RateLimit-Limit", "5000")
			w.Header().Set("X-RateLimit-Remaining", "4000")
			if refused && primary {
				w.Header().Set("X-RateLimit-Remaining", "0")
			}
			w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
			w.Header().Set("X-RateLimit-Resource", "core")
			switch {
			case refused && primary:
				w.WriteHeader(http.StatusForbidden)
				fmt.Fprint(w, `{"message":"API rate limit exceeded for user ID 1."}`)
			case refused:
				w.Header().Set("Retry-After", "120")
				w.WriteHeader(http.StatusForbidden)
				fmt.Fprint(w, `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`)
			default:
				fmt.Fprint(w, `{}`)
			}
		})
		p, err := provider.New("github", provider.GitHub, "http://api.test")
		if err != nil {
			t.Fatal(err)
		}
		reg := provider.NewRegistry()
		_ = reg.Add(p)
		// Owners known: a token whose bucket is unknown would wait for the
		// refused one's (learning never overspends a bucket it may share).
		a1, b1 := creds.NewToken("github", 1, "tok-pv-a1", "test"), creds.NewToken("github", 2, "tok-pv-b1", "test")
		a1.SetOwner(provider.Owner{ID: "1", Name: "alice"})
		b1.SetOwner(provider.Owner{ID: "2", Name: "bob"})
		pool := creds.NewPool("github", a1, b1)
		tr, err := New(Options{Providers: reg, Pools: map[string]*creds.Pool{"github": pool}, Base: handlerRT{h},
			Policy: quota.Policy{Kind: quota.Greedy}, MaxRateLimitRetries: -1, SkipValidation: true})
		if err != nil {
			t.Fatal(err)
		}
		refused := 0
		for i := 0; i < 6; i++ {
			req := httptest.NewRequest(http.MethodGet, "http://api.test/repos/o/r"+strconv.Itoa(i), nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
			if resp.StatusCode != http.StatusForbidden {
				continue
			}
			refused++
			if got := resp.Header.Get("Retry-After"); got != "0" {
				t.Fatalf("refusal: Retry-After %q, want 0 (the other token can go now); header:\n%s", got, headerDump(resp.Header))
			}
			if got, want := resp.Header.Get(HeaderUpstreamPrefix+"Retry-After"), map[bool]string{false: "120", true: ""}[primary]; got != want {
				t.Fatalf("refusal: %sRetry-After %q, want the server's %q", HeaderUpstreamPrefix, got, want)
			}
		}
		if refused == 0 {
			t.Fatal("no refusal was delivered: the test shows nothing")
		}
	})
}

// figures of a pool whose buckets are down to the reserve or dry say 0
// only when every bucket is; a bucket no answer described yet counts as a
// fresh one of the others' size.
func TestFiguresCountEachBucketOnce(t *testing.T) {
	p, _ := provider.New("github", provider.GitHub, "http://api.test")
	reg := provider.NewRegistry()
	_ = reg.Add(p)
	a1, a2 := creds.NewToken("github", 1, "tok-pv-a1", "test"), creds.NewToken("github", 2, "tok-pv-a2", "test")
	b1 := creds.NewToken("github", 3, "tok-pv-b1", "test")
	a1.SetOwner(provider.Owner{ID: "1", Name: "alice"})
	a2.SetOwner(provider.Owner{ID: "1", Name: "alice"})
	pool := creds.NewPool("github", a1, a2, b1)
	tr, err := New(Options{Providers: reg, Pools: map[string]*creds.Pool{"github": pool}, SkipValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	l := tr.laneFor(p)
	now := time.Unix(1_700_000_000, 0)
	feed := func(c *creds.Credential, remaining int64, reset time.Time) {
		r := quota.Read(200, http.Header{"X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Remaining": {strconv.FormatInt(remaining, 10)},
			"X-Ratelimit-Reset": {strconv.FormatInt(reset.Unix(), 10)}, "X-Ratelimit-Resource": {"core"}}, nil, now, 0)
		tr.view.observe(l.slot(c, provider.Request{Resource: "core"}), &quota.Answer{Reading: &r, Counted: true}, now)
	}
	feed(a1, 0, now.Add(30*time.Minute))
	f := tr.figures(l, pool, "core", now)
	if !f.known || f.remaining != 10 || f.limit != 20 {
		t.Fatalf("alice dry, bob unknown: %+v, want remaining 10 (bob's fresh bucket), limit 20", f)
	}
	feed(b1, 0, now.Add(10*time.Minute))
	f = tr.figures(l, pool, "core", now)
	if f.remaining != 0 || f.limit != 20 || !f.reset.Equal(now.Add(10*time.Minute)) {
		t.Fatalf("both dry: %+v, want remaining 0, limit 20, reset the sooner (bob's)", f)
	}
	if f = tr.figures(l, pool, "core", now.Add(11*time.Minute)); f.remaining != 10 {
		t.Fatalf("after bob's reset: %+v, want his bucket refilled", f)
	}
	// Within the max wait of bob's reset a request sent now is served
	// (it waits in the transport): the figures say so.
	if f = tr.figures(l, pool, "core", now.Add(10*time.Minute-DefaultMaxWait+time.Minute)); f.remaining != 10 || !f.reset.Equal(now.Add(10*time.Minute)) {
		t.Fatalf("bob's reset within the max wait: %+v, want remaining 10, reset bob's", f)
	}
	// The gateway's own wait is the horizon where it waits itself.
	tr.opts.CallerMaxWait = map[string]time.Duration{"github": time.Minute}
	if f = tr.figures(l, pool, "core", now.Add(10*time.Minute-2*time.Minute)); f.remaining != 0 {
		t.Fatalf("bob's reset beyond the caller's max wait: %+v, want remaining 0", f)
	}
}
