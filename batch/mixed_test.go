package batch_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/batch"
	"github.com/ratekeeper/ratekeeper/sim"
)

// mixed is the workload of a program that mixes REST and GraphQL for one
// GitHub user whose buckets are of similar size per window: REST 200
// requests and GraphQL 300 points per window; 400 REST GETs and 120
// queries of 2 to 9 points (540 in all), the queries denser early (80 of
// the first 160 requests). Each pool needs two windows. A pool of workers
// over RoundTrip ends up with every worker waiting inside the transport
// for points while the REST quota stands idle, and needs a third.
type mixed struct {
	window, latency time.Duration
	inFlight        int
}

const (
	mixedREST, mixedQueries = 400, 120
	restLimit, pointsLimit  = 200, 300
)

// costs are the queries' points in turn: 540 over 120 queries.
var costs = [...]int{2, 9, 3, 4, 2, 5, 7, 3, 6, 4}

func costOf(i int) int { return costs[i%len(costs)] }

// requests lists the workload in the order a program would submit it.
func (m mixed) requests(t testing.TB, base string) []*http.Request {
	var out []*http.Request
	r, q := 0, 0
	rest := func(n int) {
		for ; n > 0 && r < mixedREST; n-- {
			out = append(out, get(t, fmt.Sprintf("%s/repos/o/r%d", base, r)))
			r++
		}
	}
	query := func() {
		if q < mixedQueries {
			out = append(out, graphqlPost(t, base+"/graphql", map[string]any{"n": costOf(q) - 1}))
			q++
		}
	}
	for range 80 {
		query()
		rest(1)
	}
	for range 40 {
		rest(8)
		query()
	}
	rest(mixedREST)
	return out
}

// ideal is the earliest a perfect client could finish one pool's work of
// units at limit per window, starting at start, with m.inFlight in
// flight: each window spent in full as it opens, the last window's
// requests (of about units per request each) taking rounds of m.latency.
// GitHub's rolling windows reset on whole seconds: the first ends a window
// after the start's whole second, each later one a second later than a
// window (a request at the reset second may count in the old window).
func (m mixed) ideal(start time.Time, units, limit, requests int) time.Duration {
	windows := (units + limit - 1) / limit
	lastUnits := units - (windows-1)*limit
	lastRequests := (lastUnits*requests + units - 1) / units
	tail := time.Duration((lastRequests+m.inFlight-1)/m.inFlight) * m.latency
	if windows == 1 {
		return tail
	}
	first := m.window - time.Duration(start.UnixNano()%int64(time.Second))
	return first + time.Duration(windows-2)*(m.window+time.Second) + tail
}

// mixedRun is what one run of the workload did.
type mixedRun struct {
	elapsed, ideal time.Duration
	refusals       int64
	failed         int64
	points, rest   int64
}

func (m mixed) api(t testing.TB) *simAPI {
	return newSimAPI(t, sim.APIConfig{Dialect: "github", Limit: restLimit, Window: m.window, Latency: m.latency,
		Resources: map[string]sim.ResourceConfig{"graphql": {Limit: pointsLimit, Window: m.window}},
		Tokens:    []sim.TokenConfig{{Token: "tok-mixed-1", Owner: "alice"}}}, "tok-mixed-1")
}

// check counts a failed answer.
func check(t testing.TB, failed *atomic.Int64, resp *http.Response, err error) {
	if err != nil {
		failed.Add(1)
		t.Error(err)
		return
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || (strings.HasSuffix(resp.Request.URL.Path, "/graphql") && !strings.HasPrefix(string(b), `{"data"`)) {
		failed.Add(1)
		t.Errorf("%s: %d %.120s", resp.Request.URL.Path, resp.StatusCode, b)
	}
}

// runBatch sends the workload through a Batch.
func (m mixed) runBatch(t testing.TB) mixedRun {
	api := m.api(t)
	var failed atomic.Int64
	b := batch.New(api.t, batch.Options{InFlight: m.inFlight, OnResult: func(r batch.Result) {
		check(t, &failed, r.Response, r.Err)
	}})
	for _, req := range m.requests(t, api.base) {
		if err := b.Add(req); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := b.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m.result(api, start, failed.Load())
}

// runPool sends the workload from m.inFlight goroutines over RoundTrip,
// as a program without the batch API would.
func (m mixed) runPool(t testing.TB) mixedRun {
	api := m.api(t)
	reqs := m.requests(t, api.base)
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range m.inFlight {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(reqs)); i = next.Add(1) - 1 {
				resp, err := api.t.RoundTrip(reqs[i])
				check(t, &failed, resp, err)
				if resp != nil {
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	return m.result(api, start, failed.Load())
}

func (m mixed) result(api *simAPI, start time.Time, failed int64) mixedRun {
	out := mixedRun{elapsed: time.Since(start), failed: failed}
	for _, res := range []string{"core", "graphql"} {
		st, _ := api.srv.Stats().BucketFor("github", "alice", res)
		out.refusals += st.PrimaryViolations + st.SecondaryViolations
		if res == "core" {
			out.rest = st.Charged
		} else {
			out.points = st.Charged
		}
	}
	points := 0
	for i := range mixedQueries {
		points += costOf(i)
	}
	out.ideal = max(m.ideal(start, mixedREST, restLimit, mixedREST), m.ideal(start, points, pointsLimit, mixedQueries))
	return out
}

func (r mixedRun) String() string {
	return fmt.Sprintf("%v against an ideal of %v (%.3f×), %d refusals, %d failed, %d REST and %d points charged",
		r.elapsed.Round(time.Millisecond), r.ideal.Round(time.Millisecond), float64(r.elapsed)/float64(r.ideal), r.refusals, r.failed, r.rest, r.points)
}

// The batch finishes the mixed workload within 1.1 × the larger of the
// two pools' ideals, without a refusal, where a worker pool over
// RoundTrip takes about twice as long (fake time; -v prints both).
func TestMixedRESTAndGraphQL(t *testing.T) {
	m := mixed{window: 10 * time.Second, latency: 50 * time.Millisecond, inFlight: 8}
	var got, pool mixedRun
	synctest.Test(t, func(t *testing.T) { got = m.runBatch(t) })
	synctest.Test(t, func(t *testing.T) { pool = m.runPool(t) })
	t.Logf("batch: %v", got)
	t.Logf("pool:  %v", pool)
	if got.refusals != 0 || got.failed != 0 || got.rest != mixedREST || got.points != 540 {
		t.Errorf("batch: %v; want no refusal or failure, 400 REST requests and 540 points", got)
	}
	if limit := got.ideal * 11 / 10; got.elapsed > limit {
		t.Errorf("batch: %v; want at most 1.1 × the ideal", got)
	}
}

// BenchmarkMixedRESTAndGraphQL runs the mixed workload in real time
// (10 s windows, 20 ms latency), through a Batch of 8 in flight and
// through a pool of 8 goroutines over RoundTrip.
//
//	go test -run '^$' -bench MixedRESTAndGraphQL -benchtime 1x ./batch/
func BenchmarkMixedRESTAndGraphQL(b *testing.B) {
	m := mixed{window: 10 * time.Second, latency: 20 * time.Millisecond, inFlight: 8}
	for _, c := range []struct {
		name string
		run  func(testing.TB) mixedRun
	}{{"batch", m.runBatch}, {"pool", m.runPool}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				got := c.run(b)
				b.ReportMetric(got.elapsed.Seconds(), "makespan-s")
				b.ReportMetric(float64(got.elapsed)/float64(got.ideal), "x-ideal")
				b.ReportMetric(float64(got.refusals), "refusals")
			}
		})
	}
}
