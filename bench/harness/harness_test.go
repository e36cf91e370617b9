package harness

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// tiny is a quota-bound workload small enough to run every client on fake
// time: 2 tokens × 5 requests per 2 s, 24 GETs.
func tiny(status int) Workload {
	api := sim.APIConfig{
		Name: "github", Dialect: sim.DialectGitHub, Prefix: apiPrefix,
		Limit: 5, Window: 2 * time.Second, ExhaustedStatus: status, Latency: 10 * time.Millisecond,
		Secondary: &sim.SecondaryConfig{},
		Tokens:    []sim.TokenConfig{{Token: "test-tok-a", Owner: "a"}, {Token: "test-tok-b", Owner: "b"}},
	}
	return Workload{
		Name: "tiny", API: api, Tokens: []string{"test-tok-a", "test-tok-b"}, Paths: repoPaths(24), Workers: 4,
		Bound: BoundQuota, Owners: 2, Limit: 5, Window: 2 * time.Second, Deadline: time.Minute,
	}
}

func client(t *testing.T, name string) Client {
	t.Helper()
	for _, c := range Clients() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no client %q", name)
	return Client{}
}

// checkCounts asserts what holds for every run: the wire and the
// simulator agree, and every job is accounted for.
func checkCounts(t *testing.T, r Result) {
	t.Helper()
	if r.Done+r.Failed+r.Unfinished != r.Jobs {
		t.Errorf("%s: %d+%d+%d jobs, want %d", r.Client, r.Done, r.Failed, r.Unfinished, r.Jobs)
	}
	// At a deadline, answers in flight reach the simulator but not the
	// client, whose requests were cancelled.
	if wire := int64(len(r.Accepts)); wire != r.Accepted && (r.Unfinished == 0 || wire > r.Accepted) {
		t.Errorf("%s: the wire saw %d accepted, the simulator %d", r.Client, len(r.Accepts), r.Accepted)
	}
	if int64(len(r.Refusals)) != r.Violations() || r.Requests != r.Accepted+r.Violations() {
		t.Errorf("%s: %d refusals on the wire, %d violations, %d requests, %d accepted", r.Client, len(r.Refusals), r.Violations(), r.Requests, r.Accepted)
	}
}

func TestClientsOnPrimaryLimits(t *testing.T) {
	for _, c := range []struct {
		client     string
		status     int
		done       int
		violations bool // whether the client must cause some
	}{
		{"ratekeeper greedy", 403, 24, false},
		{"ratekeeper spread", 403, 24, false},
		{"ratekeeper adaptive", 429, 24, false},
		{"net/http", 403, 24, true},
		{"go-github-ratelimit", 403, 24, true},
		// 403 is not retried: the first window's 10 jobs only.
		{"go-retryablehttp", 403, 10, true},
		// 429 is, with backoff (1+2+4+8 s > one 2 s window).
		{"go-retryablehttp", 429, 24, true},
	} {
		t.Run(c.client+" "+http.StatusText(c.status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, err := Run(context.Background(), tiny(c.status), client(t, c.client), Options{InProcess: true})
				if err != nil {
					t.Fatal(err)
				}
				checkCounts(t, r)
				if r.Done != c.done || r.Unfinished != 0 {
					t.Errorf("done %d, unfinished %d (first error %q); want %d done", r.Done, r.Unfinished, r.FirstError, c.done)
				}
				if (r.Violations() > 0) != c.violations || r.SecondaryViolations != 0 {
					t.Errorf("violations %d/%d", r.PrimaryViolations, r.SecondaryViolations)
				}
				// 24 requests at 10 per window need 3 windows: nobody
				// finishing them all beats 2 windows less the offset.
				if r.Done == 24 && r.Makespan < r.Ideal {
					t.Errorf("makespan %v below the ideal %v", r.Makespan, r.Ideal)
				}
				if r.Done == 24 && r.Utilisation() > 1 {
					t.Errorf("utilisation %.2f above 1", r.Utilisation())
				}
				if strings.HasPrefix(c.client, "ratekeeper") && r.Overhead() != 0 {
					t.Errorf("ratekeeper's extra requests: %d, want none (owners are learnt from the answers)", r.Overhead())
				}
			})
		})
	}
}

