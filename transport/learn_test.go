package transport

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/sim"
)

// runPaths sends n GETs (path format with one %d) with `workers`
// goroutines and returns how many got each status (-1: an error).
func (s *simSetup) runPaths(t *testing.T, format string, n, workers int) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[int]int{}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				req, _ := http.NewRequest(http.MethodGet, s.base+fmt.Sprintf(format, i), nil)
				resp, err := s.t.RoundTrip(req)
				mu.Lock()
				if err != nil {
					codes[-1]++
				} else {
					codes[resp.StatusCode]++
				}
				mu.Unlock()
				if err == nil {
					drain(resp)
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return codes
}

// bucketsOf groups the pool's credentials by bucket, as "1,3 2 4".
func bucketsOf(t *testing.T, tr *Transport, name string) string {
	t.Helper()
	pool, err := tr.Pool(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range pool.Buckets() {
		var ids []string
		for _, c := range g {
			ids = append(ids, fmt.Sprint(c.Index()))
		}
		out = append(out, strings.Join(ids, ","))
	}
	return strings.Join(out, " ")
}

// Owners are learnt from the counters of the answers to real requests: a
// batch of N distinct GETs charges exactly N, shared tokens are paced as
// one bucket (no refusal), and distinct ones keep their own quota.
func TestOwnersLearntFromAnswersCostNothing(t *testing.T) {
	cases := []struct {
		name, dialect, path string
		window              time.Duration
	}{
		{"github rolling windows", "github", "/repos/o/r%d", 10 * time.Second},
		{"gitlab fixed windows", "gitlab", "/projects/%d", 10 * time.Second},
		{"hugging face fixed windows, no used count", "huggingface", "/api/models/o/m%d", 10 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tokens := []sim.TokenConfig{{Token: "tok-a1", Owner: "alice"}, {Token: "tok-b1", Owner: "bob"},
					{Token: "tok-a2", Owner: "alice"}, {Token: "tok-c1", Owner: "carol"}, {Token: "tok-b2", Owner: "bob"}}
				s := newSim(t, sim.APIConfig{Dialect: c.dialect, Limit: 40, Window: c.window, Tokens: tokens},
					[]string{"tok-a1", "tok-b1", "tok-a2", "tok-c1", "tok-b2"}, nil)
				const n = 200
				codes := s.runPaths(t, c.path, n, 8)
				if codes[-1] != 0 || codes[http.StatusTooManyRequests] != 0 || codes[http.StatusForbidden] != 0 {
					t.Fatalf("statuses %v", codes)
				}
				st := s.srv.Stats().Total
				if st.Violations != 0 {
					t.Fatalf("%d violations: tokens of one owner were paced as separate buckets", st.Violations)
				}
				if st.Charged != n || st.Requests != n {
					t.Fatalf("%d requests charged %d for %d GETs: learning the owners cost requests", st.Requests, st.Charged, n)
				}
				if got := bucketsOf(t, s.t, c.dialect); got != "1,3 2,5 4" {
					t.Fatalf("buckets %s, want 1,3 2,5 4", got)
				}
			})
		})
	}
}

// Where the answers carry no counters (Gitea's hidden limits), the "who am
// I" request tells, and it is paced like any other request.
func TestOwnersAskedWhereAnswersTellNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tokens := []sim.TokenConfig{{Token: "tok-a1", Owner: "alice"}, {Token: "tok-a2", Owner: "alice"}, {Token: "tok-b1", Owner: "bob"}}
		s := newSim(t, sim.APIConfig{Dialect: "gitea", Tokens: tokens}, []string{"tok-a1", "tok-a2", "tok-b1"}, nil)
		codes := s.runPaths(t, "/repos/o/r%d", 30, 4)
		if codes[200] != 30 {
			t.Fatalf("statuses %v", codes)
		}
		if got := bucketsOf(t, s.t, "gitea"); got != "1,2 3" {
			t.Fatalf("buckets %s, want 1,2 3", got)
		}
		if st := s.srv.Stats().Total; st.Requests != 30+3 {
			t.Fatalf("%d requests for 30 GETs, want 30 and one GET /user per token", st.Requests)
		}
	})
}

