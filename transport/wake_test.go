package transport

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/provider"
)

// wakingState is one State shared by several transports, as processes
// share a database, that wakes the other transports' waiters at each
// settle (as store/quotastate does through the database), and counts
// reservations.
type wakingState struct {
	State
	mu       sync.Mutex
	wakers   []func()
	reserves atomic.Int64
}

func (s *wakingState) OnWake(fn func(), _ func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wakers = append(s.wakers, fn)
}

func (s *wakingState) Reserve(ctx context.Context, p *ReserveParams) (Decision, error) {
	s.reserves.Add(1)
	return s.State.Reserve(ctx, p)
}

func (s *wakingState) Settle(ctx context.Context, p *SettleParams) error {
	err := s.State.Settle(ctx, p)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, fn := range s.wakers {
		fn() // the sender's own waiters too: one spare wake, harmless
	}
	return err
}

// TestWaiterSleepsUntilAnotherProcessAnswers: a request of one process
// waiting for a concurrency slot that a request of another process holds
// does not ask again every round trip while it waits: it asks once, sleeps,
// and is woken by the other process's answer.
func TestWaiterSleepsUntilAnotherProcessAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := &wakingState{State: NewMemoryState()}
		release := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(20 * time.Millisecond) // the round trip both learn
			if r.URL.Path == "/slow" {
				<-release
			}
			w.Header().Set("X-RateLimit-Limit", "5000")
			w.Header().Set("X-RateLimit-Remaining", "4000")
			w.Header().Set("X-RateLimit-Reset", "4102444800")
			io.WriteString(w, "{}")
		})
		tune := func(o *Options) {
			o.SkipValidation, o.State, o.DisableCache = true, shared, true
			o.Providers.Lookup("github").Secondary = provider.Secondary{MaxConcurrency: 1}
		}
		a, b := handlerTransport(t, h, tune), handlerTransport(t, h, tune)
		get := func(tr *Transport, path string) {
			resp, err := tr.RoundTrip(httpGet(path))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		}
		get(a, "/first") // the bucket is known: later waits are on the slot
		get(b, "/first")
		var wg sync.WaitGroup
		wg.Go(func() { get(a, "/slow") })
		time.Sleep(30 * time.Millisecond) // a's request holds the one slot
		before := shared.reserves.Load()
		done := make(chan struct{})
		wg.Go(func() { get(b, "/other"); close(done) })
		time.Sleep(900 * time.Millisecond) // b waits, asking how often?
		select {
		case <-done:
			t.Fatal("the second request did not wait for the slot")
		default:
		}
		if n := shared.reserves.Load() - before; n != 1 {
			t.Errorf("the waiting request asked %d times in 900 ms, want once (not every round trip)", n)
		}
		close(release)
		// Well before the 1 s a lost wake would cost: the answer woke it.
		time.Sleep(100 * time.Millisecond)
		select {
		case <-done:
		default:
			t.Fatal("the other process's answer did not wake the waiting request")
		}
		wg.Wait()
	})
}
