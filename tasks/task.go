package tasks

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// State is where a task is in its life. River keeps finer states; they map
// onto these five:
//
//	pending    River available, scheduled, retryable or pending: waiting for
//	           AvailableAt, first run or after a reschedule or a failed attempt
//	running    a worker has claimed it and its handler is running
//	completed  the handler returned a result
//	failed     River discarded, or cancelled by ratekeeper itself: retries or
//	           reschedules ran out, or the handler returned Permanent(err)
//	cancelled  someone cancelled it (Queue.Cancel, `ratekeeper tasks cancel`)
type State string

// The states of a task.
const (
	StatePending   State = "pending"
	StateRunning   State = "running"
	StateCompleted State = "completed"
	StateFailed    State = "failed"
	StateCancelled State = "cancelled"
)

// States lists every State in life order.
var States = []State{StatePending, StateRunning, StateCompleted, StateFailed, StateCancelled}

// Final reports whether a task in state s will never run again.
func (s State) Final() bool {
	return s == StateCompleted || s == StateFailed || s == StateCancelled
}

// ParseState returns the State named s, or an error listing the valid names.
func ParseState(s string) (State, error) {
	for _, st := range States {
		if string(st) == strings.ToLower(strings.TrimSpace(s)) {
			return st, nil
		}
	}
	names := make([]string, len(States))
	for i, st := range States {
		names[i] = string(st)
	}
	return "", fmt.Errorf("unknown task state %q (valid: %s)", s, strings.Join(names, ", "))
}

// Defaults and sentinels for SubmitOptions.
const (
	// DefaultMaxRetries is how many times a failed attempt is retried when
	// SubmitOptions.MaxRetries is zero.
	DefaultMaxRetries = 3
	// DefaultTimeout bounds one attempt when SubmitOptions.Timeout is zero.
	DefaultTimeout = 5 * time.Minute
	// NoRetries as SubmitOptions.MaxRetries fails a task on its first error.
	NoRetries = -1
	// NoReschedules as SubmitOptions.MaxReschedules (and Task.MaxReschedules)
	// fails a task the first time it asks to be rescheduled.
	NoReschedules = -1
	// NoTimeout as SubmitOptions.Timeout lets an attempt run until it returns.
	NoTimeout time.Duration = -1
)

// Limits of a submission and of a worker, checked by Submit, Validate and
// Work. Callers that build submissions from user input check against them
// up front, so that a bad value is reported with where it came from.
const (
	// UniqueKeyLimit is the longest SubmitOptions.UniqueKey, in bytes.
	UniqueKeyLimit = 1000
	// RetriesLimit is the largest SubmitOptions.MaxRetries.
	RetriesLimit = 9_999
	// ConcurrencyLimit is the largest WorkOptions.Concurrency.
	ConcurrencyLimit = 10_000
)

// Priorities are River's: 1 runs first, 4 last. Among available tasks a
// worker claims the one of the best priority, then the one available
// earliest.
const (
	// HighestPriority runs before everything else. New work gets it only
	// when asked for; a task of priority 2 that was rescheduled for a rate
	// limit is raised to it (see WorkOptions.RateLimitedPriority), so that
	// it runs before newer work once its quota returns.
	HighestPriority = 1
	// DefaultPriority is the priority of a task submitted without one.
	DefaultPriority = 2
	// LowestPriority runs after everything else.
	LowestPriority = 4
)

