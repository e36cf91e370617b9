package fetch

import (
	"context"
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper/batch"
	"github.com/ratekeeper/ratekeeper/tasks"
	"github.com/ratekeeper/ratekeeper/transport"
)

// claimAhead is how many tasks this process claims per request in flight
// (Options.Concurrency): a claimed task whose quota cannot go waits in the
// scheduler, not in a sender, so the process holds more tasks than it
// sends, and those that can go are at hand.
const claimAhead = 8

// scheduler sends the requests of the task workers through one batch:
// Concurrency senders, each taking the request whose quota can go, by the
// task's priority, then its age (its ID: the order of submission). A
// request that waits for one bucket, scope or points budget waits in the
// batch, holding no sender; one that would wait longer than the client's
// MaxWait gets the transport's error saying when quota returns, and its
// task is rescheduled to then (a durable sleep) as before. A waiting task
// holds one of the process's claims (claimAhead per sender), not a
// sender. A scope (a limit the server does not announce) may hold half
// the claims at most: its further requests are rescheduled until it
// returns, so a paused scope's requests, hidden among others in the
// queue, cannot crowd out the tasks that can go. Other waits keep their
// claims: rescheduling every claimed task that cannot go made each a
// database write per window (eight processes on one bucket took 3–8 ×
// their ideal), and claiming more per sender concentrated a fleet's
// tasks in a few processes (16 per sender: up to 3 ×).
type scheduler struct {
	b       *batch.Batch
	maxWait time.Duration
	stop    context.CancelFunc
	done    chan struct{}
}

// schedule starts the scheduler over client's transport and returns a
// client that sends through it.
func schedule(client *http.Client, inFlight int, maxWait time.Duration) (*http.Client, *scheduler) {
	base := client.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	if maxWait <= 0 {
		maxWait = transport.DefaultMaxWait
		if t, ok := base.(interface{ MaxWait() time.Duration }); ok {
			maxWait = t.MaxWait()
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &scheduler{b: batch.New(base, batch.Options{InFlight: inFlight, KeepRunning: true,
		MaxScopeWaiting: inFlight * claimAhead / 2}), maxWait: maxWait, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = s.b.Run(ctx)
	}()
	c := *client
	c.Transport = s
	return &c, s
}

func (s *scheduler) RoundTrip(req *http.Request) (*http.Response, error) {
	opts := []batch.Option{batch.MaxWait(s.maxWait)}
	if t := tasks.Running(req.Context()); t != nil {
		// One order for both: priority 1 goes first (docs/priority.md).
		opts = append(opts, batch.Priority(t.Priority), batch.Order(uint64(t.ID)))
	}
	return s.b.Do(req, opts...)
}

// close stops the scheduler once the task workers have stopped.
func (s *scheduler) close() {
	s.stop()
	<-s.done
}

// adjust moves the tasks that this process runs but that wait in the
// scheduler from Running to Ready (their quota can go, a sender is busy)
// or Sleeping (they wait for quota, the first until NextAt).
func (s *scheduler) adjust(snap *Snapshot) {
	p := s.b.Progress()
	waiting := 0
	for _, w := range p.Waiting {
		waiting += w.Requests
		if !w.OnAnswer && (snap.NextAt.IsZero() || w.Until.Before(snap.NextAt)) {
			snap.NextAt = w.Until
		}
	}
	held := min(waiting+p.Ready, max(snap.Running-snap.Elsewhere, 0))
	snap.Running -= held
	snap.Ready += min(p.Ready, held)
	snap.Sleeping += held - min(p.Ready, held)
}
