package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/holder"
	"github.com/ratekeeper/ratekeeper/sim"
)

// sharedMemory stands for a database shared by several processes (here,
// transports): the quota state, the credential records and the learning
// turn, with the semantics store/quotastate gives them.
type sharedMemory struct {
	State
	mu    sync.Mutex
	creds map[string]CredentialRecord
	turn  struct {
		holder string
		until  time.Time
		seq    uint64
	}
	// turnDelay is how long taking or giving the turn takes, as a
	// database's round trip does.
	turnDelay time.Duration
}

func newSharedMemory() *sharedMemory {
	return &sharedMemory{State: NewMemoryState(), creds: map[string]CredentialRecord{}}
}

func (m *sharedMemory) LoadCredential(_ context.Context, provider, id string) (CredentialRecord, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.creds[provider+"/"+id]
	return rec, ok, nil
}

func (m *sharedMemory) SaveCredential(_ context.Context, provider, id string, rec CredentialRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.creds[provider+"/"+id] = rec
	return nil
}

func (m *sharedMemory) TakeLearningTurn(_ context.Context, p *TurnParams) (TurnTaken, error) {
	time.Sleep(m.turnDelay)
	m.mu.Lock()
	defer m.mu.Unlock()
	tu := &m.turn
	if tu.holder != "" && tu.holder != p.Holder && p.Now.Before(tu.until) && tu.holder != p.Gone {
		return TurnTaken{Seq: tu.seq, Holder: tu.holder}, nil
	}
	tu.holder, tu.until = p.Holder, p.Until
	tu.seq++
	return TurnTaken{Taken: true, Seq: tu.seq}, nil
}

func (m *sharedMemory) GiveLearningTurn(_ context.Context, _, holder string) error {
	time.Sleep(m.turnDelay)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.turn.holder == holder {
		m.turn.holder = ""
	}
	return nil
}

// countingBase counts the "who am I" requests sent through it.
type countingBase struct {
	base   http.RoundTripper
	whoAmI atomic.Int64
}

func (c *countingBase) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/user") {
		c.whoAmI.Add(1)
	}
	return c.base.RoundTrip(req)
}

// onShared puts a transport on the shared memory m as a process of its
// own, counting its "who am I" requests in count.
func onShared(m *sharedMemory, holder string, count *countingBase) func(*Options) {
	return func(o *Options) {
		o.State, o.Credentials, o.Holder = m, m, holder
		count.base = o.Base
		o.Base = count
	}
}

// A pool of one token needs no learning, so with a shared database its
// first request is the caller's own: no "who am I" request, whichever
// state holds the quota. Two requests in a bucket of two both go in its
// first window.
func TestOneTokenWithSharedStateAsksNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := sim.APIConfig{Dialect: "github", Limit: 2, Window: 5 * time.Minute,
			Tokens: []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}}}
		var count countingBase
		s := newSim(t, api, []string{"tok-alice-1"}, onShared(newSharedMemory(), "p1", &count))
		start := time.Now()
		codes := s.runPaths(t, "/repos/o/r%d", 2, 2)
		if codes[http.StatusOK] != 2 {
			t.Fatalf("statuses %v", codes)
		}
		if n := count.whoAmI.Load(); n != 0 {
			t.Fatalf("%d \"who am I\" requests for a pool of one token", n)
		}
		if took := time.Since(start); took >= time.Minute {
			t.Fatalf("two requests in a bucket of two took %v: a request was spent to learn", took)
		}
		if st := s.srv.Stats().Total; st.Charged != 2 || st.Violations != 0 {
			t.Fatalf("charged %d with %d violations, want 2 and 0", st.Charged, st.Violations)
		}
	})
}