// The provider decides what a 401 means, and a 401 that may be about the
// token is confirmed with "who am I" before the token is marked invalid;
// an invalid mark is tried again after InvalidRetry.
func TestUnauthorizedMeansWhatTheProviderSays(t *testing.T) {
	t.Run("hugging face: a missing repository is not a bad token", func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/whoami-v2" {
				fmt.Fprint(w, `{"type":"user","id":"u1","name":"alice"}`)
				return
			}
			w.Header().Set("X-Error-Code", "RepoNotFound")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"Repository not found"}`)
		})
		hf := handlerProviderTransport(t, "huggingface", h, 2)
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/api/models/o/missing", nil)
		resp, err := hf.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("answer %v, %v; want the 401 itself", resp, err)
		}
		drain(resp)
		pool, _ := hf.Pool("huggingface")
		for _, c := range pool.Credentials() {
			if c.State(time.Now()) == creds.Invalid {
				t.Fatalf("%s marked invalid by a missing repository", c)
			}
		}
	})
	t.Run("github: a 401 the who-am-I request does not confirm", func(t *testing.T) {
		var userCalls int
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/user" {
				userCalls++
				fmt.Fprint(w, `{"login":"alice","id":1}`)
				return
			}
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"message":"Bad credentials"}`)
		})
		gh := handlerProviderTransport(t, "github", h, 1)
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/repos/o/r", nil)
		resp, err := gh.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusUnauthorized || userCalls != 1 {
			t.Fatalf("answer %v, %v, %d who-am-I requests", resp, err, userCalls)
		}
		drain(resp)
		pool, _ := gh.Pool("github")
		if st := pool.Credentials()[0].State(time.Now()); st == creds.Invalid {
			t.Fatal("marked invalid although GET /user accepted the token")
		}
	})
	t.Run("github: a confirmed 401, retried after a while", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Hour,
				Tokens: []sim.TokenConfig{{Token: "tok-good", Owner: "alice"}}},
				[]string{"tok-revoked", "tok-good"}, func(o *Options) { o.InvalidRetry = 10 * time.Minute })
			for i := range 4 {
				if resp := s.get(t, fmt.Sprintf("/repos/o/r%d", i)); resp.StatusCode != 200 {
					t.Fatalf("status %d", resp.StatusCode)
				} else {
					drain(resp)
				}
			}
			pool, _ := s.t.Pool("github")
			bad := pool.Credentials()[0]
			if st := bad.Status(time.Now()); st.State != creds.Invalid || time.Until(st.Until) > 10*time.Minute || time.Until(st.Until) < 9*time.Minute {
				t.Fatalf("revoked token: %+v", st)
			}
			if n := s.events.count(EventCredentialInvalid); n != 1 {
				t.Fatalf("%d invalid-credential events", n)
			}
			time.Sleep(10 * time.Minute)
			if !bad.Eligible(time.Now()) {
				t.Fatal("the invalid mark did not lapse")
			}
		})
	})
}

// handlerProviderTransport is a transport for one provider of the given
// kind at http://api.test answered by h, with n tokens.
func handlerProviderTransport(t *testing.T, kind string, h http.Handler, n int) *Transport {
	t.Helper()
	p, err := provider.New(kind, provider.Kind(kind), "http://api.test")
	if err != nil {
		t.Fatal(err)
	}
	reg := provider.NewRegistry()
	_ = reg.Add(p)
	var cs []*creds.Credential
	for i := range n {
		cs = append(cs, creds.NewToken(kind, i+1, fmt.Sprintf("tok-%s-%04d", kind, i+1), "test"))
	}
	return handlerTransport(t, h, func(o *Options) {
		o.Providers, o.Pools = reg, map[string]*creds.Pool{kind: creds.NewPool(kind, cs...)}
	})
}

// A rejected token leaves the learning: the pool's requests do not stay
// one at a time waiting to learn a bucket it will never have.
func TestRejectedTokenEndsLearning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 1000, Window: time.Hour, Latency: 20 * time.Millisecond,
			Tokens: []sim.TokenConfig{{Token: "tok-good", Owner: "alice"}, {Token: "tok-bob", Owner: "bob"}}},
			[]string{"tok-good", "tok-revoked", "tok-bob"}, nil)
		if codes := s.runPaths(t, "/repos/o/r%d", 100, 8); codes[200] != 100 {
			t.Fatalf("statuses %v", codes)
		}
		if m := s.srv.Stats().Total.MaxInFlight; m < 4 {
			t.Fatalf("at most %d requests in flight: the pool stayed one at a time", m)
		}
	})
}

