package transport

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// neverState is a State whose every reservation is 40 s away, however long
// one waits: the shape of a bucket refilled at each reset but never enough.
type neverState struct {
	State
	asked atomic.Int32
}

func (s *neverState) Reserve(ctx context.Context, p *ReserveParams) (Decision, error) {
	if s.asked.Add(1) > 5 {
		return Decision{}, errors.New("asked five times: the wait never ends")
	}
	return Decision{Wait: 40 * time.Second}, nil
}

// TestMaxWaitBoundsTheWholeWait: MaxWait is the longest a request waits in
// all, not the longest of each step; a wait that keeps coming back ends in
// a *WaitError once the total would pass it.
func TestMaxWaitBoundsTheWholeWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &neverState{State: NewMemoryState()}
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Hour}, []string{"tok-maxwait-1"}, func(o *Options) {
			o.State = st
			o.MaxWait = time.Minute
		})
		start := time.Now()
		req, _ := http.NewRequest("GET", s.base+"/repos/o/r", nil)
		_, err := s.t.RoundTrip(req)
		var we *WaitError
		if !errors.As(err, &we) {
			t.Fatalf("got %v, want a *WaitError", err)
		}
		if waited := time.Since(start); waited != 40*time.Second || st.asked.Load() != 2 {
			t.Errorf("waited %v over %d reservations; want one 40s wait, then the WaitError (40s+40s > 1m)", waited, st.asked.Load())
		}
	})
}

// outageState is a State whose reservation waits out a 30 s database
// outage and then decides, at that later time, that the request can go
// in 40 s.
type outageState struct{ State }

func (s *outageState) Reserve(ctx context.Context, p *ReserveParams) (Decision, error) {
	time.Sleep(30 * time.Second)
	return Decision{Wait: 40 * time.Second}, nil
}

// TestWaitErrorCountsFromTheDecision: a decision's wait runs from when it
// was taken, which a State that waited out an outage took late; the
// WaitError's Until, which a durable task sleeps until, is counted from
// then, not from before the reservation (which would wake it 30 s early).
func TestWaitErrorCountsFromTheDecision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Hour}, []string{"tok-maxwait-2"}, func(o *Options) {
			o.State = &outageState{State: NewMemoryState()}
			o.MaxWait = 10 * time.Second
		})
		start := time.Now()
		req, _ := http.NewRequest("GET", s.base+"/repos/o/r", nil)
		_, err := s.t.RoundTrip(req)
		var we *WaitError
		if !errors.As(err, &we) {
			t.Fatalf("got %v, want a *WaitError", err)
		}
		if want := start.Add(70 * time.Second); !we.Until.Equal(want) {
			t.Errorf("Until is %v after the start; want 70s (30s deciding, then the 40s wait)", we.Until.Sub(start))
		}
	})
}