// Several processes on one shared state learn which of their tokens share
// a bucket from their own answers, taking the learning turn in the shared
// state: N requests charge N, no "who am I" is sent, no bucket is
// overspent, and both processes agree on the buckets — the second, started
// later, from what the first remembered.
func TestSharedStateLearnsForFree(t *testing.T) {
	for _, c := range []struct{ name, dialect, path string }{
		{"github", "github", "/repos/o/r%d"},
		{"gitlab", "gitlab", "/projects/%d"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tokens := []sim.TokenConfig{{Token: "tok-a1", Owner: "alice"}, {Token: "tok-b1", Owner: "bob"},
					{Token: "tok-a2", Owner: "alice"}, {Token: "tok-c1", Owner: "carol"}, {Token: "tok-b2", Owner: "bob"}}
				names := []string{"tok-a1", "tok-b1", "tok-a2", "tok-c1", "tok-b2"}
				m := newSharedMemory()
				var c1, c2 countingBase
				api := sim.APIConfig{Dialect: c.dialect, Limit: 40, Window: 10 * time.Second, Tokens: tokens}
				first := newSim(t, api, names, onShared(m, "p1", &c1))
				second := first.sibling(t, names, onShared(m, "p2", &c2))
				const n = 100
				var wg sync.WaitGroup
				var codes [2]map[int]int
				for i, s := range []*simSetup{first, second} {
					wg.Go(func() { codes[i] = s.runPaths(t, c.path, n, 4) })
				}
				wg.Wait()
				for i := range codes {
					if codes[i][http.StatusOK] != n {
						t.Fatalf("process %d: statuses %v", i+1, codes[i])
					}
				}
				if w := c1.whoAmI.Load() + c2.whoAmI.Load(); w != 0 {
					t.Fatalf("%d \"who am I\" requests: learning spent requests", w)
				}
				st := first.srv.Stats().Total
				if st.Violations != 0 || st.Charged != 2*n {
					t.Fatalf("charged %d with %d violations for %d GETs", st.Charged, st.Violations, 2*n)
				}
				for i, s := range []*simSetup{first, second} {
					if got := bucketsOf(t, s.t, c.dialect); got != "1,3 2,5 4" {
						t.Fatalf("process %d: buckets %s, want 1,3 2,5 4", i+1, got)
					}
				}
				// A third process, started now, learns nothing: the
				// database remembers every token's bucket.
				var c3 countingBase
				third := first.sibling(t, names, onShared(m, "p3", &c3))
				if codes := third.runPaths(t, c.path, 5, 1); codes[http.StatusOK] != 5 || c3.whoAmI.Load() != 0 {
					t.Fatalf("third process: statuses %v, %d \"who am I\"", codes, c3.whoAmI.Load())
				}
				if got := bucketsOf(t, third.t, c.dialect); got != "1,3 2,5 4" {
					t.Fatalf("third process: buckets %s", got)
				}
			})
		})
	}
}

// The learning turn held by a process that is gone does not stop the
// others: a holder of this machine whose process ended is taken over at
// once.
func TestLearningTurnOfAGoneProcessIsTakenOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tokens := []sim.TokenConfig{{Token: "tok-a1", Owner: "alice"}, {Token: "tok-a2", Owner: "alice"}}
		m := newSharedMemory()
		gone := goneLocalHolder(t)
		if got, _ := m.TakeLearningTurn(context.Background(), &TurnParams{Key: "github", Holder: gone,
			Now: time.Now(), Until: time.Now().Add(time.Hour)}); !got.Taken {
			t.Fatal("setting up the gone holder's turn")
		}
		var count countingBase
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 40, Window: 10 * time.Second, Tokens: tokens},
			[]string{"tok-a1", "tok-a2"}, onShared(m, "p1", &count))
		start := time.Now()
		if codes := s.runPaths(t, "/repos/o/r%d", 10, 2); codes[http.StatusOK] != 10 {
			t.Fatalf("statuses %v", codes)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("took %v: waited for a gone process's turn", took)
		}
		if got := bucketsOf(t, s.t, "github"); got != "1,2" || count.whoAmI.Load() != 0 {
			t.Fatalf("buckets %s, %d \"who am I\"", got, count.whoAmI.Load())
		}
	})
}

// goneLocalHolder names a process of this machine that is not running:
// this one's PID with another start time (a reused PID), or an earlier
// boot.
func goneLocalHolder(t *testing.T) string {
	me := holder.Self()
	switch {
	case me.Start != "":
		me.Start += "0"
	case me.Boot != "":
		me.Boot = "an-earlier-boot"
	default:
		t.Fatal("this system tells neither a process's start nor its boot")
	}
	if !holder.Gone(me.String()) {
		t.Fatalf("holder %s is not gone", me)
	}
	return me.String()
}

// A probe of a token whose bucket is unknown holds a lease in every known
// bucket it might share; once its answer shows a bucket of its own, the
// others are released without counting it. Two users with 2 requests per
// 5 minutes each fit 4 requests in one window: counting the probe in
// alice's bucket too made the last request wait 5 minutes for a unit
// alice still had.
func TestProbeOfItsOwnBucketCostsTheOthersNothing(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tokens := []sim.TokenConfig{{Token: "tok-a1", Owner: "alice"}, {Token: "tok-b1", Owner: "bob"}}
				var count countingBase
				tune := func(*Options) {}
				if shared {
					tune = onShared(newSharedMemory(), "p1", &count)
				}
				s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 2, Window: 5 * time.Minute, Tokens: tokens},
					[]string{"tok-a1", "tok-b1"}, tune)
				start := time.Now()
				if codes := s.runPaths(t, "/repos/o/r%d", 4, 1); codes[http.StatusOK] != 4 {
					t.Fatalf("statuses %v", codes)
				}
				if took := time.Since(start); took >= time.Minute {
					t.Fatalf("4 requests that fit one window took %v", took)
				}
				if st := s.srv.Stats().Total; st.Charged != 4 || st.Violations != 0 || count.whoAmI.Load() != 0 {
					t.Fatalf("charged %d, %d violations, %d \"who am I\"", st.Charged, st.Violations, count.whoAmI.Load())
				}
			})
		})
	}
}

