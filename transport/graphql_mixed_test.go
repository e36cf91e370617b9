package transport

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// defaultsQuery is a query GitHub prices at cost points with its sizes
// in variable defaults and no variables sent: 1 + r + r × i requests.
func defaultsQuery(cost int) string {
	r, i := 100, cost-1 // 1 + 100 + 100 × (cost − 1) = 100 × cost + 1
	if cost <= 1 {
		r, i = 10, 1 // 21 requests
	}
	return fmt.Sprintf(`query($r: Int = %d, $i: Int = %d) { viewer { repositories(first: $r) { nodes { issues(first: $i) { nodes { labels(first: 1) { totalCount } } } } } } }`, r, i)
}

// mixedGraphQL sends n queries of costs drawn from 1–40 (seeded), their
// sizes in variable defaults, from workers goroutines through perUser
// tokens of each of two users, against a simulated GitHub whose graphql
// buckets hold 1,000 points per rolling window, answering after latency.
type mixedGraphQL struct {
	n, workers, perUser int
	window, latency     time.Duration
}

// mixedRun is what a mixedGraphQL batch did. windows is the points sent
// over the 2 × 1,000 the two buckets hold a window. Each bucket's first
// window is full at the start, so no client can end before ⌈windows⌉ − 1
// windows have passed, plus one latency for the last answer: that is
// ideal.
type mixedRun struct {
	windows         float64
	elapsed, ideal  time.Duration
	points, charged int64
	rateLimited     int64
	failed          int64
}

func (g mixedGraphQL) run(t testing.TB) mixedRun {
	var out mixedRun
	api := sim.APIConfig{Dialect: "github", Latency: g.latency,
		Resources: map[string]sim.ResourceConfig{"graphql": {Limit: 1000, Window: g.window}}}
	var names []string
	for k := range max(g.perUser, 1) {
		for _, user := range []string{"alice", "bob"} {
			name := fmt.Sprintf("tok-%s-%04d", user, k+1)
			api.Tokens = append(api.Tokens, sim.TokenConfig{Token: name, Owner: user})
			names = append(names, name)
		}
	}
	s := newSim(t, api, names, nil)
	rng := rand.New(rand.NewPCG(7, 300))
	queries := make([]string, g.n)
	for k := range queries {
		cost := 1 + rng.IntN(40)
		queries[k] = defaultsQuery(cost)
		out.points += int64(cost)
	}
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range g.workers {
		wg.Go(func() {
			for k := next.Add(1) - 1; k < int64(g.n); k = next.Add(1) - 1 {
				resp, err := s.t.RoundTrip(graphqlPost(t, s.base+"/graphql", queries[k], nil))
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
	out.failed = failed.Load()
	for _, owner := range []string{"alice", "bob"} {
		b, _ := s.srv.Stats().BucketFor("github", owner, "graphql")
		out.rateLimited += b.PrimaryViolations
		out.charged += b.Charged
	}
	out.windows = float64(out.points) / 2000
	out.ideal = time.Duration(math.Ceil(out.windows)-1)*g.window + g.latency
	return out
}

// 300 queries of mixed costs whose sizes come from variable defaults,
// over two users' buckets of 1,000 points a minute (fake time), through
// one token of each user and through two: each query is priced as the
// server charges it and tokens of one user are paced as one bucket, so
// none is refused, every point is charged once, and the batch ends within
// 1.05 × the ideal (see mixedRun).
func TestGraphQLMixedCostsFromDefaults(t *testing.T) {
	for _, perUser := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d tokens per user", perUser), func(t *testing.T) {
			var got mixedRun
			synctest.Test(t, func(t *testing.T) {
				got = mixedGraphQL{n: 300, workers: 16, perUser: perUser, window: time.Minute, latency: 50 * time.Millisecond}.run(t)
			})
			t.Logf("%v against an ideal of %v (%.3f×; %.3f windows of points), %d RATE_LIMITED, %d points sent, %d charged",
				got.elapsed, got.ideal, float64(got.elapsed)/float64(got.ideal), got.windows, got.rateLimited, got.points, got.charged)
			if got.rateLimited != 0 || got.failed != 0 || got.charged != got.points {
				t.Errorf("%d RATE_LIMITED, %d failed, %d points charged; want 0, 0 and %d", got.rateLimited, got.failed, got.charged, got.points)
			}
			if limit := got.ideal * 105 / 100; got.elapsed > limit {
				t.Errorf("elapsed %v, want at most 1.05 × the ideal %v", got.elapsed, got.ideal)
			}
		})
	}
}

// BenchmarkGraphQLMixedCosts: the same 300 queries in real time, two
// users' buckets of 1,000 points per 10 s, 5 ms latency, 16 workers,
// through one and two tokens per user. The simulator's windows start on
// a whole second, so a run can end up to a second per window before the
// ideal.
//
//	go test -run '^$' -bench GraphQLMixedCosts -benchtime 1x -count 3 ./transport/
func BenchmarkGraphQLMixedCosts(b *testing.B) {
	for _, perUser := range []int{1, 2} {
		b.Run(fmt.Sprintf("tokens-per-user=%d", perUser), func(b *testing.B) {
			for range b.N {
				got := mixedGraphQL{n: 300, workers: 16, perUser: perUser, window: 10 * time.Second, latency: 5 * time.Millisecond}.run(b)
				b.ReportMetric(got.elapsed.Seconds(), "makespan-s")
				b.ReportMetric(got.ideal.Seconds(), "ideal-s")
				b.ReportMetric(got.windows, "windows-of-points")
				b.ReportMetric(float64(got.elapsed)/float64(got.ideal), "x-ideal")
				b.ReportMetric(float64(got.rateLimited), "rate-limited")
				b.ReportMetric(float64(got.points), "points")
			}
		})
	}
}

// Queries of points go where they fit tightest: two users' buckets of
// 100 points a window, queries of 30, 30, 30, 30 and 60 sent one after
// the other. Taking turns would leave each bucket 40 and the 60 a whole
// window to wait; best fit puts the third and fourth 30 in the bucket
// already spent from, and the 60 goes at once into the other.
func TestGraphQLQueriesPackIntoBuckets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = time.Minute
		api := sim.APIConfig{Dialect: "github", Latency: 50 * time.Millisecond,
			Resources: map[string]sim.ResourceConfig{"graphql": {Limit: 100, Window: window}},
			Tokens:    []sim.TokenConfig{{Token: "tok-alice", Owner: "alice"}, {Token: "tok-bob", Owner: "bob"}}}
		s := newSim(t, api, []string{"tok-alice", "tok-bob"}, nil)
		start := time.Now()
		for _, cost := range []int{30, 30, 30, 30, 60} {
			resp, err := s.t.RoundTrip(graphqlPost(t, s.base+"/graphql", defaultsQuery(cost), nil))
			if err != nil {
				t.Fatal(err)
			}
			if body := drain(resp); resp.StatusCode != 200 || !strings.HasPrefix(body, `{"data"`) {
				t.Fatalf("%d %.120s", resp.StatusCode, body)
			}
		}
		elapsed := time.Since(start)
		var used []int64
		for _, owner := range []string{"alice", "bob"} {
			b, _ := s.srv.Stats().BucketFor("github", owner, "graphql")
			if b.PrimaryViolations != 0 {
				t.Errorf("%s: %d RATE_LIMITED", owner, b.PrimaryViolations)
			}
			used = append(used, b.Charged)
		}
		if elapsed >= window {
			t.Errorf("180 points of two buckets of 100 took %v (points charged %v), want less than a window (%v)", elapsed, used, window)
		}
	})
}
