package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

const (
	bareURLs      = 200
	bareAt        = 100 // the request the proxy refuses
	bareLatency   = 50 * time.Millisecond
	bareWorkers   = 10 // the library's goroutines and serve's clients: fetch's default --concurrency
	githubMinute  = time.Minute
	bareToken     = "tok-alice-1"
	bareLimitHour = 5000
)

// BenchmarkBareRefusal is a batch of 200 GitHub reads of which the 100th
// is answered by a proxy in front of GitHub, not by GitHub: a 429 HTML
// page with no rate-limit header (sim's BareRefusalAt). The bucket has
// thousands left and its reset is an hour away. The batch runs through
// `ratekeeper fetch` with its defaults, through the library (a transport,
// 10 goroutines) and through `ratekeeper serve` (10 clients that obey the
// gateway's Retry-After), each first without the fault (its time alone)
// and then with it, at GitHub's own time scale: the pause is the real
// minute. The targets: nothing sent to the bucket for the minute after the
// refusal, then the batch goes on and finishes within the minute plus its
// time alone (x-ideal ≤ 1, where ideal = time alone + 60 s).
//
// It reports early-sends as the simulator counts them (requests that
// arrived after the refusal's answer left and before the minute ended,
// which includes those the client decided on while the answer was on its
// way to it) and late-sends, those of them that arrived more than a round
// trip (the 50 ms latency) after it: a client that heeds the refusal sends
// none. pause-s is when the first request more than a round trip after the
// refusal arrived.
//
//	go test ./cmd/ratekeeper -run '^$' -bench BareRefusal -benchtime 1x -timeout 30m
func BenchmarkBareRefusal(b *testing.B) {
	for _, via := range []string{"cli", "library", "serve"} {
		b.Run(via, func(b *testing.B) {
			for b.Loop() {
				runBare(b, via)
			}
		})
	}
}

func runBare(b *testing.B, via string) {
	alone := startBareSim(b, 0)
	start := time.Now()
	if failed := bareBatch(b, via, alone); failed > 0 {
		b.Fatalf("%s alone: %d URLs failed", via, failed)
	}
	baseline := time.Since(start)

	s := startBareSim(b, bareAt)
	start = time.Now()
	failed := bareBatch(b, via, s)
	makespan := time.Since(start)
	st := s.srv.Stats()
	refusedAt, within := s.pause()
	next := s.nextAfter(bareLatency)
	ideal := baseline + githubMinute
	b.Logf("%s: makespan %v, alone %v, ideal %v (%.3f×); the refusal's answer at %v; arrivals in the minute after it %v; the first more than a round trip after it %v after it; %d bare refusals, %d early sends, %d violations, %d URLs failed",
		via, makespan.Round(time.Millisecond), baseline.Round(time.Millisecond), ideal.Round(time.Millisecond),
		makespan.Seconds()/ideal.Seconds(), refusedAt.Sub(start).Round(time.Millisecond), within, next.Round(time.Millisecond),
		st.Total.BareRefusals, st.Total.EarlyRetries, st.Total.Violations, failed)
	if st.Total.BareRefusals != 1 || failed > 0 {
		b.Errorf("%d bare refusals, %d URLs failed; want 1 and 0", st.Total.BareRefusals, failed)
	}
	b.ReportMetric(makespan.Seconds()/ideal.Seconds(), "x-ideal")
	b.ReportMetric(float64(st.Total.EarlyRetries), "early-sends")
	late := 0
	for _, d := range within {
		if d > bareLatency {
			late++
		}
	}
	b.ReportMetric(float64(late), "late-sends")
	b.ReportMetric(next.Seconds(), "pause-s")
	b.ReportMetric(baseline.Seconds(), "alone-s")
	b.ReportMetric(makespan.Seconds(), "makespan-s")
}

// bareSim is the simulator (GitHub's dialect at /, alice's token) behind
// a loopback server that notes when each request arrived and when the
// proxy's refusal left.
type bareSim struct {
	srv *sim.Server
	url string

	mu       sync.Mutex
	arrivals []time.Time
	refused  time.Time
}

