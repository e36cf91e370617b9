package batch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/batch"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/sim"
)

// searchLimited is GitHub with a search bucket of one request a minute
// and a roomy core bucket.
func searchLimited(t testing.TB) *simAPI {
	return newSimAPI(t, sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Hour,
		Resources: map[string]sim.ResourceConfig{"search": {Limit: 1, Window: time.Minute}},
		Tokens:    []sim.TokenConfig{{Token: "tok-batch-1", Owner: "alice"}}}, "tok-batch-1")
}

// finished records when each key's result came, and what it was.
type finished struct {
	mu    sync.Mutex
	at    map[string]time.Duration
	order []string
	res   map[string]batch.Result
	body  map[string]string
	start time.Time
}

func newFinished() *finished {
	return &finished{at: map[string]time.Duration{}, res: map[string]batch.Result{}, body: map[string]string{}, start: time.Now()}
}

func (f *finished) onResult(r batch.Result) {
	var body string
	if r.Response != nil {
		b, _ := io.ReadAll(r.Response.Body)
		body = string(b)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, dup := f.res[r.Key]; dup {
		panic("a second result for " + r.Key)
	}
	f.at[r.Key] = time.Since(f.start)
	f.order = append(f.order, r.Key)
	f.res[r.Key] = r
	f.body[r.Key] = body
}

// A request waiting for one bucket does not hold back another bucket's
// request that can go: with one request in flight, a search that must
// wait a minute for the search bucket lets the core request behind it
// go at once, and goes itself when the minute is over.
func TestWaitingBucketDoesNotHoldBackAnother(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := searchLimited(t)
		f := newFinished()
		b := batch.New(api.t, batch.Options{InFlight: 1, OnResult: f.onResult})
		for _, k := range []string{"search-1", "search-2"} {
			if err := b.Add(get(t, api.base+"/search/repositories?q="+k), batch.Key(k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Add(get(t, api.base+"/repos/o/r"), batch.Key("core")); err != nil {
			t.Fatal(err)
		}
		if err := b.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := []string{"search-1", "core", "search-2"}
		if strings.Join(f.order, " ") != strings.Join(want, " ") {
			t.Errorf("results in the order %v; want %v", f.order, want)
		}
		if f.at["core"] > time.Second {
			t.Errorf("the core request ended after %v; want it sent while the search waited", f.at["core"])
		}
		if at := f.at["search-2"]; at < time.Minute || at > time.Minute+5*time.Second {
			t.Errorf("the second search ended after %v; want it as the search bucket's minute ends", at)
		}
		for k, r := range f.res {
			if r.Err != nil || r.Response.StatusCode != http.StatusOK {
				t.Errorf("%s: %v %v", k, r.Err, r.Response)
			}
		}
		if r := f.res["search-2"]; r.Waits != 1 {
			t.Errorf("search-2 waited %d times in the batch; want 1", r.Waits)
		}
		st, _ := api.srv.Stats().BucketFor("github", "alice", "search")
		if st.PrimaryViolations+st.SecondaryViolations != 0 {
			t.Errorf("%d refusals", st.PrimaryViolations+st.SecondaryViolations)
		}
	})
}

// Progress says what waits, for which bucket and until when.
func TestProgressSaysWhatWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := searchLimited(t)
		b := batch.New(api.t, batch.Options{InFlight: 2})
		start := time.Now()
		b.Add(get(t, api.base+"/search/repositories?q=a"), batch.Key("a"))
		b.Add(get(t, api.base+"/search/repositories?q=b"), batch.Key("b"))
		b.Add(get(t, api.base+"/search/repositories?q=c"), batch.Key("c"))
		b.Add(get(t, api.base+"/repos/o/r"), batch.Key("core"))
		done := make(chan error)
		go func() { done <- b.Run(context.Background()) }()
		time.Sleep(10 * time.Second)
		seen := b.Progress()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(seen.Waiting) != 1 {
			t.Fatalf("progress %+v; want one group of waiting requests", seen)
		}
		w := seen.Waiting[0]
		if w.Provider != "github" || w.Resource != "search" || w.Requests != 2 || w.Until.Before(start.Add(50*time.Second)) {
			t.Errorf("waiting %+v; want 2 github search requests until the minute ends", w)
		}
		if seen.Added != 4 || seen.Done != 2 || seen.Sending != 0 || seen.Ready != 0 || seen.ETA.Before(w.Until) {
			t.Errorf("progress %+v; want 4 added, 2 done (a, core), none sending or ready, an ETA after the wait", seen)
		}
		end := b.Progress()
		if end.Done != 4 || end.Failed != 0 || len(end.Waiting) != 0 || end.Ready != 0 || end.Sending != 0 {
			t.Errorf("progress at the end %+v; want 4 done and nothing else", end)
		}
	})
}