// Task is one unit of durable work as stored in the database.
type Task struct {
	ID    int64           `json:"id"`
	Type  string          `json:"type"`
	Input json.RawMessage `json:"input"`
	State State           `json:"state"`
	// Priority is 1 (first) to 4 (last): the submitted one, or one better
	// after a rate-limit reschedule raised it.
	Priority int `json:"priority"`

	// Attempt counts the handler runs so far, the running one included,
	// whatever their outcome (reschedules included).
	Attempt int `json:"attempt"`
	// RetryCount counts attempts that failed with an error and were retried.
	RetryCount int `json:"retry_count"`
	// MaxRetries is how many failed attempts are retried before the task
	// fails.
	MaxRetries int `json:"max_retries"`
	// RescheduleCount counts the times the handler asked to run later
	// (Reschedule, or an error with RetryAt) and was put back to pending.
	RescheduleCount int `json:"reschedule_count"`
	// MaxReschedules bounds RescheduleCount: 0 means unlimited and
	// NoReschedules means none allowed. (In JSON: null for unlimited, 0 for
	// none.)
	MaxReschedules int `json:"-"`

	// AvailableAt is the earliest time a worker may claim the task: its
	// submit time or --at, then now+delay after a reschedule or the backoff
	// after a failed attempt.
	AvailableAt time.Time `json:"available_at"`
	// Timeout bounds one attempt; NoTimeout means none. (In JSON: a Go
	// duration such as "5m0s", or null for none.)
	Timeout   time.Duration `json:"-"`
	CreatedAt time.Time     `json:"created_at"`
	UpdatedAt time.Time     `json:"updated_at"`
	// FinishedAt is when the task reached a final state, or nil.
	FinishedAt *time.Time `json:"finished_at,omitempty"`

	// LastError is the error of the latest failed attempt, if any.
	LastError string `json:"last_error,omitempty"`
	// Result is what the handler returned, once completed.
	Result json.RawMessage `json:"result,omitempty"`
	// UniqueKey is the SubmitOptions.UniqueKey the task was submitted with.
	UniqueKey string `json:"unique_key,omitempty"`
	// Worker is the worker that claimed the latest attempt.
	Worker string `json:"worker,omitempty"`
	// Waiting says why a pending task that is due has not started: no
	// worker runs on the database, or none of those running handles its
	// type. Set by Queue.List and Queue.Get; empty otherwise.
	Waiting string `json:"waiting,omitempty"`
	// WorkerGone says, for a running task, that the worker of its attempt
	// is gone, and why (its process ended, or its heartbeat stopped): the
	// next worker to start on the database, or any running one within
	// HeartbeatInterval, takes it back. Set by Queue.List and Queue.Get.
	WorkerGone string `json:"worker_gone,omitempty"`
	// unsent counts the interruptions of attempts that sent nothing:
	// given back while they waited as their worker stopped (ErrStopping).
	unsent int
}

// SubmitOptions tune one submitted task. The zero value gives the defaults.
type SubmitOptions struct {
	// MaxRetries is how many failed attempts are retried (with exponential
	// backoff) before the task fails: 0 means DefaultMaxRetries, NoRetries
	// means none.
	MaxRetries int
	// MaxReschedules bounds reschedules: 0 means unlimited, NoReschedules
	// means the first reschedule fails the task. When a handler asks for one
	// more reschedule than allowed, the task fails with "max reschedules (N)
	// exceeded".
	MaxReschedules int
	// Timeout bounds one attempt: 0 means DefaultTimeout, NoTimeout none.
	// A timed-out attempt counts as a failed attempt.
	Timeout time.Duration
	// At delays the first run; zero means now.
	At time.Time
	// Priority orders the work: 1 runs first, 4 last; 0 means
	// DefaultPriority.
	Priority int
	// UniqueKey makes the submission idempotent: while a task of the same
	// type and key exists and has not failed or been cancelled, submitting
	// again returns that task's id instead of adding a new task.
	UniqueKey string
}

// Submission is one task for Queue.SubmitMany.
type Submission struct {
	Type    string
	Input   json.RawMessage
	Options SubmitOptions
}

// Submitted tells what became of one submission.
type Submitted struct {
	ID int64
	// Duplicate is true when the UniqueKey matched an existing task, whose
	// id is ID; nothing was added.
	Duplicate bool
}

// Filter selects tasks for Queue.List. Zero fields match everything.
type Filter struct {
	State State
	Type  string
	// AfterID lists only tasks with a larger id (for paging).
	AfterID int64
	// Limit caps the number of tasks returned: 0 means 100, at most 10,000.
	Limit int
}

// EventKind names a state change in a task's history.
type EventKind string

// The kinds of history events.
const (
	EventCreated         EventKind = "created"
	EventClaimed         EventKind = "claimed"
	EventRescheduled     EventKind = "rescheduled"
	EventRetried         EventKind = "retried"
	EventCompleted       EventKind = "completed"
	EventFailed          EventKind = "failed"
	EventCancelRequested EventKind = "cancel_requested"
	EventCancelled       EventKind = "cancelled"
	// EventInterrupted: the worker shut down while the attempt ran, or the
	// attempt met a LocalFault (Message says which); the task went back to
	// pending at once, counted neither as a retry nor as a reschedule.
	EventInterrupted EventKind = "interrupted"
	// EventAbandoned: an attempt never reported an outcome (its worker was
	// killed or lost the database); River's rescuer put the task back and
	// the attempt counts as a failed one.
	EventAbandoned EventKind = "abandoned"
	// EventReclaimed: the attempt's worker was known to be gone (Reclaim,
	// Message says how it was known) and the task went back to pending at
	// once, counted neither as a retry nor as a reschedule.
	EventReclaimed EventKind = "reclaimed"
)

