package transport

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// stuckBeats is a shared state whose heartbeats, after the first, wait
// out a database outage that does not end: they return only when their
// context ends.
type stuckBeats struct {
	State
	mu      sync.Mutex
	beats   int
	waiting chan struct{} // closed when a beat is waiting
	ended   error         // why the waiting beat returned
}

func (s *stuckBeats) Beat(ctx context.Context, holder string, now time.Time) error {
	s.mu.Lock()
	s.beats++
	first := s.beats == 1
	s.mu.Unlock()
	if first {
		return nil
	}
	close(s.waiting)
	<-ctx.Done()
	s.mu.Lock()
	s.ended = ctx.Err()
	s.mu.Unlock()
	return ctx.Err()
}

func (s *stuckBeats) Beats(context.Context) (map[string]time.Time, error) {
	return map[string]time.Time{}, nil
}

// TestCloseEndsAHeartbeatInAnOutage: a heartbeat waiting out a database
// outage when the transport is closed gives up, and Close returns once
// it has: no goroutine of the transport outlives Close (in the fleet
// simulation, one did and outlived its schedule, memory seed 1947). Were
// the beat left waiting, the bubble would end with a blocked goroutine
// and synctest would fail the test.
func TestCloseEndsAHeartbeatInAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &stuckBeats{State: NewMemoryState(), waiting: make(chan struct{})}
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
		})
		tr, err := New(Options{NoAutoProviders: true, Base: base, DisableCache: true, State: st, Holder: "test-holder"})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodGet, "http://quiet.example.test/r", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		// The second beat, HeartbeatEvery later, finds the outage.
		time.Sleep(HeartbeatEvery + time.Millisecond)
		synctest.Wait()
		select {
		case <-st.waiting:
		default:
			t.Fatal("no heartbeat after HeartbeatEvery")
		}
		start := time.Now()
		tr.Close()
		if d := time.Since(start); d != 0 {
			t.Errorf("Close took %v (the beat's own timeout?), want at once", d)
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.ended != context.Canceled {
			t.Errorf("the waiting beat ended with %v, want context.Canceled (by Close)", st.ended)
		}
	})
}