// Rate-limited work goes before newer work once its quota returns, and
// priority 1 before the default 2, before 3.
func TestOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := searchLimited(t)
		// A slow request keeps the one worker busy past the search's
		// minute: when it ends, search-2 is ready again, and so is late,
		// added at 30 s while search-2 waited.
		slow := &slowTransport{rt: api.t, path: "/repos/o/slow", d: 90 * time.Second}
		f := newFinished()
		b := batch.New(slow, batch.Options{InFlight: 1, OnResult: f.onResult})
		go func() {
			time.Sleep(30 * time.Second)
			b.Add(get(t, api.base+"/repos/o/late"), batch.Key("late"))
		}()
		b.Add(get(t, api.base+"/search/repositories?q=1"), batch.Key("search-1"))
		b.Add(get(t, api.base+"/search/repositories?q=2"), batch.Key("search-2"))
		b.Add(get(t, api.base+"/repos/o/low"), batch.Key("low"), batch.Priority(3))
		b.Add(get(t, api.base+"/repos/o/high"), batch.Key("high"), batch.Priority(1))
		b.Add(get(t, api.base+"/repos/o/slow"), batch.Key("slow"), batch.Priority(3))
		if err := b.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := "high search-1 low slow search-2 late"
		if got := strings.Join(f.order, " "); got != want {
			t.Errorf("order %q; want %q", got, want)
		}
	})
}

// slowTransport takes d to answer requests for path.
type slowTransport struct {
	rt   http.RoundTripper
	path string
	d    time.Duration
}

func (s *slowTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path == s.path {
		time.Sleep(s.d)
	}
	return s.rt.RoundTrip(req)
}

// Cancelling Run's context ends the requests waiting in the batch, each
// with one result carrying the context's error, and Run returns it.
func TestCancelEndsWaitingRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := searchLimited(t)
		f := newFinished()
		b := batch.New(api.t, batch.Options{InFlight: 4, OnResult: f.onResult})
		for _, k := range []string{"a", "b", "c"} {
			b.Add(get(t, api.base+"/search/repositories?q="+k), batch.Key(k))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run: %v; want the context's deadline", err)
		}
		if len(f.res) != 3 {
			t.Fatalf("%d results; want 3", len(f.res))
		}
		failed := 0
		for k, r := range f.res {
			if r.Err != nil {
				failed++
				if !errors.Is(r.Err, context.DeadlineExceeded) {
					t.Errorf("%s: %v; want the context's deadline", k, r.Err)
				}
			}
		}
		if failed != 2 {
			t.Errorf("%d failed; want the 2 that waited", failed)
		}
		if p := b.Progress(); p.Done != 1 || p.Failed != 2 || len(p.Waiting) != 0 {
			t.Errorf("progress %+v; want 1 done, 2 failed, none waiting", p)
		}
	})
}

// A panic in OnResult stops the batch and comes out of Run, and gives
// back the worker's place: the next Run sends what is left.
func TestPanicInOnResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := searchLimited(t)
		f := newFinished()
		calls := 0
		b := batch.New(api.t, batch.Options{InFlight: 1, OnResult: func(r batch.Result) {
			calls++
			if calls == 1 {
				panic("boom")
			}
			f.onResult(r)
		}})
		for _, k := range []string{"a", "b", "c"} {
			b.Add(get(t, api.base+"/repos/o/"+k), batch.Key(k))
		}
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Errorf("Run panicked with %v; want boom", p)
				}
			}()
			b.Run(context.Background())
		}()
		if p := b.Progress(); p.Sending != 0 || p.Ready != 2 {
			t.Errorf("after the panic: %+v; want nothing sending and 2 ready", p)
		}
		if err := b.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if strings.Join(f.order, " ") != "b c" {
			t.Errorf("results %v; want b c", f.order)
		}
	})
}

// A request with a body is sent again with its whole body after waiting
// for quota: a GraphQL query that waits for points is answered.
func TestBodyResentAfterWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newSimAPI(t, sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Hour,
			Resources: map[string]sim.ResourceConfig{"graphql": {Limit: 10, Window: time.Minute}},
			Tokens:    []sim.TokenConfig{{Token: "tok-batch-1", Owner: "alice"}}}, "tok-batch-1")
		f := newFinished()
		b := batch.New(api.t, batch.Options{InFlight: 2, OnResult: f.onResult})
		for _, k := range []string{"q1", "q2"} {
			b.Add(strict(t, graphqlPost(t, api.base+"/graphql", map[string]any{"n": 8})), batch.Key(k)) // 9 points each
		}
		if err := b.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		waits := 0
		for k, r := range f.res {
			if r.Err != nil || r.Response.StatusCode != 200 || !strings.HasPrefix(f.body[k], `{"data"`) {
				t.Errorf("%s: %v %.200s", k, r.Err, f.body[k])
			}
			waits += r.Waits
		}
		if waits == 0 {
			t.Errorf("no query waited; want the second to wait for the points")
		}
		st, _ := api.srv.Stats().BucketFor("github", "alice", "graphql")
		if st.PrimaryViolations+st.SecondaryViolations != 0 {
			t.Errorf("%d refusals", st.PrimaryViolations+st.SecondaryViolations)
		}
	})
}

