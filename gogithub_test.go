package ratekeeper_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

// A client that keeps its own view of the limit — go-github refuses to send
// while the last answer of a category said "remaining: 0" and its reset is
// ahead — must see the pool, not the one token that answered: otherwise it
// stops when the first bucket runs dry while the others could serve.

// pooledBatch is the workload: four tokens, two of them of one user (three
// buckets of limit requests per rolling window), and a batch of GETs of
// distinct repositories that fills the buckets' windows exactly, sent by
// workers goroutines.
type pooledBatch struct {
	limit   int64
	window  time.Duration
	latency time.Duration
	windows int // the batch is buckets × limit × windows requests
	workers int
	// revoked: carol's token is one the server rejects, so two buckets
	// carry the batch.
	revoked bool
}

var pooledTokens = []sim.TokenConfig{
	{Token: "tok-pool-a-0001", Owner: "alice"},
	{Token: "tok-pool-a-0002", Owner: "alice"},
	{Token: "tok-pool-b-0003", Owner: "bob"},
	{Token: "tok-pool-c-0004", Owner: "carol"},
}

func (b pooledBatch) buckets() int {
	if b.revoked {
		return 2
	}
	return 3
}

func (b pooledBatch) jobs() int { return b.buckets() * int(b.limit) * b.windows }

// ideal is the physical limit: the last window opens windows−1 windows
// after the first, and its requests take their rounds of the latency.
func (b pooledBatch) ideal() time.Duration {
	perWindow := b.buckets() * int(b.limit)
	rounds := (perWindow + b.workers - 1) / b.workers
	return time.Duration(b.windows-1)*b.window + time.Duration(rounds)*b.latency
}

func (b pooledBatch) sim(t testing.TB) *sim.Server {
	t.Helper()
	srv, err := sim.New(sim.Config{Seed: 1, APIs: []sim.APIConfig{{Dialect: sim.DialectGitHub, Limit: b.limit,
		Window: b.window, Latency: b.latency, Tokens: pooledTokens}}})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func (b pooledBatch) clientOptions(srv *sim.Server, upstream bool) ratekeeper.Options {
	var tokens []string
	for _, tc := range pooledTokens {
		tokens = append(tokens, tc.Token)
	}
	if b.revoked {
		tokens[len(tokens)-1] = "tok-revoked-9999"
	}
	return ratekeeper.Options{
		Providers: []string{"github=http://api.test"},
		Tokens:    map[string][]string{"github": tokens},
		Policy:    "greedy",
		MaxWait:   2 * b.window,
		Base:      srv.Transport(""),
		Tune:      func(o *transport.Options) { o.UpstreamRateLimitHeaders = upstream },
	}
}

// batchResult is what one run of the batch came to.
type batchResult struct {
	makespan time.Duration
	// refusals are go-github's own: errors it returned without sending.
	refusals int
	failures int
	firstErr error
}

// runGoGitHub sends the batch with go-github over hc, whose API root is
// base, and counts go-github's local refusals (its *RateLimitError or
// *AbuseRateLimitError "… not making remote request").
func (b pooledBatch) runGoGitHub(t testing.TB, hc *http.Client, base string) batchResult {
	t.Helper()
	gh := github.NewClient(hc)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	gh.BaseURL = u
	return b.run(func(ctx context.Context, i int) error {
		_, _, err := gh.Repositories.Get(ctx, "org", fmt.Sprintf("repo%d", i))
		return err
	})
}

// runPlain sends the batch as plain GETs with hc.
func (b pooledBatch) runPlain(hc *http.Client, base string) batchResult {
	return b.run(func(ctx context.Context, i int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%srepos/org/repo%d", base, i), nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", req.URL, resp.Status)
		}
		return nil
	})
}

