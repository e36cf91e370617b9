package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

// TestAwaitHandsTheWakeOnAfterDeciding: requests that wait outside the
// transport (WaitError.Await, as the gateway's do) on a first probe are
// woken by its answer one after the other, as the transport's own waiters
// are: the oldest at the answer, the next only once the oldest has asked
// again (its next attempt, carrying the wake, hands it on after deciding)
// — not all at once, which on a shared state would be as many concurrent
// transactions as waiters.
func TestAwaitHandsTheWakeOnAfterDeciding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The probe answers when gate closes, the others when later
		// does: the first woken request's next attempt is still out
		// (its answer wakes nobody yet) when the other must be woken.
		gate, later := make(chan struct{}), make(chan struct{})
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.URL.Path == "/r0" {
				<-gate
			} else {
				<-later
			}
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
		})
		tr, err := New(Options{NoAutoProviders: true, Base: base, DisableCache: true, MaxWait: time.Nanosecond})
		if err != nil {
			t.Fatal(err)
		}
		get := func(ctx context.Context, i int) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://quiet.example.test/r%d", i), nil)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
		probed := make(chan error, 1)
		go func() { probed <- get(context.Background(), 0) }()
		synctest.Wait() // the probe is out

		var waits [2]*WaitError
		for i := range waits {
			if err := get(context.Background(), i+1); !errors.As(err, &waits[i]) {
				t.Fatalf("request %d behind the probe: %v, want a *WaitError", i+1, err)
			}
		}
		type woken struct {
			i   int
			ctx context.Context
		}
		wake := make(chan woken, 2)
		for i, we := range waits {
			go func() {
				ctx, err := we.Await(context.Background(), time.Hour)
				if err != nil {
					t.Errorf("await %d: %v", i+1, err)
				}
				wake <- woken{i, ctx}
			}()
		}
		synctest.Wait()
		close(gate) // the probe's answer
		if err := <-probed; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		first := <-wake
		select {
		case w := <-wake:
			t.Fatalf("request %d woken with request %d, before it asked again", w.i+1, first.i+1)
		default:
		}
		sent := make(chan error, 1)
		go func() { sent <- get(first.ctx, first.i+1) }()
		synctest.Wait()
		select {
		case <-wake:
		default:
			t.Error("the other waiter was not woken once the first had asked again")
		}
		close(later)
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	})
}