// A body that could not be sent again is refused when added, saying what
// would do.
func TestAddRefusesBodyWithoutGetBody(t *testing.T) {
	b := batch.New(http.DefaultTransport, batch.Options{})
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/x", io.NopCloser(strings.NewReader("x")))
	err := b.Add(req)
	if err == nil || !strings.Contains(err.Error(), "GetBody") {
		t.Errorf("Add: %v; want an error naming GetBody", err)
	}
}

// GitLab's Users API has a limit of its own that the headers do not show
// (here written in the config: 40 a minute): while the users requests
// wait for it, the projects requests go, where a pool of workers would
// all end up waiting on users URLs. Progress names the scope.
func TestScopeDoesNotHoldBackTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newSimAPIWith(t, sim.APIConfig{Dialect: "gitlab", Limit: 2000, Window: time.Minute, Latency: 50 * time.Millisecond,
			Tokens: []sim.TokenConfig{{Token: "glpat-batch-1", Owner: "alice"}}}, func(p *provider.Provider) {
			l, err := provider.ParseEndpointLimit("GET /api/v4/users/*", "40/1m")
			if err != nil {
				t.Fatal(err)
			}
			p.EndpointLimits = []provider.EndpointLimit{l}
		}, "glpat-batch-1")
		f := newFinished()
		var mu sync.Mutex
		var scope string
		var b *batch.Batch
		b = batch.New(api.t, batch.Options{InFlight: 8, OnResult: func(r batch.Result) {
			f.onResult(r)
			if r.Key == "projects-39" {
				mu.Lock()
				for _, w := range b.Progress().Waiting {
					scope = w.Scope
				}
				mu.Unlock()
			}
		}})
		for i := range 80 {
			b.Add(get(t, fmt.Sprintf("%s/users/%d", api.base, i+1)), batch.Key(fmt.Sprintf("users-%d", i)))
		}
		for i := range 40 {
			b.Add(get(t, fmt.Sprintf("%s/projects/%d", api.base, i+1)), batch.Key(fmt.Sprintf("projects-%d", i)))
		}
		if err := b.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		var lastProject, lastUser time.Duration
		for k, at := range f.at {
			// The simulator knows few users: a 404 is an answer.
			if r := f.res[k]; r.Err != nil || r.Response.StatusCode == http.StatusTooManyRequests {
				t.Errorf("%s: %v %v", k, r.Err, r.Response.Status)
			}
			if strings.HasPrefix(k, "projects-") {
				lastProject = max(lastProject, at)
			} else {
				lastUser = max(lastUser, at)
			}
		}
		t.Logf("projects done at %v, users at %v; waiting for scope %q", lastProject, lastUser, scope)
		if lastProject > 5*time.Second {
			t.Errorf("the projects ended at %v; want them sent while the users requests waited", lastProject)
		}
		if lastUser < time.Minute {
			t.Errorf("the users requests ended at %v; want the second 40 after the minute", lastUser)
		}
		if scope == "" {
			t.Errorf("progress named no scope for the waiting users requests")
		}
	})
}

// A request's own context ends it while it waits for quota: its result,
// with the context's error, comes then, not when the quota returns.
func TestOwnContextEndsAWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := searchLimited(t)
		f := newFinished()
		b := batch.New(api.t, batch.Options{InFlight: 1, OnResult: f.onResult})
		b.Add(get(t, api.base+"/search/repositories?q=1"), batch.Key("first"))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.base+"/search/repositories?q=2", nil)
		b.Add(req, batch.Key("impatient"))
		b.Add(get(t, api.base+"/search/repositories?q=3"), batch.Key("patient"))
		if err := b.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		r := f.res["impatient"]
		if !errors.Is(r.Err, context.DeadlineExceeded) || f.at["impatient"] != 5*time.Second {
			t.Errorf("impatient: %v after %v; want its deadline after 5s", r.Err, f.at["impatient"])
		}
		if r := f.res["patient"]; r.Err != nil || f.at["patient"] < time.Minute {
			t.Errorf("patient: %v after %v; want an answer after the minute", r.Err, f.at["patient"])
		}
	})
}

// A request that ends without being sent has its body closed, as
// RoundTrip would have closed it.
func TestUnsentBodyClosed(t *testing.T) {
	b := batch.New(http.DefaultTransport, batch.Options{})
	req := strict(t, graphqlPost(t, "http://127.0.0.1:1/graphql", map[string]any{"n": 1}))
	body := req.Body.(*strictBody)
	b.Add(req)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v; want context.Canceled", err)
	}
	if !body.closed {
		t.Errorf("the body of a request never sent was left open")
	}
}
