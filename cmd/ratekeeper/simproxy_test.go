package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// simProxy is `ratekeeper sim` run as a process, behind a loopback proxy
// that notes when each request arrives, how many are in flight and what
// each was answered: the simulator's stats count requests, not when they
// came, and a restart is measured by the first request after it.
type simProxy struct {
	URL string // the proxy's: what the commands under test are given
	sim string // the simulator's own, for its /_stats

	inFlight atomic.Int64

	mu       sync.Mutex
	arrivals []time.Time
	answers  []proxied
}

// proxied is one request the simulator answered.
type proxied struct {
	arrived, answered time.Time
	status            int
}

// simStats is the part of the simulator's /_stats these runs read.
type simStats struct {
	Total struct {
		Requests            int64 `json:"requests"`
		Accepted            int64 `json:"accepted"`
		PrimaryViolations   int64 `json:"primary_violations"`
		SecondaryViolations int64 `json:"secondary_violations"`
		MaxInFlight         int64 `json:"max_in_flight"`
	} `json:"total"`
}

var simListening = regexp.MustCompile(`listening on (http://\S+) `)

// startSimProxy runs `ratekeeper sim` with GitHub's dialect at /github, one
// token of alice (tok-alice-1), and the extra flags given.
func startSimProxy(tb testing.TB, extra ...string) *simProxy {
	tb.Helper()
	args := append([]string{"sim", "--listen", "127.0.0.1:0", "--dialect", "github", "--prefix", "/github",
		"--tokens", "alice:tok-alice-1"}, extra...)
	s := &simProxy{sim: startProcess(tb, nil, args...).waitFor(tb, simListening)}
	target, err := url.Parse(s.sim)
	if err != nil {
		tb.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 64}
	// A request whose client was killed is cancelled: no answer to note,
	// and nothing worth a log line.
	rp.ErrorHandler = func(http.ResponseWriter, *http.Request, error) {}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		s.mu.Lock()
		s.arrivals = append(s.arrivals, arrived)
		s.mu.Unlock()
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		sw := &statusWriter{ResponseWriter: w}
		rp.ServeHTTP(sw, r)
		if sw.status != 0 {
			s.mu.Lock()
			s.answers = append(s.answers, proxied{arrived, time.Now(), sw.status})
			s.mu.Unlock()
		}
	}))
	tb.Cleanup(ts.Close)
	s.URL = ts.URL
	return s
}

// statusWriter notes the status the proxy answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// firstAfter returns the arrival of the first request at or after t.
func (s *simProxy) firstAfter(t time.Time) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, at := range s.arrivals {
		if !at.Before(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

// waitFirstAfter returns the arrival of the first request at or after t,
// failing when none comes within limit of t.
func (s *simProxy) waitFirstAfter(tb testing.TB, t time.Time, limit time.Duration, output func() string) time.Time {
	tb.Helper()
	for {
		if at, ok := s.firstAfter(t); ok {
			return at
		}
		if time.Since(t) > limit {
			tb.Fatalf("no request reached the simulator within %v of the restart:\n%s", limit, output())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitInFlight waits until n requests are in flight at the simulator.
func (s *simProxy) waitInFlight(tb testing.TB, n int64, output func() string) {
	tb.Helper()
	for deadline := time.Now().Add(30 * time.Second); s.inFlight.Load() < n; {
		if time.Now().After(deadline) {
			tb.Fatalf("%d requests in flight after 30 s, want %d (%s):\n%s", s.inFlight.Load(), n, s.seen(), output())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// seen describes what the simulator received, for a failure's message: how
// many requests, and each answer's arrival, answer and status (seconds
// and milliseconds of the minute).
func (s *simProxy) seen() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d arrived by %s; answers:", len(s.arrivals), time.Now().Format("05.000"))
	for _, a := range s.answers {
		fmt.Fprintf(&b, " %s→%s %d", a.arrived.Format("05.000"), a.answered.Format("05.000"), a.status)
	}
	return b.String()
}

// refusals returns the answers with status 403 or 429, by arrival.
func (s *simProxy) refusals() []proxied {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []proxied
	for _, a := range s.answers {
		if a.status == http.StatusForbidden || a.status == http.StatusTooManyRequests {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].arrived.Before(out[j].arrived) })
	return out
}

// episodes counts refusal episodes under a penalty of pause: the simulator
// refuses every request that arrives during a penalty, so a refusal that
// arrived within pause of an episode's first belongs to that episode (the
// requests already in flight when it began); a later one is a new episode.
func episodes(refused []proxied, pause time.Duration) int {
	n := 0
	var start time.Time
	for _, r := range refused {
		if n == 0 || !r.arrived.Before(start.Add(pause)) {
			n, start = n+1, r.arrived
		}
	}
	return n
}

// readStats reads the simulator's /_stats.
func (s *simProxy) readStats(tb testing.TB) simStats {
	tb.Helper()
	var st simStats
	getJSON(tb, s.sim+"/_stats", &st)
	return st
}
