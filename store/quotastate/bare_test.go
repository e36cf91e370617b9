package quotastate_test

import (
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/transport"
)

// bareGitHub is GitHub (core: 5,000 an hour, 4,000 left, reset 50 minutes
// after the start) behind a proxy that answers its first request itself:
// its second request itself: a 429 page with no rate-limit header.
type bareGitHub struct {
	mu      sync.Mutex
	start   time.Time
	n, used int
	arrived []time.Time
}

func (g *bareGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	now := time.Now()
	if g.start.IsZero() {
		g.start = now
	}
	g.n++
	g.arrived = append(g.arrived, now)
	refuse := g.n == 2
	if !refuse {
		g.used++
	}
	used, reset := g.used, g.start.Add(50*time.Minute)
	g.mu.Unlock()
	if refuse {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "<html><body>Too Many Requests</body></html>")
		return
	}
	w.Header().Set("X-Ratelimit-Limit", "5000")
	w.Header().Set("X-Ratelimit-Remaining", strconv.Itoa(4000-used))
	w.Header().Set("X-Ratelimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	w.Header().Set("X-Ratelimit-Resource", "core")
	io.WriteString(w, "{}")
}

// A bare refusal travels through the shared state like any other fact:
// process A (its own transport and State on one SQLite file) is answered
// once, then meets a proxy's headerless 429 and gives up its request (max
// wait 1 ns); process
// B, asking 10 s later, sends nothing until GitHub's minute has passed
// since the refusal, then goes; the 200 it gets states what is left, and A
// goes at once after it. On main the refusal was written as remaining 0
// until the reset 50 minutes away, and B's request waited for that.
func TestBareRefusalTravelsThroughTheSharedState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &bareGitHub{}
		path := filepath.Join(t.TempDir(), "state.db")
		process := func(maxWait time.Duration) *transport.Transport {
			db, err := store.Open(t.Context(), path, store.Options{Now: time.Now})
			if err != nil {
				t.Fatal(err)
			}
			st := quotastate.New(db, nil)
			p, err := provider.New("github", provider.GitHub, "http://api.test")
			if err != nil {
				t.Fatal(err)
			}
			reg := provider.NewRegistry()
			if err := reg.Add(p); err != nil {
				t.Fatal(err)
			}
			tr, err := transport.New(transport.Options{Providers: reg, State: st, Base: recorderTransport{g},
				SkipValidation: true, DisableCache: true, MaxWait: maxWait,
				Pools: map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-bare-0001", "test"))}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				tr.Close()
				st.Close(t.Context())
				db.Close()
			})
			return tr
		}
		a, b := process(time.Nanosecond), process(time.Hour)
		resp, err := a.RoundTrip(httpGet("http://api.test/repos/o/a"))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("A's first request: %v %v", resp, err)
		}
		resp.Body.Close()
		start := time.Now()
		_, err = a.RoundTrip(httpGet("http://api.test/repos/o/b"))
		var we *transport.WaitError
		if !asWaitError(err, &we) {
			t.Fatalf("A after the refusal: %v, want a WaitError", err)
		}
		if d := we.RetryAt().Sub(start); d < time.Minute || d > time.Minute+time.Second {
			t.Errorf("A may retry %v after the refusal, want GitHub's minute", d)
		}
		time.Sleep(10 * time.Second)
		resp, err = b.RoundTrip(httpGet("http://api.test/repos/o/c"))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("B: %v %v", resp, err)
		}
		resp.Body.Close()
		g.mu.Lock()
		arrived := append([]time.Time(nil), g.arrived...)
		g.mu.Unlock()
		if len(arrived) != 3 {
			t.Fatalf("%d requests reached the server, want A's two and B's", len(arrived))
		}
		if d := arrived[2].Sub(arrived[1]); d < time.Minute || d > time.Minute+time.Second {
			t.Errorf("B's request reached the server %v after the refusal, want GitHub's minute", d)
		}
		before := time.Now()
		resp, err = a.RoundTrip(httpGet("http://api.test/repos/o/d"))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("A after B's 200: %v %v, want it to go at once", resp, err)
		}
		resp.Body.Close()
		if d := time.Since(before); d >= time.Second {
			t.Errorf("A's request after B's 200 waited %v, want no pause", d)
		}
	})
}

func asWaitError(err error, target **transport.WaitError) bool {
	return errors.As(err, target)
}
