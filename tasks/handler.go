package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// HandlerFunc does the work of one task attempt. It returns the task's
// result (any JSON, or nil) or an error:
//
//   - Reschedule(delay), or any error whose chain holds a RetryAt() time.Time
//     method (a rate limit: the task's priority is raised too), puts the
//     task back to pending until then (a durable sleep, counted as a
//     reschedule, not a retry);
//   - Permanent(err) fails the task at once;
//   - any other error fails the attempt: it is retried with exponential
//     backoff until MaxRetries is spent, then the task fails.
//
// ctx ends when the attempt times out, the task is cancelled or the worker
// shuts down; a handler should return promptly then.
type HandlerFunc func(ctx context.Context, t *Task) (result json.RawMessage, err error)

// builtinTypes are the types every Queue handles itself.
var builtinTypes = []string{HTTPType}

var registry = struct {
	sync.RWMutex
	handlers map[string]HandlerFunc
}{handlers: map[string]HandlerFunc{}}

// Handle registers fn as the handler of task type typ for every Queue in
// the process (Options.Handlers adds handlers to one Queue only). Register
// handlers before calling Queue.Work: a worker handles the types known when
// it starts, and claims tasks of those types only; tasks of other types
// wait for a worker that handles them.
//
// Like http.Handle, it panics on a malformed type, a nil fn, a type
// registered twice or a built-in type.
func Handle(typ string, fn HandlerFunc) {
	if err := validType(typ); err != nil {
		panic("tasks.Handle: " + err.Error())
	}
	if fn == nil {
		panic("tasks.Handle: nil handler for type " + typ)
	}
	if slices.Contains(builtinTypes, typ) {
		panic("tasks.Handle: type " + typ + " is built in; set Options.Handlers to replace it for one Queue")
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.handlers[typ]; dup {
		panic("tasks.Handle: type " + typ + " registered twice")
	}
	registry.handlers[typ] = fn
}

// registered returns a copy of the process-wide handlers.
func registered() map[string]HandlerFunc {
	registry.RLock()
	defer registry.RUnlock()
	return maps.Clone(registry.handlers)
}

// RescheduleError is what Reschedule returns: a request to run the task
// again after Delay. Handlers return it; tests can find it with errors.As.
type RescheduleError struct {
	Delay time.Duration
}

func (e *RescheduleError) Error() string {
	return "reschedule in " + HumanDuration(e.Delay)
}

// Reschedule returns the error a handler returns to put its task back to
// pending with AvailableAt = now + delay: a durable sleep that frees the
// worker at once, survives restarts, and counts toward MaxReschedules rather
// than MaxRetries. A delay of 0 puts the task at the back of the queue:
// every task already waiting runs first. There is no upper bound.
//
// A negative delay is a programming error: Reschedule then returns an
// ordinary error that fails the attempt and says so.
func Reschedule(delay time.Duration) error {
	if delay < 0 {
		return fmt.Errorf("tasks.Reschedule(%s): the delay must be 0 (back of the queue) or positive", delay)
	}
	return &RescheduleError{Delay: delay}
}

// retryAter is the bridge to the rate-limit-aware HTTP client: when the wait
// for quota is longer than the client may block, it returns an error with
// the time quota returns. The interface is matched structurally so that this
// package depends on no client package.
type retryAter interface {
	RetryAt() time.Time
}

// permanentError marks an error that must not be retried.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that the task fails at once instead of being
// retried: for input that can never work, say. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err's chain holds an error made by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
