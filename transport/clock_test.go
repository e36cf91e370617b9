package transport

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/sim"
)

// fakeClock is a clock whose timers fire at once, moving its time on by
// their duration.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	c.now = c.now.Add(d)
	at := c.now
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- at
	return fakeTimer(ch)
}

type fakeTimer chan time.Time

func (t fakeTimer) C() <-chan time.Time { return t }
func (fakeTimer) Stop() bool            { return false }

// TestInjectedClockReachesWaitsAndValidation: with Options.Clock, the
// waits for quota sleep on its timers, and the "who am I" validation
// records its time.
func TestInjectedClockReachesWaitsAndValidation(t *testing.T) {
	start := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: start}
	st := &neverState{State: NewMemoryState()}
	s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Hour}, []string{"tok-clock-1"}, func(o *Options) {
		o.Clock = clock
		o.State = st
		o.MaxWait = time.Minute
	})
	req, _ := http.NewRequest("GET", s.base+"/repos/o/r", nil)
	realStart := time.Now()
	_, err := s.t.RoundTrip(req)
	var we *WaitError
	if !errors.As(err, &we) || time.Since(realStart) > 10*time.Second {
		t.Fatalf("%v after %v; want a WaitError at once", err, time.Since(realStart))
	}
	if got := clock.Now().Sub(start); got != 40*time.Second {
		t.Fatalf("the fake clock moved %v, want the one 40s wait", got)
	}

	// Validation, on the same clock.
	v := newSim(t, sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-clock-2", Owner: "clock"}}}, []string{"tok-clock-2"}, func(o *Options) {
		o.Clock = clock
		o.AskOwnerFirst = true
	})
	req, _ = http.NewRequest("GET", v.base+"/repos/o/r", nil)
	resp, err := v.t.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	pool, _ := v.t.poolFor(v.t.reg.Providers()[0])
	c := pool.Credentials()[0]
	if st := c.Status(clock.Now()); st.State != creds.Available || !st.Since.Equal(clock.Now()) {
		t.Fatalf("credential %v since %v, want available since the fake clock's %v", st.State, st.Since, clock.Now())
	}
}
