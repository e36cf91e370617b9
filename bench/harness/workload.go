package harness

import (
	"fmt"
	"math"
	"time"

	"github.com/ratekeeper/ratekeeper/demo"
	"github.com/ratekeeper/ratekeeper/sim"
)

// What limits a perfect client on a workload.
const (
	// BoundQuota: Owners buckets of Limit requests per Window.
	BoundQuota = "quota"
	// BoundConcurrency: at most MaxConcurrent requests in flight, each
	// taking Latency.
	BoundConcurrency = "concurrency"
)

// Workload is a simulated API and a batch of GETs to send to it.
type Workload struct {
	// Name is short and stable (it names the rows of the results);
	// Title and About describe it for people.
	Name, Title, About string
	// API is the simulated API, mounted at apiPrefix; Tokens are the
	// client's tokens, each of its own owner.
	API    sim.APIConfig
	Tokens []string
	// Paths are the GETs, relative to the API's base URL.
	Paths []string
	// Workers is the number of goroutines sending, for every client.
	Workers int
	// Bound says what limits a perfect client (BoundQuota or
	// BoundConcurrency) and the numbers that go with it.
	Bound         string
	Owners        int
	Limit         int64
	Window        time.Duration
	MaxConcurrent int
	// Deadline stops a client that has not finished by then; its
	// unfinished jobs are reported as such.
	Deadline time.Duration
}

// apiPrefix is where every workload's API is mounted.
const apiPrefix = "/github"

// Ideal is the earliest a perfect client could finish the workload when
// it starts offset into a second: for a quota bound, demo.Ideal (each
// bucket spent in full as its window opens), less offset when it needs a
// second window, because GitHub's rolling windows reset on whole seconds
// (a window opened at 12:00:00.7 resets at 12:00:10, 9.3 s later); for a
// concurrency bound, ⌈jobs ÷ min(workers, max concurrent)⌉ rounds of the
// latency.
func (w Workload) Ideal(offset time.Duration) time.Duration {
	switch w.Bound {
	case BoundQuota:
		d, n := demo.Ideal(len(w.Paths), w.Owners, w.Limit, w.Window, w.Workers, w.API.Latency)
		if n > 1 {
			d -= offset
		}
		return d
	case BoundConcurrency:
		slots := min(w.Workers, w.MaxConcurrent)
		rounds := (len(w.Paths) + slots - 1) / slots
		return time.Duration(rounds) * w.API.Latency
	}
	return 0
}

// Capacity is how many requests a perfect client starting offset into a
// second could have had accepted t after the start: the chart's reference
// line.
func (w Workload) Capacity(t, offset time.Duration) float64 {
	n := float64(len(w.Paths))
	switch w.Bound {
	case BoundQuota:
		windows := math.Floor((t+offset).Seconds()/w.Window.Seconds()) + 1
		return math.Min(n, windows*float64(int64(w.Owners)*w.Limit))
	case BoundConcurrency:
		if w.API.Latency <= 0 {
			return n
		}
		rounds := math.Floor(t.Seconds() / w.API.Latency.Seconds())
		return math.Min(n, rounds*float64(min(w.Workers, w.MaxConcurrent)))
	}
	return n
}

// Available is the quota a run of length d starting offset into a second
// can spend on a quota-bound workload: every owner's bucket is full at the
// start and refills at every window's end. 0 for other bounds.
func (w Workload) Available(d, offset time.Duration) int64 {
	if w.Bound != BoundQuota || w.Window <= 0 {
		return 0
	}
	return int64(w.Owners) * w.Limit * (int64((d+offset)/w.Window) + 1)
}

// Scale sets the size of the workloads: Full is what BENCHMARKS.md
// reports; Quick keeps the same shapes with smaller numbers and shorter
// windows and penalties, for a smoke run of about a minute.
type Scale int

const (
	Full Scale = iota
	Quick
)