func startBareSim(tb testing.TB, refuseAt int64) *bareSim {
	tb.Helper()
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: sim.DialectGitHub, Limit: bareLimitHour, Window: time.Hour,
		Latency: bareLatency, Tokens: []sim.TokenConfig{{Token: bareToken, Owner: "alice"}},
		Faults: sim.FaultConfig{BareRefusalAt: refuseAt}}}})
	if err != nil {
		tb.Fatal(err)
	}
	s := &bareSim{srv: srv}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		srv.ServeHTTP(rec, r)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.arrivals = append(s.arrivals, arrived)
		if rec.status == http.StatusTooManyRequests {
			s.refused = time.Now()
		}
	}))
	tb.Cleanup(ts.Close)
	s.url = ts.URL
	return s
}

// pause returns when the refusal's answer left, and the offsets from it
// of the requests that arrived within the minute after it.
func (s *bareSim) pause() (time.Time, []time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var in []time.Duration
	for _, at := range s.arrivals {
		if d := at.Sub(s.refused); d > 0 && d < githubMinute {
			in = append(in, d)
		}
	}
	return s.refused, in
}

// nextAfter is how long after the refusal's answer left the first
// request arrived that was not sent before the client could read it:
// one arriving later than slack after it.
func (s *bareSim) nextAfter(slack time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := time.Duration(0)
	for _, at := range s.arrivals {
		if d := at.Sub(s.refused); d > slack && (next == 0 || d < next) {
			next = d
		}
	}
	return next
}

func (s *bareSim) urls() []string {
	out := make([]string, bareURLs)
	for i := range out {
		out[i] = fmt.Sprintf("%s/repos/o/r%03d", s.url, i)
	}
	return out
}

// bareBatch gets the batch through via and returns how many URLs did not
// end in 200.
func bareBatch(b *testing.B, via string, s *bareSim) int {
	switch via {
	case "cli":
		return fetchThroughCLI(b, "GITHUB_TOKEN="+bareToken, "github="+s.url, s.urls())
	case "serve":
		return bareThroughServe(b, s)
	}
	p, err := provider.New("github", provider.GitHub, s.url)
	if err != nil {
		b.Fatal(err)
	}
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		b.Fatal(err)
	}
	tr, err := transport.New(transport.Options{Providers: reg, Policy: quota.Policy{Kind: quota.Greedy}, MaxWait: 2 * time.Minute,
		Pools: map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, bareToken, "bench"))}})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	return bareWorkersDo(s.urls(), func(u string) bool {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// bareThroughServe runs `ratekeeper serve` with its defaults (a 30 s max
// wait) before the simulator, and sends the batch through it from
// bareWorkers clients that wait out a 429's Retry-After, as a client of
// any language would.
func bareThroughServe(b *testing.B, s *bareSim) int {
	gw := startProcess(b, []string{"GITHUB_TOKEN=" + bareToken}, "serve", "--listen", "127.0.0.1:0", "--db", "memory",
		"--provider", "github="+s.url, "--refresh", "0")
	base := gw.waitFor(b, regexp.MustCompile(`ratekeeper gateway on (http://\S+) `))
	defer gw.stop(b)
	client := &http.Client{Timeout: 5 * time.Minute}
	urls := make([]string, bareURLs)
	for i := range urls {
		urls[i] = fmt.Sprintf("%s/github/repos/o/r%03d", base, i)
	}
	return bareWorkersDo(urls, func(u string) bool {
		for range 10 {
			resp, err := client.Get(u)
			if err != nil {
				return false
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests {
				return resp.StatusCode == http.StatusOK
			}
			secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			time.Sleep(time.Duration(max(secs, 1)) * time.Second)
		}
		return false
	})
}

// bareWorkersDo runs get over urls from bareWorkers goroutines and
// counts the failures.
func bareWorkersDo(urls []string, get func(string) bool) int {
	jobs := make(chan string)
	var mu sync.Mutex
	failed := 0
	var wg sync.WaitGroup
	for range bareWorkers {
		wg.Go(func() {
			for u := range jobs {
				if !get(u) {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		})
	}
	for _, u := range urls {
		jobs <- u
	}
	close(jobs)
	wg.Wait()
	return failed
}
