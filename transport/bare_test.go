package transport

import (
	"fmt"
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

// proxiedGitHub is GitHub behind a proxy that, now and then, answers a
// request itself with a 429 page and no rate-limit header. GitHub's own
// answers state core's 5,000 an hour (remaining counting down from
// 4,000, the reset 50 minutes after the start) or search's 30 a minute.
// It runs in the synctest bubble and answers after latency.
type proxiedGitHub struct {
	latency time.Duration
	// refuse answers the core requests of these numbers (from 1) with
	// the proxy's page; each is a status and a Retry-After ("" for none).
	refuse map[int]proxyAnswer

	mu      sync.Mutex
	start   time.Time
	core    int
	used    int
	arrived []arrival
	refused chan time.Time // each refusal's answer time
}

type proxyAnswer struct {
	status     int
	retryAfter string
	body       string
	json       bool
}

type arrival struct {
	at     time.Time
	core   bool
	status int
}

func (g *proxiedGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	now := time.Now()
	if g.start.IsZero() {
		g.start = now
	}
	core := !strings.HasPrefix(r.URL.Path, "/search/")
	var refusal *proxyAnswer
	if core {
		g.core++
		if a, ok := g.refuse[g.core]; ok {
			refusal = &a
		} else {
			g.used++
		}
	}
	i := len(g.arrived)
	g.arrived = append(g.arrived, arrival{at: now, core: core})
	used := g.used
	g.mu.Unlock()

	time.Sleep(g.latency)
	h := w.Header()
	status := http.StatusOK
	switch {
	case refusal != nil:
		status = refusal.status
		if refusal.json {
			h.Set("Content-Type", "application/json; charset=utf-8")
		} else {
			h.Set("Content-Type", "text/html")
		}
		if refusal.retryAfter != "" {
			h.Set("Retry-After", refusal.retryAfter)
		}
		w.WriteHeader(status)
		io.WriteString(w, cmpOrString(refusal.body, "<html><body><h1>429 Too Many Requests</h1></body></html>"))
		if status == http.StatusTooManyRequests || !refusal.json {
			g.refused <- time.Now()
		}
	case core:
		h.Set("X-Ratelimit-Limit", "5000")
		h.Set("X-Ratelimit-Remaining", strconv.Itoa(4000-used))
		h.Set("X-Ratelimit-Used", strconv.Itoa(1000+used))
		h.Set("X-Ratelimit-Reset", strconv.FormatInt(g.start.Add(50*time.Minute).Unix(), 10))
		h.Set("X-Ratelimit-Resource", "core")
		io.WriteString(w, "{}")
	default:
		h.Set("X-Ratelimit-Limit", "30")
		h.Set("X-Ratelimit-Remaining", "29")
		h.Set("X-Ratelimit-Reset", strconv.FormatInt(now.Add(time.Minute).Unix(), 10))
		h.Set("X-Ratelimit-Resource", "search")
		io.WriteString(w, "{}")
	}
	g.mu.Lock()
	g.arrived[i].status = status
	g.mu.Unlock()
}

func cmpOrString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// coreAfter returns the core arrivals after t.
func (g *proxiedGitHub) coreAfter(t time.Time) []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []time.Time
	for _, a := range g.arrived {
		if a.core && a.at.After(t) {
			out = append(out, a.at)
		}
	}
	return out
}

func proxiedTransport(t *testing.T, g *proxiedGitHub) *Transport {
	t.Helper()
	p, err := provider.New("github", provider.GitHub, "http://api.test")
	if err != nil {
		t.Fatal(err)
	}
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		t.Fatal(err)
	}
	tr, err := New(Options{Providers: reg, Base: handlerRT{g}, SkipValidation: true, DisableCache: true, MaxWait: time.Hour,
		Pools: map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-proxy-0001", "test"))}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func getOK(t *testing.T, tr http.RoundTripper, url string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %s", url, resp.Status)
	}
}

