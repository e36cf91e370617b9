// Package taskbatch sends the requests of a process's task workers
// through one batch (package batch), so that a task whose quota cannot go
// waits holding a claim, not a sender. `ratekeeper fetch` and
// `ratekeeper tasks worker` both send this way.
//
// The process sends at most InFlight requests at once and claims
// ClaimAhead tasks per request in flight (Claims). Each sender takes the
// request whose quota can go, by the task's priority (1 first, as River
// claims: docs/priority.md), then its age (its ID: the order of
// submission). A request that waits for one bucket, scope or points
// budget waits in the batch, holding no sender; one that would wait
// longer than the client's max wait gets the transport's error saying
// when quota returns, and its task is rescheduled to then (a durable
// sleep) as before. When the worker stops, the tasks whose requests only
// wait go back to pending at once (tasks.Stopping), and those at the
// server finish.
//
// A scope (a limit the server does not announce) may hold half the claims
// at most: its further requests are rescheduled until it returns, so a
// paused scope's requests, hidden among others in the queue, cannot crowd
// out the tasks that can go. Other waits keep their claims: rescheduling
// every claimed task that cannot go made each a database write per window
// (eight processes on one bucket took 3–8 × their ideal), and claiming
// more per sender concentrated a fleet's tasks in a few processes (16 per
// sender: up to 3 ×).
package taskbatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper/batch"
	"github.com/ratekeeper/ratekeeper/tasks"
	"github.com/ratekeeper/ratekeeper/transport"
)

// ClaimAhead is how many tasks a process claims per request in flight: a
// claimed task whose quota cannot go waits in the scheduler, not in a
// sender, so the process holds more tasks than it sends, and those that
// can go are at hand.
const ClaimAhead = 8

// Claims is how many tasks a process sending inFlight requests at once
// claims: ClaimAhead per request in flight, within tasks.ConcurrencyLimit.
func Claims(inFlight int) int { return min(inFlight*ClaimAhead, tasks.ConcurrencyLimit) }

// Scheduler sends the requests of the task workers through one batch:
// inFlight senders, each taking the request whose quota can go, by the
// task's priority, then its age.
type Scheduler struct {
	b       *batch.Batch
	maxWait time.Duration
	stop    context.CancelFunc
	done    chan struct{}
}

// Start starts a scheduler over client's transport sending at most
// inFlight requests at once, and returns a client that sends through it.
// maxWait is the longest a request waits for quota before its task is
// rescheduled; zero means the transport's own (MaxWait), else
// transport.DefaultMaxWait. Close it once the task workers have stopped.
func Start(client *http.Client, inFlight int, maxWait time.Duration) (*http.Client, *Scheduler) {
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
	s := &Scheduler{b: batch.New(base, batch.Options{InFlight: inFlight, KeepRunning: true,
		MaxScopeWaiting: Claims(inFlight) / 2}), maxWait: maxWait, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = s.b.Run(ctx)
	}()
	c := *client
	c.Transport = s
	return &c, s
}

// RoundTrip sends req through the batch, ordered by the priority and ID
// of the task running in req's context (a request outside a task has
// batch.DefaultPriority and goes after the tasks of its priority).
func (s *Scheduler) RoundTrip(req *http.Request) (*http.Response, error) {
	opts := []batch.Option{batch.MaxWait(s.maxWait)}
	if t := tasks.Running(req.Context()); t != nil {
		// One order for both: priority 1 goes first (docs/priority.md).
		opts = append(opts, batch.Priority(t.Priority), batch.Order(uint64(t.ID)))
	}
	if stopping := tasks.Stopping(req.Context()); stopping != nil {
		// A task whose request only waits goes back to pending as soon
		// as its worker stops; one at the server finishes.
		opts = append(opts, batch.StopWaiting(stopping))
	}
	resp, err := s.b.Do(req, opts...)
	if errors.Is(err, batch.ErrStoppedWaiting) {
		err = fmt.Errorf("%w: %w", tasks.ErrStopping, err)
	}
	return resp, err
}

// Progress says what waits in the scheduler (see batch.Progress).
func (s *Scheduler) Progress() batch.Progress { return s.b.Progress() }

// Close stops the scheduler once the task workers have stopped.
func (s *Scheduler) Close() {
	s.stop()
	<-s.done
}
