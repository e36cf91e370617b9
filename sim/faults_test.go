package sim

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// outcomes sends n requests in sequence and writes one letter per answer:
// . ok, E 5xx without Retry-After, U 503 with Retry-After, D dropped.
func outcomes(t *testing.T, seed int64, n int) string {
	t.Helper()
	srv := mustNew(t, Config{Seed: seed, APIs: []APIConfig{{Dialect: "github", Limit: 1 << 20, Secondary: noSecondary(),
		Tokens: []TokenConfig{{Token: "tok-f-1"}},
		Faults: FaultConfig{ErrorRate: 0.1, UnavailableRate: 0.1, DropRate: 0.1, UnavailableRetryAfter: 3 * time.Second}}}})
	c := newClient(t, srv)
	var sb strings.Builder
	for range n {
		a, err := c.try("GET", "/repos/o/r", "Authorization", "token tok-f-1")
		switch {
		case err != nil:
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("drop error %v does not wrap io.ErrUnexpectedEOF", err)
			}
			sb.WriteByte('D')
		case a.status == 503:
			if a.h("Retry-After") != "3" {
				t.Fatalf("503 Retry-After %q", a.h("Retry-After"))
			}
			sb.WriteByte('U')
		case a.status >= 500:
			if a.h("Retry-After") != "" {
				t.Fatalf("%d with Retry-After", a.status)
			}
			sb.WriteByte('E')
		case a.status == 200:
			sb.WriteByte('.')
		default:
			t.Fatalf("status %d", a.status)
		}
	}
	st := srv.Stats()
	if got := st.Total.ServerErrors + st.Total.Dropped + st.Total.Accepted; got != int64(n) || st.Total.Charged != st.Total.Accepted {
		t.Fatalf("stats do not add up: %+v", st.Total)
	}
	return sb.String()
}

func TestFaultInjectionIsDeterministic(t *testing.T) {
	a, b := outcomes(t, 42, 300), outcomes(t, 42, 300)
	if a != b {
		t.Fatalf("same seed, different faults:\n%s\n%s", a, b)
	}
	for _, f := range "EUD." {
		n := strings.Count(a, string(f))
		if f != '.' && (n < 10 || n > 60) {
			t.Errorf("%c happened %d times in 300 at rate 0.1", f, n)
		}
	}
	if c := outcomes(t, 43, 300); c == a {
		t.Error("another seed gave the same faults")
	}
}

func TestDroppedConnectionOverTheWire(t *testing.T) {
	srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "gitea", Faults: FaultConfig{DropRate: 1}}}})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/api/v1/repos/o/r")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got %d, want a closed connection", resp.StatusCode)
	}
	if st := srv.Stats(); st.Total.Dropped < 1 {
		t.Errorf("dropped %d", st.Total.Dropped)
	}
}

func TestSlowAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "hf", Faults: FaultConfig{SlowRate: 1, SlowDelay: 4 * time.Second}}}})
		c := newClient(t, srv)
		start := time.Now()
		if a := c.get("/api/models/o/m", ""); a.status != 200 {
			t.Fatalf("status %d", a.status)
		}
		if took := time.Since(start); took != 4*time.Second {
			t.Errorf("slow answer took %v, want 4s", took)
		}
	})
}

// A client that gives up during the latency gets nothing and the server
// goes on.
func TestCanceledDuringLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", Latency: time.Minute}}})
		ctx, cancel := contextWithTimeout(t, time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://sim.test/repos/o/r", nil)
		if _, err := srv.Transport("").RoundTrip(req); err == nil {
			t.Fatal("no error after the context expired")
		}
		if st := srv.Stats(); st.Total.Accepted != 1 {
			t.Errorf("stats %+v", st.Total)
		}
	})
}

// BareRefusalAt answers exactly one request, the N-th, with a proxy's page:
// no rate-limit header, nothing charged; on GitHub a request to the same
// bucket within the minute after it is an early retry, one after it is
// not.
func TestBareRefusalFault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "github", Limit: 100, Window: time.Hour, Secondary: noSecondary(),
			Tokens: []TokenConfig{{Token: "tok-f-1"}}, Faults: FaultConfig{BareRefusalAt: 3}}}})
		c := newClient(t, srv)
		var statuses []int
		for i := range 5 {
			switch i {
			case 3:
				time.Sleep(time.Second)
			case 4:
				time.Sleep(GitHubSecondaryWait)
			}
			a, err := c.try("GET", "/repos/o/r", "Authorization", "token tok-f-1")
			if err != nil {
				t.Fatal(err)
			}
			statuses = append(statuses, a.status)
			if a.status == http.StatusTooManyRequests {
				for k := range a.header {
					if strings.Contains(strings.ToLower(k), "ratelimit") || strings.EqualFold(k, "Retry-After") {
						t.Errorf("the proxy's refusal carries %s", k)
					}
				}
				if ct := a.h("Content-Type"); !strings.HasPrefix(ct, "text/html") {
					t.Errorf("the proxy's refusal is %q, want an HTML page", ct)
				}
			}
		}
		if want := []int{200, 200, 429, 200, 200}; !slicesEqual(statuses, want) {
			t.Fatalf("statuses %v, want %v", statuses, want)
		}
		st := srv.Stats()
		if st.Total.BareRefusals != 1 || st.Total.EarlyRetries != 1 || st.Total.Charged != 4 || st.Total.Violations != 0 {
			t.Errorf("stats %+v: want 1 bare refusal, 1 early retry (the 4th request), 4 charged, no violation", st.Total)
		}
	})
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
