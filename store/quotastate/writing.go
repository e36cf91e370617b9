package quotastate

import (
	"context"
	"sync"
)

// writings counts the transactions carrying settles, so that Flush can
// wait for those already under way and for no later one. It waits on a
// channel, not on a lock: a transaction may be waiting out a database
// outage on a timer (store.Outage), and a wait on a channel is one that
// testing/synctest can see is blocked, so a simulated clock goes on while
// Flush waits (a sync.RWMutex would stop it).
type writings struct {
	mu   sync.Mutex
	gen  uint64               // the generation new transactions join
	open map[uint64]*writeGen // generations with transactions under way
}

type writeGen struct {
	n    int
	done chan struct{} // closed when n falls to 0
}

// begin marks a transaction under way; call the function it returns when
// it ends.
func (w *writings) begin() (end func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open == nil {
		w.open = map[uint64]*writeGen{}
	}
	g, gen := w.open[w.gen], w.gen
	if g == nil {
		g = &writeGen{done: make(chan struct{})}
		w.open[gen] = g
	}
	g.n++
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if g.n--; g.n == 0 {
			close(g.done)
			delete(w.open, gen)
		}
	}
}

// wait returns once every transaction begun before it ended, or ctx did.
func (w *writings) wait(ctx context.Context) error {
	w.mu.Lock()
	w.gen++
	var dones []chan struct{}
	for _, g := range w.open {
		dones = append(dones, g.done)
	}
	w.mu.Unlock()
	for _, d := range dones {
		select {
		case <-d:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
