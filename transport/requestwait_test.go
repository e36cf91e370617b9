package transport

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// A request's own max wait of 0 (WithMaxWait) returns the wait for quota
// at once as a *WaitError, where the transport's max wait would have slept
// it; the request is not sent.
func TestWithMaxWaitZeroReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 2, Window: time.Minute,
			Tokens: []sim.TokenConfig{{Token: "tok-reqwait-1", Owner: "alice"}}}, []string{"tok-reqwait-1"}, func(o *Options) {
			o.MaxWait = 5 * time.Minute
		})
		for i := range 2 {
			req, _ := http.NewRequest("GET", s.base+"/repos/o/r"+strconv.Itoa(i), nil)
			resp, err := s.t.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
		}
		start := time.Now()
		req, _ := http.NewRequestWithContext(WithMaxWait(context.Background(), 0), "GET", s.base+"/repos/o/r2", nil)
		_, err := s.t.RoundTrip(req)
		var we *WaitError
		if !errors.As(err, &we) {
			t.Fatalf("got %v, want a *WaitError", err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("waited %v; want the WaitError at once", waited)
		}
		if we.MaxWait != 0 || !we.RetryAt().After(start) || we.RetryAt().After(start.Add(time.Minute+time.Second)) {
			t.Errorf("WaitError %+v: want a max wait of 0 and the quota back within the minute", we)
		}
		b, _ := s.srv.Stats().BucketFor("github", "alice", "core")
		if b.Charged != 2 {
			t.Errorf("%d requests charged; want the 2 that went", b.Charged)
		}

		// Without it, the same request sleeps until the window turns.
		start = time.Now()
		req, _ = http.NewRequest("GET", s.base+"/repos/o/r2", nil)
		resp, err := s.t.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		if waited := time.Since(start); waited < 30*time.Second {
			t.Errorf("waited %v without WithMaxWait; want the wait for the window", waited)
		}
	})
}