func TestClientsOnSecondaryConcurrency(t *testing.T) {
	w := Workload{
		Name: "conc", Tokens: []string{"test-tok-a"}, Paths: repoPaths(90), Workers: 40,
		Bound: BoundConcurrency, MaxConcurrent: 30, Deadline: 30 * time.Second,
		API: sim.APIConfig{
			Name: "github", Dialect: sim.DialectGitHub, Prefix: apiPrefix, Limit: 5000, Window: time.Hour,
			Latency: 100 * time.Millisecond, Tokens: []sim.TokenConfig{{Token: "test-tok-a", Owner: "a"}},
			Secondary: &sim.SecondaryConfig{MaxConcurrent: 30, Penalty: 2 * time.Second, RetryAfter: true, Status: 403},
		},
	}
	if got := w.Ideal(0); got != 300*time.Millisecond {
		t.Fatalf("ideal %v, want 3 rounds of 100 ms", got)
	}
	for _, c := range []struct {
		client    string
		done      int
		violates  bool
		unfinshed bool
		// atMost: done may fall short of done. The 40 first requests
		// arrive at one instant in an order the scheduler picks; when a
		// refused one is counted before some of the first 30, its
		// penalty refuses those too.
		atMost bool
	}{
		{"ratekeeper greedy", 90, false, false, false}, // 20 in flight, under 30
		{"net/http", 90, true, false, false},
		{"go-github-ratelimit", 90, true, false, false},
		{"go-retryablehttp", 30, true, false, true}, // secondary 403s are not retried
		// Spread paces 5,000 an hour over the hour: 90 GETs take minutes.
		{"ratekeeper spread", 0, false, true, false},
	} {
		t.Run(c.client, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, err := Run(context.Background(), w, client(t, c.client), Options{InProcess: true})
				if err != nil {
					t.Fatal(err)
				}
				checkCounts(t, r)
				if (r.SecondaryViolations > 0) != c.violates || (r.Unfinished > 0) != c.unfinshed {
					t.Errorf("secondary violations %d, unfinished %d", r.SecondaryViolations, r.Unfinished)
				}
				if !c.unfinshed && (r.Done > c.done || r.Done < c.done && !c.atMost || r.Done == 0) {
					t.Errorf("done %d, want %d (first error %q)", r.Done, c.done, r.FirstError)
				}
				if c.client == "ratekeeper greedy" && r.MaxInFlight > 20 {
					t.Errorf("ratekeeper had %d in flight", r.MaxInFlight)
				}
			})
		})
	}
}

func TestIdealAndCapacity(t *testing.T) {
	w := Workloads(Full)[0]
	if w.Name != "primary-403" || len(w.Paths) != 1200 {
		t.Fatalf("%s with %d GETs", w.Name, len(w.Paths))
	}
	// 4 windows of 300; the last 300 at 12 in flight × 20 ms.
	if got := w.Ideal(0); got != 30*time.Second+500*time.Millisecond {
		t.Errorf("ideal %v", got)
	}
	if got := w.Ideal(700 * time.Millisecond); got != 29*time.Second+800*time.Millisecond {
		t.Errorf("ideal with a 0.7 s offset %v", got)
	}
	for _, c := range []struct {
		t, off time.Duration
		want   float64
	}{{0, 0, 300}, {9 * time.Second, 0, 300}, {9500 * time.Millisecond, 600 * time.Millisecond, 600}, {time.Hour, 0, 1200}} {
		if got := w.Capacity(c.t, c.off); got != c.want {
			t.Errorf("capacity(%v, %v) = %v, want %v", c.t, c.off, got, c.want)
		}
	}
	if got := w.Available(31*time.Second, 0); got != 1200 {
		t.Errorf("available %d", got)
	}
	conc := Workloads(Full)[2]
	if conc.Available(time.Minute, 0) != 0 || conc.Ideal(0) != 6*200*time.Millisecond {
		t.Errorf("concurrency workload: available %d, ideal %v", conc.Available(time.Minute, 0), conc.Ideal(0))
	}
	if got := []int{share(12, 3, 0), share(13, 3, 0), share(13, 3, 2)}; got[0] != 4 || got[1] != 5 || got[2] != 4 {
		t.Errorf("share %v", got)
	}
}

func TestRefusalWait(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	for _, c := range []struct {
		status int
		header http.Header
		wait   time.Duration
		ok     bool
	}{
		{403, h("Retry-After", "7"), 7 * time.Second, true},
		{429, h("X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "1700000012"), 12 * time.Second, true},
		{403, h("X-Ratelimit-Remaining", "3"), 0, false}, // a permission 403
		{404, h("Retry-After", "7"), 0, false},
	} {
		wait, ok := refusalWait(&http.Response{StatusCode: c.status, Header: c.header}, now)
		if wait != c.wait || ok != c.ok {
			t.Errorf("%d %v: %v %v, want %v %v", c.status, c.header, wait, ok, c.wait, c.ok)
		}
	}
}