// A bad token alone in its pool is not asked about before its first use,
// yet its 401 still marks it invalid (confirmed by the "who am I" request,
// which only a 401 calls for) and the shared database remembers it, so the
// next process does not send it.
func TestOneBadTokenWithSharedStateIsMarkedFromItsAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := sim.APIConfig{Dialect: "github", Limit: 10, Window: time.Hour, Tokens: []sim.TokenConfig{{Token: "tok-good", Owner: "alice"}}}
		m := newSharedMemory()
		var c1, c2 countingBase
		s := newSim(t, api, []string{"tok-bad-1234"}, onShared(m, "p1", &c1))
		req, _ := http.NewRequest(http.MethodGet, s.base+"/repos/o/r", nil)
		if _, err := s.t.RoundTrip(req); err == nil {
			t.Fatal("a request with the only token rejected succeeded")
		}
		if c1.whoAmI.Load() != 1 {
			t.Fatalf("%d \"who am I\" requests, want 1 (confirming the 401)", c1.whoAmI.Load())
		}
		pool, _ := s.t.Pool("github")
		id := pool.Credentials()[0].ID()
		if rec, ok, _ := m.LoadCredential(context.Background(), s.t.stateKey(s.t.reg.Providers()[0]), id); !ok || !rec.Invalid {
			t.Fatalf("the database remembers %+v (%v), want invalid", rec, ok)
		}
		next := s.sibling(t, []string{"tok-bad-1234"}, onShared(m, "p2", &c2))
		req, _ = http.NewRequest(http.MethodGet, s.base+"/repos/o/r", nil)
		if _, err := next.t.RoundTrip(req); err == nil || c2.whoAmI.Load() != 0 {
			t.Fatalf("the next process: %v, %d \"who am I\"", err, c2.whoAmI.Load())
		}
		if st := s.srv.Stats().Total; st.Unauthorized != 2 {
			t.Fatalf("%d requests answered 401, want 2 (the request and its confirmation)", st.Unauthorized)
		}
	})
}

// A process whose first request finds another process learning (holding
// the shared turn) goes as soon as that one has placed every credential,
// not a guessed round trip (a second) after it asked: it looks at what
// the other learnt while it waits.
func TestProcessWaitingForTheTurnGoesOnceTheOtherHasLearnt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tokens := []sim.TokenConfig{{Token: "tok-a1", Owner: "alice"}, {Token: "tok-b1", Owner: "bob"},
			{Token: "tok-a2", Owner: "alice"}, {Token: "tok-c1", Owner: "carol"}, {Token: "tok-b2", Owner: "bob"}}
		names := []string{"tok-a1", "tok-b1", "tok-a2", "tok-c1", "tok-b2"}
		m := newSharedMemory()
		var c1, c2 countingBase
		api := sim.APIConfig{Dialect: "github", Limit: 40, Window: time.Minute, Latency: 20 * time.Millisecond, Tokens: tokens}
		first := newSim(t, api, names, onShared(m, "p1", &c1))
		second := first.sibling(t, names, onShared(m, "p2", &c2))
		start := time.Now()
		learntAt := make(chan time.Duration, 1)
		done := make(chan map[int]int)
		go func() {
			codes := first.runPaths(t, "/repos/o/r%d", 20, 4)
			done <- codes
		}()
		// The first process takes the turn; the second asks for it
		// while the first learns.
		time.Sleep(time.Millisecond)
		go func() {
			for !learntAll(first) && time.Since(start) < time.Minute {
				time.Sleep(time.Millisecond)
			}
			learntAt <- time.Since(start)
		}()
		resp := second.get(t, "/repos/o/second")
		drain(resp)
		went := time.Since(start)
		if codes := <-done; codes[http.StatusOK] != 20 {
			t.Fatalf("first process: statuses %v", codes)
		}
		if learnt := <-learntAt; went > learnt+100*time.Millisecond {
			t.Fatalf("the second process's request was answered %v after the start, the first had learnt every bucket at %v: it waited for the turn past the learning", went, learnt)
		}
		if st := first.srv.Stats().Total; st.Violations != 0 || st.Charged != 21 || c1.whoAmI.Load()+c2.whoAmI.Load() != 0 {
			t.Fatalf("charged %d with %d violations, %d \"who am I\"", st.Charged, st.Violations, c1.whoAmI.Load()+c2.whoAmI.Load())
		}
		if got := bucketsOf(t, second.t, "github"); got != "1,3 2,5 4" {
			t.Fatalf("second process: buckets %s, want 1,3 2,5 4", got)
		}
	})
}