func (b pooledBatch) run(get func(context.Context, int) error) batchResult {
	var (
		res  batchResult
		mu   sync.Mutex
		next atomic.Int64
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range b.workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.jobs() {
					return
				}
				err := get(context.Background(), i)
				if err == nil {
					continue
				}
				mu.Lock()
				if localRefusal(err) {
					res.refusals++
				} else {
					res.failures++
				}
				if res.firstErr == nil {
					res.firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.makespan = time.Since(start)
	return res
}

// localRefusal reports an error go-github made up without sending the
// request.
func localRefusal(err error) bool {
	var rle *github.RateLimitError
	var abuse *github.AbuseRateLimitError
	switch {
	case errors.As(err, &rle):
		return strings.Contains(rle.Message, "not making remote request")
	case errors.As(err, &abuse):
		return strings.Contains(abuse.Message, "not making remote request")
	}
	return false
}

var issueBatch = pooledBatch{limit: 40, window: time.Minute, latency: 50 * time.Millisecond, windows: 4, workers: 8}

// TestGoGitHubSeesThePool: go-github over the library, on fake time. When
// the shared user's bucket runs dry first, the answers still say what the
// pool can do, so go-github refuses nothing itself, and the batch ends
// within 5 % of the physical limit and within 3 % of the same batch sent
// as plain GETs. With the server's own headers (the option), the same run
// shows the problem the pool view solves: go-github refuses requests the
// pool could have sent.
func TestGoGitHubSeesThePool(t *testing.T) {
	b := issueBatch
	library := func(upstream bool, goGitHub bool) (batchResult, sim.Stats) {
		var res batchResult
		var st sim.Stats
		synctest.Test(t, func(t *testing.T) {
			srv := b.sim(t)
			tr, err := ratekeeper.NewTransport(b.clientOptions(srv, upstream))
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			hc := &http.Client{Transport: tr}
			if goGitHub {
				res = b.runGoGitHub(t, hc, "http://api.test/")
			} else {
				res = b.runPlain(hc, "http://api.test/")
			}
			st = srv.Stats()
		})
		return res, st
	}
	gh, st := library(false, true)
	plain, _ := library(false, false)
	t.Logf("go-github: %v (%.3f × ideal %v), plain: %v, local refusals %d, charged %d",
		gh.makespan, gh.makespan.Seconds()/b.ideal().Seconds(), b.ideal(), plain.makespan, gh.refusals, st.Total.Charged)
	checkBatch(t, "go-github over the library", b, gh, st)
	if plain.failures+plain.refusals > 0 {
		t.Fatalf("plain GETs over the library: %d failures, first: %v", plain.failures, plain.firstErr)
	}
	if r := gh.makespan.Seconds() / plain.makespan.Seconds(); r > 1.03 {
		t.Errorf("go-github took %v, %.3f × the plain client's %v; want within 3 %%", gh.makespan, r, plain.makespan)
	}

	upstream, _ := library(true, true)
	t.Logf("with the server's own headers: %v, local refusals %d", upstream.makespan, upstream.refusals)
	if upstream.refusals == 0 {
		t.Errorf("with the server's own headers go-github refused nothing itself: the scenario no longer shows what the pool view is for")
	}
}

// TestGoGitHubThroughTheGateway: the same batch through the gateway (in
// process, on fake time), with go-github whose API root is the gateway's
// /github/ route, and with plain GETs.
func TestGoGitHubThroughTheGateway(t *testing.T) {
	b := issueBatch
	through := func(goGitHub bool) (batchResult, sim.Stats) {
		var res batchResult
		var st sim.Stats
		synctest.Test(t, func(t *testing.T) {
			srv := b.sim(t)
			gw, err := ratekeeper.NewGateway(ratekeeper.GatewayOptions{Client: b.clientOptions(srv, false), Providers: []string{"github"}})
			if err != nil {
				t.Fatal(err)
			}
			defer gw.Close()
			hc := &http.Client{Transport: handlerRT{gw}}
			if goGitHub {
				res = b.runGoGitHub(t, hc, "http://gateway.test/github/")
			} else {
				res = b.runPlain(hc, "http://gateway.test/github/")
			}
			st = srv.Stats()
		})
		return res, st
	}
	gh, st := through(true)
	plain, pst := through(false)
	t.Logf("go-github: %v (%.3f × ideal %v), plain: %v, local refusals %d, charged %d",
		gh.makespan, gh.makespan.Seconds()/b.ideal().Seconds(), b.ideal(), plain.makespan, gh.refusals, st.Total.Charged)
	checkBatch(t, "go-github through the gateway", b, gh, st)
	checkBatch(t, "plain GETs through the gateway", b, plain, pst)
	if r := gh.makespan.Seconds() / plain.makespan.Seconds(); r > 1.03 {
		t.Errorf("go-github took %v, %.3f × the plain client's %v; want within 3 %%", gh.makespan, r, plain.makespan)
	}
}

func checkBatch(t *testing.T, what string, b pooledBatch, res batchResult, st sim.Stats) {
	t.Helper()
	if res.refusals > 0 {
		t.Errorf("%s: go-github refused %d requests itself (first: %v)", what, res.refusals, res.firstErr)
	}
	if res.failures > 0 {
		t.Errorf("%s: %d requests failed (first: %v)", what, res.failures, res.firstErr)
	}
	if st.Total.PrimaryViolations+st.Total.SecondaryViolations > 0 {
		t.Errorf("%s: the server counted %d violations", what, st.Total.Violations)
	}
	if st.Total.Charged != int64(b.jobs()) {
		t.Errorf("%s: the server charged %d requests for %d URLs", what, st.Total.Charged, b.jobs())
	}
	if r := res.makespan.Seconds() / b.ideal().Seconds(); r > 1.05 {
		t.Errorf("%s: %v, %.3f × the ideal %v; want within 5 %%", what, res.makespan, r, b.ideal())
	}
}

// handlerRT answers requests by calling a handler in the calling
// goroutine, as a server would after reading the request from a
// connection.
type handlerRT struct{ h http.Handler }

func (rt handlerRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.RequestURI = req.URL.RequestURI()
	r.RemoteAddr = "127.0.0.1:50000"
	if r.Body == nil {
		r.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	rt.h.ServeHTTP(rec, r)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}
