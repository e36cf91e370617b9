package tasks

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/transport"
)

// manualClock is a clock that moves only when a test advances it; its
// timers fire then.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	at      time.Time
	c       chan time.Time
	stopped bool
}

func newManualClock() *manualClock { return &manualClock{now: time.Now()} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{at: c.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- c.now
		return t.c, func() bool { return false }
	}
	c.timers = append(c.timers, t)
	return t.c, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Advance moves the clock on by d and fires the timers due.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(c.now):
			t.stopped = true
			t.c <- c.now
		default:
			kept = append(kept, t)
		}
	}
	c.timers = kept
}

// transportClock is the same clock as the transport's.
type transportClock struct{ c *manualClock }

func (t transportClock) Now() time.Time { return t.c.Now() }

func (t transportClock) NewTimer(d time.Duration) transport.Timer {
	ch, stop := t.c.NewTimer(d)
	return manualTransportTimer{ch, stop}
}

type manualTransportTimer struct {
	ch   <-chan time.Time
	stop func() bool
}

func (t manualTransportTimer) C() <-chan time.Time { return t.ch }
func (t manualTransportTimer) Stop() bool          { return t.stop() }

// quotaAPI is a GitHub-like API whose core budget the test sets: each
// answer states remaining and the reset; a request when nothing remains is
// refused with 403, as GitHub does.
type quotaAPI struct {
	srv   *httptest.Server
	mu    sync.Mutex
	left  int64
	reset time.Time
	hits  atomic.Int64
}

func newQuotaAPI(t testing.TB, left int64, reset time.Time) *quotaAPI {
	a := &quotaAPI{left: left, reset: reset}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.hits.Add(1)
		a.mu.Lock()
		status := http.StatusOK
		if a.left <= 0 {
			status = http.StatusForbidden
		} else {
			a.left--
		}
		h := w.Header()
		h.Set("X-RateLimit-Limit", "100")
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(a.left, 10))
		h.Set("X-RateLimit-Used", strconv.FormatInt(100-a.left, 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(a.reset.Unix(), 10))
		h.Set("X-RateLimit-Resource", "core")
		a.mu.Unlock()
		w.WriteHeader(status)
		fmt.Fprint(w, `{"ok":true}`)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *quotaAPI) set(left int64, reset time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.left, a.reset = left, reset
}

// lyingState is a State whose buckets, as Buckets reads them, may show the
// core budget refilled while Reserve sees the truth: a view of the quota
// that another process's request made stale.
type lyingState struct {
	transport.State
	lie atomic.Bool
}

func (s *lyingState) Buckets(ctx context.Context) (map[transport.BucketID]quota.Bucket, error) {
	bs, err := s.State.Buckets(ctx)
	if err != nil || !s.lie.Load() {
		return bs, err
	}
	for id, b := range bs {
		if id.Resource == "core" {
			r := headers.Reading{Status: 200, Limit: 100, Remaining: 99, Reset: b.Reset.Add(time.Hour), Resource: "core"}
			quota.Settle(nil, &b, 0, &quota.Answer{Reading: &r, Counted: true}, time.Now())
			bs[id] = b
		}
	}
	return bs, nil
}

// wakeSetup is a queue whose http tasks go through a rate-keeping client
// on clk (nil: the system's) to api, and whose wake runs on clk too, or
// not at all (noWake).
func wakeSetup(t testing.TB, dsn string, api *quotaAPI, st transport.State, clk *manualClock, noWake bool) *Queue {
	t.Helper()
	p, err := provider.New("github", provider.GitHub, api.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		t.Fatal(err)
	}
	var tclk transport.Clock
	if clk != nil {
		tclk = transportClock{clk}
	}
	tr, err := transport.New(transport.Options{
		Providers:      reg,
		Pools:          map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-wake", "test"))},
		State:          st,
		Clock:          tclk,
		SkipValidation: true,
		DisableCache:   true,
		MaxWait:        time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	opts := testOptions()
	opts.HTTPClient = &http.Client{Transport: tr}
	if clk != nil {
		opts.clock = clk
	}
	opts.noWake = noWake
	return openQueue(t, dsn, opts)
}

// sleepingForQuota submits two GETs to api, whose budget is 1 until its
// reset: the first is sent and completes, the second sleeps until the
// reset. It returns the second task.
func sleepingForQuota(t testing.TB, q *Queue, api *quotaAPI) int64 {
	t.Helper()
	first := mustSubmit(t, q, HTTPType, fmt.Sprintf(`{"url":%q}`, api.srv.URL+"/repos/o/a"), SubmitOptions{})
	startWorker(t, q, WorkOptions{Concurrency: 1})
	if task := mustAwait(t, q, first); task.State != StateCompleted {
		t.Fatalf("first task: %+v, want completed", task)
	}
	second := mustSubmit(t, q, HTTPType, fmt.Sprintf(`{"url":%q}`, api.srv.URL+"/repos/o/b"), SubmitOptions{})
	task := waitTask(t, q, second, func(t *Task) bool { return t.RescheduleCount == 1 && t.State == StatePending })
	if wait, want := time.Until(task.AvailableAt), time.Until(api.reset); wait < want-10*time.Second {
		t.Fatalf("second task sleeps %s, want until the reset, %s away", wait, want)
	}
	return second
}

// TestQuotaBackEarlyWakesTheSleepingTask: a task sleeps for the hour until
// its quota's reset; ten seconds on, a reading of a new window (another
// process's answer, in a shared State) shows the quota back. The worker
// that put it to sleep asks its quota again at most once a second, finds
// that it could go, and wakes it: it runs at about 10 s, not in an hour.
// Without the wake it sleeps the hour (the test's wait runs out).
func TestQuotaBackEarlyWakesTheSleepingTask(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		clk := newManualClock()
		reset := time.Now().Add(time.Hour)
		api := newQuotaAPI(t, 1, reset)
		st := transport.NewMemoryState()
		q := wakeSetup(t, dsn, api, st, clk, false)
		id := sleepingForQuota(t, q, api)
		start := clk.Now()

		clk.Advance(9 * time.Second)
		if task, _ := q.Get(ctxT(t), id); task.State != StatePending {
			t.Fatalf("before the quota is back the task is %s; want pending", task.State)
		}
		// The quota is back: the server's window rolled early, and
		// another process's answer says so in the shared state.
		api.set(99, reset.Add(time.Hour))
		bs, _ := st.Buckets(ctxT(t))
		for bid := range bs {
			if bid.Resource == "core" {
				r := headers.Reading{Status: 200, Limit: 100, Remaining: 99, Reset: reset.Add(time.Hour), Resource: "core"}
				if err := st.Settle(ctxT(t), &transport.SettleParams{Slot: transport.Slot{Bucket: bid},
					Answer: quota.Answer{Reading: &r, Counted: true}, Now: clk.Now()}); err != nil {
					t.Fatal(err)
				}
			}
		}
		clk.Advance(2 * time.Second)
		task := mustAwait(t, q, id)
		if task.State != StateCompleted || task.RescheduleCount != 1 {
			t.Fatalf("task = %+v; want completed after its one sleep", task)
		}
		if ran := clk.Now().Sub(start); ran > 11*time.Second {
			t.Errorf("ran at %s on the clock; want about 10 s", ran)
		}
		if n := api.hits.Load(); n != 2 {
			t.Errorf("the server saw %d requests; want 2 (nothing sent while asleep)", n)
		}
	})
}