// A headerless 429 page from a proxy in front of GitHub, in the middle of
// a batch of 40 core reads by 4 workers: nothing more is sent to core for
// GitHub's minute, then the batch goes on and finishes a minute after it
// would have alone (the reset is 50 minutes away); a search request during
// the pause goes at once, since the pause is core's, not the owner's; and
// the first answer after it, stating 3,990-odd left, is believed. On main
// the refusal emptied core until its reset: the batch waited 50 minutes.
func TestBareRefusalPausesTheBucketAMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &proxiedGitHub{latency: 100 * time.Millisecond, refused: make(chan time.Time, 4),
			refuse: map[int]proxyAnswer{10: {status: http.StatusTooManyRequests}}}
		tr := proxiedTransport(t, g)
		start := time.Now()
		jobs := make(chan int)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for i := range jobs {
					getOK(t, tr, fmt.Sprintf("http://api.test/repos/o/r%d", i))
				}
			})
		}
		var searchAt time.Duration
		wg.Go(func() {
			<-g.refused
			time.Sleep(10 * time.Second)
			before := time.Now()
			getOK(t, tr, "http://api.test/search/repositories?q=x")
			searchAt = time.Since(before)
		})
		for i := range 40 {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		makespan := time.Since(start)

		g.mu.Lock()
		var refusedAnswer time.Time
		for _, a := range g.arrived {
			if a.status == http.StatusTooManyRequests {
				refusedAnswer = a.at.Add(g.latency)
			}
		}
		g.mu.Unlock()
		after := g.coreAfter(refusedAnswer)
		if len(after) == 0 {
			t.Fatal("no core request after the refusal")
		}
		if gap := after[0].Sub(refusedAnswer); gap < time.Minute || gap > time.Minute+time.Second {
			t.Errorf("the first core request after the refusal went %v after it, want GitHub's minute", gap)
		}
		// Alone: 40 requests, at most 4 in flight, 100 ms each.
		if alone := 10 * g.latency; makespan > time.Minute+alone+2*time.Second {
			t.Errorf("the batch took %v, want at most the minute's pause plus its %v alone (and a little)", makespan, alone)
		}
		if searchAt > g.latency {
			t.Errorf("a search request during core's pause took %v, want one round trip", searchAt)
		}
		// The answers after the pause stated what is left: a request now
		// goes at once.
		before := time.Now()
		getOK(t, tr, "http://api.test/repos/o/after")
		if d := time.Since(before); d > g.latency {
			t.Errorf("a request after the batch took %v, want one round trip", d)
		}
	})
}

// Bare refusals that repeat pause for a minute, then at least two; one
// with Retry-After is obeyed exactly, on GitHub too; a 403 page from a
// proxy is bare like a 429; a 403 with GitHub's own error body is a
// permission error: answered to the caller, and nothing paused.
func TestBareRefusalKinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &proxiedGitHub{latency: 10 * time.Millisecond, refused: make(chan time.Time, 8), refuse: map[int]proxyAnswer{
			1: {status: http.StatusTooManyRequests},
			2: {status: http.StatusTooManyRequests},
			4: {status: http.StatusTooManyRequests, retryAfter: "7"},
			6: {status: http.StatusForbidden, body: "<!DOCTYPE html><html><body>Access denied</body></html>"},
			8: {status: http.StatusForbidden, json: true, body: `{"message":"Resource not accessible by integration","documentation_url":"https://docs.github.com/rest"}`},
		}}
		tr := proxiedTransport(t, g)
		t0 := time.Now()
		getOK(t, tr, "http://api.test/repos/o/a") // 1 refused, 2 refused, 3 served
		getOK(t, tr, "http://api.test/repos/o/b") // 4 refused with Retry-After, 5 served
		getOK(t, tr, "http://api.test/repos/o/c") // 6 a 403 page, 7 served
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/repos/o/d", nil)
		resp, err := tr.RoundTrip(req) // 8: GitHub's own 403
		if err != nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("GitHub's own 403: %v %v, want it answered", resp, err)
		}
		resp.Body.Close()
		getOK(t, tr, "http://api.test/repos/o/e") // 9 served at once
		at := g.coreAfter(t0.Add(-time.Nanosecond))
		if len(at) != 9 {
			t.Fatalf("%d core requests, want 9", len(at))
		}
		gap := func(i int) time.Duration { return at[i].Sub(at[i-1]) - g.latency }
		if d := gap(1); d != time.Minute {
			t.Errorf("after the first bare refusal: %v, want 1m", d)
		}
		if d := gap(2); d < 2*time.Minute || d >= 3*time.Minute {
			t.Errorf("after it repeated: %v, want from 2m to 3m", d)
		}
		if d := gap(4); d != 7*time.Second {
			t.Errorf("after a Retry-After of 7: %v, want exactly 7s", d)
		}
		if d := gap(6); d != time.Minute {
			t.Errorf("after a 403 page: %v, want 1m", d)
		}
		if d := gap(8); d != 0 {
			t.Errorf("after GitHub's own 403: %v, want no pause", d)
		}
	})
}
