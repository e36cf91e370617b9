package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/sim"
)

// costTen is a query GitHub prices at 10 points: 1 + 100 + 900 requests.
const costTen = `query($n: Int!) { viewer { repositories(first: 100) { nodes { issues(first: $n) { nodes { labels(first: 1) { totalCount } } } } } } }`

// graphqlPost builds a GraphQL request (replayable, as http.NewRequest
// makes it from a bytes.Reader).
func graphqlPost(t testing.TB, url, query string, vars map[string]any) *http.Request {
	t.Helper()
	b, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// graphqlRun is what a batch of GraphQL queries did.
type graphqlRun struct {
	elapsed, ideal time.Duration
	refusals       int64
	charged        int64
	failed         int64
}

// graphqlBatch sends n queries of cost 10 from 8 workers against a
// simulated GitHub whose graphql bucket holds 1,000 points per rolling
// window, answering after latency. The ideal: the first window's 100
// queries at once, the rest when the window resets a window after the
// first request, in rounds of 8 in flight × latency.
type graphqlBatch struct {
	n               int
	window, latency time.Duration
}

func (g graphqlBatch) run(t testing.TB) graphqlRun {
	var out graphqlRun
	api := sim.APIConfig{Dialect: "github", Latency: g.latency,
		Resources: map[string]sim.ResourceConfig{"graphql": {Limit: 1000, Window: g.window}},
		Tokens:    []sim.TokenConfig{{Token: "tok-alice-0001", Owner: "alice"}}}
	s := newSim(t, api, []string{"tok-alice-0001"}, nil)
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(g.n) {
				resp, err := s.t.RoundTrip(graphqlPost(t, s.base+"/graphql", costTen, map[string]any{"n": 9}))
				if err != nil {
					failed.Add(1)
					t.Error(err)
					continue
				}
				body := drain(resp)
				if resp.StatusCode != 200 || !strings.HasPrefix(body, `{"data"`) {
					failed.Add(1)
					t.Errorf("%d %.120s", resp.StatusCode, body)
				}
			}
		})
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	b, _ := s.srv.Stats().BucketFor("github", "alice", "graphql")
	out.refusals, out.charged, out.failed = b.PrimaryViolations+b.SecondaryViolations, b.Charged, failed.Load()
	perWindow := 1000 / 10
	windows := (g.n + perWindow - 1) / perWindow
	last := g.n - (windows-1)*perWindow
	out.ideal = time.Duration(windows-1)*g.window + time.Duration((last+7)/8)*g.latency
	return out
}

// GraphQL queries reserve their points: 200 queries of cost 10 on a
// bucket of 1,000 points a minute (fake time) are never refused, and end
// within 1.1 × the ideal.
func TestGraphQLPacedByPoints(t *testing.T) {
	var got graphqlRun
	synctest.Test(t, func(t *testing.T) {
		got = graphqlBatch{n: 200, window: time.Minute, latency: 50 * time.Millisecond}.run(t)
	})
	t.Logf("%v against an ideal of %v (%.3f×), %d refusals, %d points", got.elapsed, got.ideal, float64(got.elapsed)/float64(got.ideal), got.refusals, got.charged)
	if got.refusals != 0 || got.failed != 0 || got.charged != 2000 {
		t.Errorf("%d refusals, %d failed, %d points charged; want 0, 0 and 2,000", got.refusals, got.failed, got.charged)
	}
	if limit := got.ideal * 11 / 10; got.elapsed > limit {
		t.Errorf("elapsed %v, want at most 1.1 × the ideal %v", got.elapsed, got.ideal)
	}
}

// BenchmarkGraphQLPoints: the same 200 queries of cost 10 from 8
// workers, in real time with the time scale divided by 10 (1,000 points
// per 6 s, 5 ms latency). TestGraphQLPacedByPoints runs the minute-long
// original on fake time (-v prints its numbers).
//
//	go test -run '^$' -bench GraphQLPoints -benchtime 1x ./transport/
func BenchmarkGraphQLPoints(b *testing.B) {
	for range b.N {
		got := graphqlBatch{n: 200, window: 6 * time.Second, latency: 5 * time.Millisecond}.run(b)
		b.ReportMetric(got.elapsed.Seconds(), "makespan-s")
		b.ReportMetric(float64(got.elapsed)/float64(got.ideal), "x-ideal")
		b.ReportMetric(float64(got.refusals), "refusals")
		b.ReportMetric(float64(got.charged), "points")
	}
}