// TestWokenTaskWhoseQuotaIsNotFreeSleepsAgain: the worker's view of a
// sleeping task's quota shows it free (a stale view: Buckets says
// refilled) while the decision that reserves does not. The task is woken,
// decides again as it starts, sends nothing, and sleeps again. Without the
// wake it is never woken (the test's wait for its second sleep runs out).
func TestWokenTaskWhoseQuotaIsNotFreeSleepsAgain(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		clk := newManualClock()
		api := newQuotaAPI(t, 1, time.Now().Add(time.Hour))
		st := &lyingState{State: transport.NewMemoryState()}
		q := wakeSetup(t, dsn, api, st, clk, false)
		id := sleepingForQuota(t, q, api)

		st.lie.Store(true)
		clk.Advance(2 * time.Second)
		task := waitTask(t, q, id, func(t *Task) bool { return t.RescheduleCount == 2 && t.State == StatePending })
		if task.RetryCount != 0 {
			t.Errorf("task = %+v; want no retry spent", task)
		}
		if n := api.hits.Load(); n != 1 {
			t.Errorf("the server saw %d requests; want 1: the woken task sent nothing", n)
		}
	})
}

// TestWakeMovesOnlyTheSleepItRemembers: the wake's UPDATE moves a sleeping
// task only in the sleep its worker remembers (River's snooze count): a
// task asleep again since, or already due, or finished, is left alone.
func TestWakeMovesOnlyTheSleepItRemembers(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		sleeper := &scripted{steps: []step{reschedule(time.Hour)}}
		done := &scripted{steps: []step{succeed(`"done"`)}}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.sleeper": sleeper.handle, "t.done": done.handle}))
		a := mustSubmit(t, q, "t.sleeper", `{}`, SubmitOptions{})
		b := mustSubmit(t, q, "t.done", `{}`, SubmitOptions{})
		stop := startWorker(t, q, WorkOptions{})
		waitTask(t, q, a, func(t *Task) bool { return t.RescheduleCount == 1 && t.State == StatePending })
		mustAwait(t, q, b)
		stop()

		r := q.b.(*outageBackend).backend.(interface{ pool() runner }).pool()
		postgres := strings.HasPrefix(dsn, "postgres")
		ctx := ctxT(t)
		// Task a slept once (River's count 1); b finished.
		moved, err := wakeTasks(ctx, r, postgres, map[int64]int{a: 2, b: 0}, time.Now())
		if err != nil || len(moved) != 0 {
			t.Fatalf("woke %v (%v); want none: a's sleep is not its second, b is finished", moved, err)
		}
		moved, err = wakeTasks(ctx, r, postgres, map[int64]int{a: 1}, time.Now())
		if err != nil || len(moved) != 1 || moved[0] != a {
			t.Fatalf("woke %v (%v); want task %d", moved, err, a)
		}
		if task, _ := q.Get(ctx, a); time.Until(task.AvailableAt) > time.Second {
			t.Errorf("the woken task is available at %s, in %s; want now", task.AvailableAt, time.Until(task.AvailableAt))
		}
		// Now due: a second wake leaves it (and its place in line) alone.
		if moved, err = wakeTasks(ctx, r, postgres, map[int64]int{a: 1}, time.Now()); err != nil || len(moved) != 0 {
			t.Errorf("woke %v (%v) again; want none: it is due already", moved, err)
		}
	})
}