// learntAll reports whether s's transport knows the bucket of every
// credential of its pool.
func learntAll(s *simSetup) bool {
	pool, _ := s.t.Pool("github")
	for _, c := range pool.Credentials() {
		if !c.BucketKnown() {
			return false
		}
	}
	return true
}

// A fleet learns together: 8 processes on one shared state, each with 10
// requests in flight, learn which of 9 tokens (6 users) share a bucket
// within the first window, and the batch ends within about its ideal.
// Each process that took the shared turn after another forgot the
// counters it had seen and spent its turn refreshing them; taking the
// turn in turns, the fleet learnt nothing for windows on end, left
// tokens unused, and took twice its ideal (the FetchFleet benchmark).
// The shared turn now passes between a process's own waiting requests.
func TestFleetLearnsInItsFirstWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		owners := []string{"alice", "bob", "carol", "dave", "erin", "frank", "alice", "bob", "carol"}
		var tokens []sim.TokenConfig
		var names []string
		for i, o := range owners {
			name := fmt.Sprintf("tok-%s-%d", o, i+1)
			tokens = append(tokens, sim.TokenConfig{Token: name, Owner: o})
			names = append(names, name)
		}
		const procs, each, window = 8, 135, 5 * time.Second
		api := sim.APIConfig{Dialect: "github", Limit: 60, Window: window, WindowMode: sim.WindowFixed, Latency: 20 * time.Millisecond, Tokens: tokens}
		m := newSharedMemory()
		m.turnDelay = 2 * time.Millisecond
		counts := make([]countingBase, procs)
		// Each request waits at most a round trip in the transport and
		// is tried again at its WaitError's Until, as fetch's scheduler
		// does, so that no worker is held by a wait.
		process := func(i int) func(*Options) {
			shared := onShared(m, fmt.Sprintf("p%d", i), &counts[i])
			return func(o *Options) { shared(o); o.MaxWait = 20 * time.Millisecond }
		}
		ps := []*simSetup{newSim(t, api, names, process(0))}
		for i := 1; i < procs; i++ {
			ps = append(ps, ps[0].sibling(t, names, process(i)))
		}
		start := time.Now()
		learnt := make([]time.Duration, procs)
		var wg sync.WaitGroup
		for i, s := range ps {
			wg.Go(func() {
				// The processes start a little apart, as processes do.
				time.Sleep(time.Duration(i) * 150 * time.Millisecond)
				if ok := s.runRetrying(t, "/repos/o/r%d", each, 10, start.Add(5*window)); ok != each {
					t.Errorf("process %d: %d of %d answered 200", i, ok, each)
				}
			})
			wg.Go(func() {
				for bucketsOf(t, s.t, "github") != "1,7 2,8 3,9 4 5 6" && time.Since(start) < 5*window {
					time.Sleep(10 * time.Millisecond)
				}
				learnt[i] = time.Since(start)
			})
		}
		wg.Wait()
		took := time.Since(start)
		// 1,080 requests at 360 a window: three windows spent whole.
		t.Logf("learnt after %v; batch took %v", learnt, took)
		for i, d := range learnt {
			if d >= window {
				t.Errorf("process %d learnt every bucket after %v, not within the first window", i, d)
			}
		}
		if took > 3*window+window/2 {
			t.Errorf("the batch took %v; three windows' worth should end in the third", took)
		}
		if st := ps[0].srv.Stats().Total; st.Violations != 0 || st.Charged != procs*each {
			t.Errorf("charged %d with %d refusals for %d GETs", st.Charged, st.Violations, procs*each)
		}
	})
}

// runRetrying sends n GETs with workers in flight, each tried again at
// its *WaitError's Until until the deadline, and returns how many were
// answered 200.
func (s *simSetup) runRetrying(t *testing.T, format string, n, workers int, deadline time.Time) int {
	t.Helper()
	var ok atomic.Int64
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				for {
					req, _ := http.NewRequest(http.MethodGet, s.base+fmt.Sprintf(format, i), nil)
					resp, err := s.t.RoundTrip(req)
					var we *WaitError
					if errors.As(err, &we) && we.Until.Before(deadline) {
						time.Sleep(time.Until(we.Until))
						continue
					}
					if err == nil {
						if resp.StatusCode == http.StatusOK {
							ok.Add(1)
						}
						drain(resp)
					}
					break
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return int(ok.Load())
}