// The cost of a shape is learnt from answers: the rateLimit { cost } a
// query asks for, else the rise of x-ratelimit-used across a query that
// was alone in flight; the next query of the shape reserves it.
func TestGraphQLCostLearntPerShape(t *testing.T) {
	var used atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		cost := int64(7) // what this server charges, whatever the formula says
		u := used.Add(cost)
		w.Header().Set("X-Ratelimit-Limit", "5000")
		w.Header().Set("X-Ratelimit-Used", fmt.Sprint(u))
		w.Header().Set("X-Ratelimit-Remaining", fmt.Sprint(5000-u))
		w.Header().Set("X-Ratelimit-Reset", fmt.Sprint(time.Now().Add(time.Hour).Unix()))
		w.Header().Set("X-Ratelimit-Resource", "graphql")
		if bytes.Contains(body, []byte("rateLimit")) {
			fmt.Fprintf(w, `{"data":{"rateLimit":{"cost":%d}}}`, cost)
			return
		}
		io.WriteString(w, `{"data":{"viewer":{"login":"a"}}}`)
	})
	tr := handlerTransport(t, h, nil)
	p := tr.reg.Providers()[0]
	units := func(query string) int {
		x := tr.newExchange(graphqlPost(t, p.GraphQLURL().String(), query, nil), tr.laneFor(p), route{})
		defer x.close()
		x.classify()
		return x.class.Units
	}
	send := func(query string) {
		resp, err := tr.RoundTrip(graphqlPost(t, p.GraphQLURL().String(), query, nil))
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
	}
	const stated, alone = `{ viewer { login } rateLimit { cost } }`, `{ viewer { login } }`
	if units(stated) != 1 || units(alone) != 1 {
		t.Fatalf("before any answer: %d and %d, want the formula's 1", units(stated), units(alone))
	}
	send(stated)
	if got := units(stated); got != 7 {
		t.Errorf("after an answer stating its cost: %d, want 7", got)
	}
	// The first answer of a bucket tells no rise (nothing was known
	// before); the second does.
	send(alone)
	send(alone)
	if got := units(alone); got != 7 {
		t.Errorf("after two answers alone in flight: %d, want 7", got)
	}
	b, _ := tr.state.Buckets(t.Context())
	for id, bk := range b {
		if id.Resource == provider.ResourceGraphQL && bk.Remaining != 5000-21 {
			t.Errorf("graphql bucket: remaining %d, want %d", bk.Remaining, 5000-21)
		}
	}
}

// A cost learnt for a query sent with small sizes is not the cost of the
// same text sent with large ones (or left to its defaults): the formula's
// price is part of the shape.
func TestGraphQLCostLearntPerPrice(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Ratelimit-Limit", "5000")
		w.Header().Set("X-Ratelimit-Remaining", "4000")
		w.Header().Set("X-Ratelimit-Reset", fmt.Sprint(time.Now().Add(time.Hour).Unix()))
		w.Header().Set("X-Ratelimit-Resource", "graphql")
		io.WriteString(w, `{"data":{"rateLimit":{"cost":1}}}`)
	})
	tr := handlerTransport(t, h, nil)
	p := tr.reg.Providers()[0]
	const q = `query($n: Int = 100) { viewer { repositories(first: $n) { nodes { issues(first: 30) { nodes { labels(first: 1) { totalCount } } } } } } rateLimit { cost } }`
	units := func(vars map[string]any) int {
		x := tr.newExchange(graphqlPost(t, p.GraphQLURL().String(), q, vars), tr.laneFor(p), route{})
		defer x.close()
		x.classify()
		return x.class.Units
	}
	resp, err := tr.RoundTrip(graphqlPost(t, p.GraphQLURL().String(), q, map[string]any{"n": 1}))
	if err != nil {
		t.Fatal(err)
	}
	drain(resp)
	if got := units(map[string]any{"n": 1}); got != 1 {
		t.Errorf("the query sent with n = 1: %d, want the learnt 1", got)
	}
	if got := units(nil); got != 31 {
		t.Errorf("the query left to its default n = 100: %d, want the formula's 31 (1 + 100 + 3,000 requests)", got)
	}
}

// Answers of queries that overlapped teach nothing: the rise of used
// belongs to more than one of them.
func TestGraphQLCostNotLearntFromOverlaps(t *testing.T) {
	var c graphqlCosts
	id := BucketID{Provider: "github x", Owner: "a", Resource: "graphql"}
	reset := time.Unix(1_800_000_000, 0)
	reading := func(used int64) *headers.Reading {
		return &headers.Reading{Status: 200, Limit: 5000, Remaining: 5000 - used, Used: used, Reset: reset}
	}
	c.answered(id, "k", c.sent(id), reading(10), 0) // a first answer: used known from now on
	a, b := c.sent(id), c.sent(id)
	if got := c.answered(id, "k", a, reading(20), 0); got != 0 {
		t.Errorf("learnt %d from a query with another in flight", got)
	}
	if got := c.answered(id, "k", b, reading(30), 0); got != 0 {
		t.Errorf("learnt %d from a query sent while another was in flight", got)
	}
	if got := c.answered(id, "k", c.sent(id), reading(45), 0); got != 15 {
		t.Errorf("learnt %d from a query alone, want 15", got)
	}
	if got := c.answered(id, "k", c.sent(id), &headers.Reading{Status: 200, Limit: 5000, Remaining: 4990, Used: 10, Reset: reset.Add(time.Hour)}, 0); got != 0 {
		t.Errorf("learnt %d across a new window", got)
	}
}