// Workloads returns the benchmark's workloads at the given scale.
func Workloads(s Scale) []Workload {
	limit, window, size, small := int64(100), 10*time.Second, 1200, 540
	penalty, concSize := 10*time.Second, 600
	if s == Quick {
		limit, window, size, small = 20, 2*time.Second, 240, 108
		penalty, concSize = 2*time.Second, 300
	}
	primary := func(name string, status, n int) Workload {
		tokens := []string{"bench-bot-a-0001", "bench-bot-b-0002", "bench-bot-c-0003"}
		api := sim.APIConfig{
			Name: "github", Dialect: sim.DialectGitHub, Prefix: apiPrefix,
			Limit: limit, Window: window, WindowMode: sim.WindowRolling,
			ExhaustedStatus: status, Latency: 20 * time.Millisecond,
			Secondary: &sim.SecondaryConfig{}, // primary quota only
		}
		for i, t := range tokens {
			api.Tokens = append(api.Tokens, sim.TokenConfig{Token: t, Owner: fmt.Sprintf("bot-%c", 'a'+i)})
		}
		w := Workload{
			Name: name, API: api, Tokens: tokens, Paths: repoPaths(n), Workers: 12,
			Bound: BoundQuota, Owners: len(tokens), Limit: limit, Window: window,
		}
		w.Deadline = 2*w.Ideal(0) + 2*window
		return w
	}
	a := primary("primary-403", 403, size)
	a.Title = fmt.Sprintf("3 tokens × %d requests per %s, %d distinct GETs, exhausted answered 403", limit, window, size)
	a.About = fmt.Sprintf("Three tokens of three bot accounts, each %d requests per %s rolling window (GitHub's "+
		"primary limit scaled from an hour to %s), %d GETs of distinct repositories, 12 workers, 20 ms latency, "+
		"no secondary limits. An empty bucket is answered 403 with remaining 0 and the reset, as GitHub does.",
		limit, window, window, size)
	b := primary("primary-429", 429, small)
	b.Title = fmt.Sprintf("as above, %d GETs, exhausted answered 429", small)
	b.About = fmt.Sprintf("The same API and tokens with %d GETs (two windows, with room for a client's own few "+
		"requests), but an empty bucket is answered 429 (GitHub documents both; GitLab, Hugging Face and proxies use 429), "+
		"still without Retry-After.", small)

	conc := sim.APIConfig{
		Name: "github", Dialect: sim.DialectGitHub, Prefix: apiPrefix,
		Limit: 5000, Window: time.Hour, Latency: 200 * time.Millisecond,
		Tokens:    []sim.TokenConfig{{Token: "bench-bot-a-0001", Owner: "bot-a"}},
		Secondary: &sim.SecondaryConfig{MaxConcurrent: 100, PointsPerMinute: 900, Penalty: penalty, RetryAfter: true, Status: 403},
	}
	c := Workload{
		Name: "secondary-concurrency", API: conc, Tokens: []string{"bench-bot-a-0001"},
		Paths: repoPaths(concSize), Workers: 120,
		Bound: BoundConcurrency, MaxConcurrent: 100,
	}
	c.Title = fmt.Sprintf("1 token, GitHub's secondary limit of 100 concurrent requests, %d GETs, 120 workers", concSize)
	c.About = fmt.Sprintf("One token with GitHub's real primary quota (5,000 per hour, never the limit here) and its "+
		"secondary limits: 100 requests in flight per user and 900 points per minute. Tripping one is answered 403 "+
		"with retry-after and starts a %s penalty (GitHub's last at least a minute) during which every request "+
		"is refused. %d GETs, 120 workers, 200 ms latency (a slow endpoint).", penalty, concSize)
	c.Deadline = 6 * penalty
	return []Workload{a, b, c}
}

// repoPaths returns n GETs of distinct repositories.
func repoPaths(n int) []string {
	paths := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("/repos/org%d/repo%d", i%8, i)
	}
	return paths
}
