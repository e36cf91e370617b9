package batch_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/batch"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

// aheadClock is the bubble's clock an hour ahead: a transport's injected
// clock that is not the system's.
type aheadClock struct{}

func (aheadClock) Now() time.Time { return time.Now().Add(time.Hour) }
func (aheadClock) NewTimer(d time.Duration) transport.Timer {
	return timer{time.NewTimer(d)}
}

type timer struct{ t *time.Timer }

func (t timer) C() <-chan time.Time { return t.t.C }
func (t timer) Stop() bool          { return t.t.Stop() }

// A batch times its waits on its transport's clock, whose times a
// WaitError names: on the system's, a transport clock an hour ahead made
// every wait an hour longer. And each wait in the batch is the
// transport's EventWaited, as a wait inside RoundTrip would be.
func TestWaitsOnTheTransportsClockAreEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var waited []transport.Event
		api := newSimAPIOpts(t, sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Hour,
			Resources: map[string]sim.ResourceConfig{"search": {Limit: 1, Window: time.Minute}},
			Tokens:    []sim.TokenConfig{{Token: "tok-batch-1", Owner: "alice"}}}, nil, func(o *transport.Options) {
			o.Clock = aheadClock{}
			o.OnEvent = func(e transport.Event) {
				if e.Kind == transport.EventWaited {
					mu.Lock()
					waited = append(waited, e)
					mu.Unlock()
				}
			}
		}, "tok-batch-1")
		f := newFinished()
		b := batch.New(api.t, batch.Options{InFlight: 1, OnResult: f.onResult})
		b.Add(get(t, api.base+"/search/repositories?q=1"), batch.Key("first"))
		b.Add(get(t, api.base+"/search/repositories?q=2"), batch.Key("second"))
		if err := b.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := f.res["second"]; r.Err != nil || r.Waits == 0 {
			t.Fatalf("second: %v after %d waits; want an answer after a wait", r.Err, r.Waits)
		}
		if at := f.at["second"]; at < time.Minute || at > time.Minute+5*time.Second {
			t.Errorf("second answered after %v; want the search's minute", at)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(waited) != 1 || waited[0].Resource != "search" || waited[0].Wait < 55*time.Second || waited[0].Wait > time.Minute+5*time.Second {
			t.Errorf("EventWaited %+v; want one, for search, of about a minute", waited)
		}
	})
}