// Answers that arrive out of order teach nothing wrong: two queries in
// flight (6 and 36 points), the later-sent one's answer (used 52) first,
// the earlier one's (used 16) a moment later; the next query alone in
// flight costs the rise from the highest used of the window, not from the
// answer that happened to come last.
func TestGraphQLCostLearntAcrossReversedAnswers(t *testing.T) {
	var c graphqlCosts
	id := BucketID{Provider: "github x", Owner: "a", Resource: "graphql"}
	reset := time.Unix(1_800_000_000, 0)
	reading := func(used int64, reset time.Time) *headers.Reading {
		return &headers.Reading{Status: 200, Limit: 5000, Remaining: 5000 - used, Used: used, Reset: reset}
	}
	c.answered(id, "k", c.sent(id), reading(10, reset), 0)
	a, b := c.sent(id), c.sent(id)
	c.answered(id, "k", b, reading(52, reset), 0)
	c.answered(id, "k", a, reading(16, reset), 0)
	if got := c.answered(id, "k", c.sent(id), reading(59, reset), 0); got != 7 {
		t.Errorf("learnt %d from a query alone after reversed answers, want 7", got)
	}
	// A straggler of the window before tells nothing either; the next
	// window's first answer starts afresh.
	next := reset.Add(time.Hour)
	c.answered(id, "k", c.sent(id), reading(3, next), 0)
	c.answered(id, "k", c.sent(id), reading(4990, reset), 0)
	if got := c.answered(id, "k", c.sent(id), reading(8, next), 0); got != 5 {
		t.Errorf("learnt %d after a straggler of the window before, want 5", got)
	}
}

// A 200 with RATE_LIMITED is a refusal: the query is sent again once the
// bucket resets, and the caller gets the answer.
func TestGraphQLRateLimitedIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		reset := time.Now().Add(30 * time.Second)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Ratelimit-Limit", "5000")
			w.Header().Set("X-Ratelimit-Reset", fmt.Sprint(reset.Unix()))
			w.Header().Set("X-Ratelimit-Resource", "graphql")
			if calls.Add(1) == 1 {
				w.Header().Set("X-Ratelimit-Remaining", "3")
				io.WriteString(w, `{"errors":[{"type":"RATE_LIMITED","code":"graphql_rate_limit","message":"API rate limit already exceeded for user ID 1."}]}`)
				return
			}
			w.Header().Set("X-Ratelimit-Remaining", "4990")
			io.WriteString(w, `{"data":{"viewer":{"login":"a"}}}`)
		})
		tr := handlerTransport(t, h, nil)
		start := time.Now()
		resp, err := tr.RoundTrip(graphqlPost(t, "http://api.test/graphql", `{ viewer { login } }`, nil))
		if err != nil {
			t.Fatal(err)
		}
		if body := drain(resp); !strings.Contains(body, `"login":"a"`) || calls.Load() != 2 || time.Since(start) < 30*time.Second {
			t.Fatalf("after %v, %d calls: %s", time.Since(start), calls.Load(), body)
		}
	})
}

// A caller's cost in points, named or as a number alone, is what a
// GraphQL query reserves.
func TestGraphQLCallerCostInPoints(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"data":{"viewer":{"login":"a"}}}`)
	})
	tr := handlerTransport(t, h, nil)
	p := tr.reg.Providers()[0]
	units := func(ctx context.Context, header string) int {
		req := graphqlPost(t, p.GraphQLURL().String(), `{ viewer { login } }`, nil).WithContext(ctx)
		if header != "" {
			req.Header.Set(CostHeader, header)
		}
		x := tr.newExchange(req, tr.laneFor(p), route{})
		defer x.close()
		x.classify()
		return x.class.Units
	}
	if got := units(t.Context(), ""); got != 1 {
		t.Errorf("no cost given: %d, want the formula's 1", got)
	}
	if got := units(WithCosts(t.Context(), Costs{"points": 51}), ""); got != 51 {
		t.Errorf("WithCosts points 51: %d", got)
	}
	if got := units(WithCost(t.Context(), 12), ""); got != 12 {
		t.Errorf("WithCost 12: %d", got)
	}
	if got := units(t.Context(), "points=30"); got != 30 {
		t.Errorf("header points=30: %d", got)
	}
}
