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
