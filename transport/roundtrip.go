package transport

import (
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/provider"
)

// rttEstimate is a provider's typical round trip, an exponentially
// weighted average of its answers' times: how soon a request in flight is
// expected back, which is when a request waiting for its concurrency slot
// (or for a first probe, or the learning turn) can expect to go. It is
// the server's own number, so these waits scale with the server.
type rttEstimate struct {
	mu sync.Mutex
	d  time.Duration
}

// defaultRoundTrip is the estimate before any answer came back.
const defaultRoundTrip = time.Second

// observeRoundTrip adds one answer's round trip d.
func (t *Transport) observeRoundTrip(p *provider.Provider, d time.Duration) {
	if d < 0 {
		return
	}
	v, ok := t.rtts.Load(p) // keyed by pointer: no allocation on the hot path
	if !ok {
		v, _ = t.rtts.LoadOrStore(p, &rttEstimate{})
	}
	e := v.(*rttEstimate)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.d == 0 {
		e.d = d
		return
	}
	e.d += (d - e.d) / 8 // TCP's SRTT weight
}

// roundTrip is p's typical round trip, at least a millisecond.
func (t *Transport) roundTrip(p *provider.Provider) time.Duration {
	v, ok := t.rtts.Load(p)
	if !ok {
		return defaultRoundTrip
	}
	e := v.(*rttEstimate)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.d == 0 {
		return defaultRoundTrip
	}
	return max(e.d, time.Millisecond)
}