// GraphQL queries count their points, not one each (mixed costs, sizes
// from variable defaults): tokens of one user end in one bucket — from the
// answers' counters when each query's predicted points are what the server
// counts (creds.TestLearnerCountsUnits), else from at most one "who am I"
// request per token — so no query is refused and every point is charged
// once.
func TestOwnersLearntFromGraphQLPoints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tokens := []sim.TokenConfig{{Token: "tok-a1", Owner: "alice"}, {Token: "tok-b1", Owner: "bob"},
			{Token: "tok-a2", Owner: "alice"}, {Token: "tok-c1", Owner: "carol"}, {Token: "tok-b2", Owner: "bob"}}
		s := newSim(t, sim.APIConfig{Dialect: "github", Tokens: tokens,
			Resources: map[string]sim.ResourceConfig{"graphql": {Limit: 1000, Window: time.Minute}}},
			[]string{"tok-a1", "tok-b1", "tok-a2", "tok-c1", "tok-b2"}, nil)
		var wg sync.WaitGroup
		jobs := make(chan string)
		for range 8 {
			wg.Go(func() {
				for q := range jobs {
					resp, err := s.t.RoundTrip(graphqlPost(t, s.base+"/graphql", q, nil))
					if err != nil {
						t.Error(err)
						continue
					}
					drain(resp)
				}
			})
		}
		points := int64(0)
		for i := range 200 {
			cost := 1 + (i*7)%40
			points += int64(cost)
			jobs <- defaultsQuery(cost)
		}
		close(jobs)
		wg.Wait()
		var refused, charged, asked int64
		for _, o := range []string{"alice", "bob", "carol"} {
			b, _ := s.srv.Stats().BucketFor("github", o, "graphql")
			refused += b.PrimaryViolations
			charged += b.Charged
			core, _ := s.srv.Stats().BucketFor("github", o, "core")
			asked += core.Requests
		}
		if asked > 5 {
			t.Errorf("%d \"who am I\" requests for 5 tokens", asked)
		}
		if refused != 0 || charged != points {
			t.Errorf("%d queries refused, %d points charged; want 0 and %d", refused, charged, points)
		}
		if got := bucketsOf(t, s.t, "github"); got != "1,3 2,5 4" {
			t.Errorf("buckets %s, want 1,3 2,5 4", got)
		}
	})
}

// When the counters cannot tell (another client spends alice's quota
// between the probes), the token that could not be placed is handed to
// "who am I" with the token whose bucket was taken for its own only
// because it came first: both end in alice's bucket, not one in alice's
// and one in a bucket of its own paced as a second quota. With a shared
// credential store, the first token's bucket of its own, remembered
// there, does not stand in for the answer either.
func TestOwnersAskedTogetherWhenCountersCannotTell(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared store %v", shared), func(t *testing.T) { ownersAskedTogether(t, shared) })
	}
}

func ownersAskedTogether(t *testing.T, shared bool) {
	synctest.Test(t, func(t *testing.T) {
		tokens := []sim.TokenConfig{{Token: "tok-a1", Owner: "alice"}, {Token: "tok-a2", Owner: "alice"}, {Token: "tok-x1", Owner: "alice"}}
		var tune func(*Options)
		if shared {
			tune = onShared(newSharedMemory(), "p1", &countingBase{})
		}
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 5000, Window: time.Hour, Tokens: tokens},
			[]string{"tok-a1", "tok-a2"}, tune)
		other := s.srv.Transport("")
		for i := range 12 {
			// Another client of alice's, between every two requests
			// of the pool's.
			req, _ := http.NewRequest(http.MethodGet, s.base+"/repos/o/other", nil)
			req.Header.Set("Authorization", "token tok-x1")
			if resp, err := other.RoundTrip(req); err == nil {
				drain(resp)
			}
			req, _ = http.NewRequest(http.MethodGet, s.base+fmt.Sprintf("/repos/o/r%d", i), nil)
			resp, err := s.t.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
		}
		if got := bucketsOf(t, s.t, "github"); got != "1,2" {
			t.Errorf("buckets %s, want 1,2 (both alice's)", got)
		}
	})
}

// Two answers on either side of a window's end must not be compared as one
// window when the estimate of the server's clock tightened between them:
// the first, stamped 0.95 s into its second, put its reset 0.95 s late on
// our clock; the second, stamped as its second turned, put the next
// window's reset only 1.05 s after that. Compared on our clock, the second
// token's count (1, a new window) at or below the first's proved "two
// buckets", and alice's two tokens spent 40 of her 20 a window (the
// three-worker tasks run under load: 11 to 18 refusals). Compared on the
// server's clock, the resets are a window apart.
func TestOwnersNotToldApartAcrossAWindowBySkew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tokens := []sim.TokenConfig{{Token: "tok-a1", Owner: "alice"}, {Token: "tok-a2", Owner: "alice"}}
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 20, Window: 2 * time.Second, WindowMode: sim.WindowFixed, Tokens: tokens},
			[]string{"tok-a1", "tok-a2"}, nil)
		get := func(i int) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodGet, s.base+fmt.Sprintf("/repos/o/r%d", i), nil)
			resp, err := s.t.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
		}
		start := time.Now() // a whole second, and a window's start
		time.Sleep(950 * time.Millisecond)
		get(0) // tok-a1, Date a second 0.95 s old
		time.Sleep(time.Until(start.Add(2*time.Second + 10*time.Millisecond)))
		get(1) // tok-a2, the next window, Date 10 ms old
		codes := s.runPaths(t, "/repos/o/r%d", 40, 4)
		if st := s.srv.Stats().Total; st.Violations != 0 {
			t.Errorf("%d requests refused (statuses %v): alice's tokens were paced as two buckets", st.Violations, codes)
		}
		if got := bucketsOf(t, s.t, "github"); got != "1,2" {
			t.Errorf("buckets %s, want 1,2 (both alice's)", got)
		}
	})
}