// Event is one entry of a task's history.
type Event struct {
	TaskID int64     `json:"task_id"`
	At     time.Time `json:"at"`
	Kind   EventKind `json:"kind"`
	// Attempt is the handler run the event belongs to (0 before the first).
	Attempt int    `json:"attempt"`
	Worker  string `json:"worker,omitempty"`
	// Message is the error for retried, failed and abandoned events.
	Message string `json:"message,omitempty"`
	// Delay is how long until the task is available again (rescheduled,
	// retried). (In JSON: a Go duration such as "1m0s".)
	Delay time.Duration `json:"-"`
	// RescheduleCount and RetryCount are the task's counts after the event.
	RescheduleCount int `json:"reschedule_count"`
	RetryCount      int `json:"retry_count"`
	// Key identifies the event within its task, so that recording it twice
	// stores it once.
	Key string `json:"key"`
}

// MarshalJSON writes the task with its limits in plain JSON terms.
func (t Task) MarshalJSON() ([]byte, error) {
	type plain Task
	var maxReschedules *int
	switch {
	case t.MaxReschedules == NoReschedules:
		maxReschedules = new(int)
	case t.MaxReschedules > 0:
		maxReschedules = &t.MaxReschedules
	}
	var timeout *string
	if t.Timeout > 0 {
		s := t.Timeout.String()
		timeout = &s
	}
	return json.Marshal(struct {
		plain
		MaxReschedules *int    `json:"max_reschedules"`
		Timeout        *string `json:"timeout"`
	}{plain(t), maxReschedules, timeout})
}

// MarshalJSON writes the delay as a Go duration.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	var delay string
	if e.Delay != 0 {
		delay = e.Delay.String()
	}
	return json.Marshal(struct {
		plain
		Delay string `json:"delay,omitempty"`
	}{plain(e), delay})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Event) UnmarshalJSON(b []byte) error {
	type plain Event
	var v struct {
		plain
		Delay string `json:"delay"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*e = Event(v.plain)
	if v.Delay != "" {
		d, err := time.ParseDuration(v.Delay)
		if err != nil {
			return fmt.Errorf("event delay: %w", err)
		}
		e.Delay = d
	}
	return nil
}

// String renders the event for people, e.g. "rescheduled +60s (count 2)".
func (e Event) String() string {
	switch e.Kind {
	case EventClaimed:
		return fmt.Sprintf("claimed by worker %s (attempt %d)", orUnknown(e.Worker), e.Attempt)
	case EventRescheduled:
		return fmt.Sprintf("rescheduled +%s (count %d)", HumanDuration(e.Delay), e.RescheduleCount)
	case EventRetried:
		return fmt.Sprintf("retried after error: %s (retry %d, next in %s)", e.Message, e.RetryCount, HumanDuration(e.Delay))
	case EventFailed:
		return "failed: " + e.Message
	case EventCancelRequested:
		return "cancel requested (takes effect when the running attempt stops)"
	case EventInterrupted:
		if e.Message != "" {
			return fmt.Sprintf("interrupted by a fault on this machine (worker %s): %s; back to pending", orUnknown(e.Worker), e.Message)
		}
		return fmt.Sprintf("interrupted: worker %s shut down; back to pending", orUnknown(e.Worker))
	case EventReclaimed:
		return fmt.Sprintf("attempt %d by worker %s taken back: %s; back to pending", e.Attempt, orUnknown(e.Worker), e.Message)
	case EventAbandoned:
		return fmt.Sprintf("attempt %d by worker %s abandoned: %s", e.Attempt, orUnknown(e.Worker), e.Message)
	default:
		return string(e.Kind)
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

// HumanDuration renders d compactly: "0s", "250ms", "60s", "1h30m0s".
func HumanDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Minute:
		if d%time.Second == 0 {
			return fmt.Sprintf("%ds", d/time.Second)
		}
		return fmt.Sprintf("%.1fs", d.Seconds())
	default:
		return d.Round(time.Second).String()
	}
}

// Errors callers can test for with errors.Is.
var (
	// ErrNotFound: no task has that id in this database.
	ErrNotFound = errors.New("task not found")
	// ErrFinished: the task already reached a final state.
	ErrFinished = errors.New("task already finished")
	// ErrUnknownType: no handler is registered for the task type.
	ErrUnknownType = errors.New("unknown task type")
	// ErrInvalid: a submission or option is malformed.
	ErrInvalid = errors.New("invalid task")
)

// typeRE is the shape of a task type: lower case, digits and . _ : -,
// starting with a letter. It is a subset of what River accepts as a job
// kind, so a type is always a valid kind.
var typeRE = regexp.MustCompile(`^[a-z][a-z0-9._:\-]{1,63}$`)

func validType(typ string) error {
	if !typeRE.MatchString(typ) {
		return fmt.Errorf("%w: task type %q: use 2-64 characters, lower-case letters, digits and . _ : -, starting with a letter", ErrInvalid, typ)
	}
	return nil
}
