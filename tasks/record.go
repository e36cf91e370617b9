package tasks

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/riverqueue/river/rivertype"
)

// This file maps between River's job rows and tasks. It is pure: no I/O,
// time passed in.
//
// Where things live on River's row:
//
//	kind                      task type
//	args                      {"input": <task input>, "unique_key": "..."}
//	max_attempts              MaxRetries + 1
//	scheduled_at              AvailableAt
//	metadata.ratekeeper       {"max_reschedules": N, "timeout_ms": T}, set at submit
//	metadata.snoozes          River's own count of JobSnooze: reschedules + interruptions
//	metadata.output           our record (below), written through river.RecordOutput
//
// The record travels in the same UPDATE River makes to change the job's
// state, so counts, result and the events of that change can never
// disagree with the state, whatever crashes.

// jobArgs is the River job for a task. Its kind is the task type, carried
// in a field River does not serialise.
type jobArgs struct {
	kind      string
	Input     json.RawMessage `json:"input"`
	UniqueKey string          `json:"unique_key,omitempty" river:"unique"`
}

func (a jobArgs) Kind() string { return a.kind }

// submitMeta is metadata.ratekeeper.
type submitMeta struct {
	MaxReschedules int   `json:"max_reschedules"`
	TimeoutMillis  int64 `json:"timeout_ms"`
}

// record is the bookkeeping stored as River's recorded output.
type record struct {
	// Result is the handler's result once completed.
	Result json.RawMessage `json:"result"`
	// Retries counts failed attempts that were retried.
	Retries int `json:"retries"`
	// Interrupted counts River snoozes that were shutdowns, not reschedules.
	Interrupted int `json:"interrupted"`
	// Claims is the latest attempt whose outcome was recorded; a later claim
	// finding a gap knows that attempts were abandoned.
	Claims int `json:"claims"`
	// Failed marks a task that ratekeeper ended early (max reschedules,
	// Permanent): River calls that state cancelled.
	Failed    bool      `json:"failed"`
	UpdatedAt time.Time `json:"updated_at"`
	// Outbox holds events not yet copied into the history table.
	Outbox []Event `json:"outbox"`
}

// rowMeta is what ratekeeper reads from a job row's metadata.
type rowMeta struct {
	Ratekeeper        submitMeta `json:"ratekeeper"`
	Snoozes           int        `json:"snoozes"`
	Output            *record    `json:"output"`
	CancelAttemptedAt *time.Time `json:"cancel_attempted_at"`
}

func decodeMeta(row *rivertype.JobRow) (rowMeta, record, error) {
	var m rowMeta
	if len(row.Metadata) > 0 {
		if err := json.Unmarshal(row.Metadata, &m); err != nil {
			return m, record{}, fmt.Errorf("task %d: unreadable metadata: %w", row.ID, err)
		}
	}
	var rec record
	if m.Output != nil {
		rec = *m.Output
	}
	return m, rec, nil
}

// taskFromRow builds the Task view of a River job row.
func taskFromRow(row *rivertype.JobRow) (*Task, record, error) {
	var args jobArgs
	if err := json.Unmarshal(row.EncodedArgs, &args); err != nil {
		return nil, record{}, fmt.Errorf("task %d: unreadable args: %w", row.ID, err)
	}
	meta, rec, err := decodeMeta(row)
	if err != nil {
		return nil, rec, err
	}
	t := &Task{
		ID:              row.ID,
		Type:            row.Kind,
		Input:           args.Input,
		State:           mapState(row.State, rec.Failed),
		Attempt:         row.Attempt + meta.Snoozes,
		RetryCount:      rec.Retries,
		MaxRetries:      max(row.MaxAttempts-1, 0),
		RescheduleCount: max(meta.Snoozes-rec.Interrupted, 0),
		MaxReschedules:  meta.Ratekeeper.MaxReschedules,
		AvailableAt:     row.ScheduledAt,
		Timeout:         timeoutFromMillis(meta.Ratekeeper.TimeoutMillis),
		CreatedAt:       row.CreatedAt,
		FinishedAt:      row.FinalizedAt,
		UniqueKey:       args.UniqueKey,
	}
	if len(rec.Result) > 0 && string(rec.Result) != "null" {
		t.Result = rec.Result
	}
	if n := len(row.AttemptedBy); n > 0 {
		t.Worker = row.AttemptedBy[n-1]
	}
	t.UpdatedAt = latest(row.CreatedAt, row.AttemptedAt, row.FinalizedAt, &rec.UpdatedAt)
	if n := len(row.Errors); n > 0 {
		t.LastError = cleanRiverError(row.Errors[n-1].Error)
		t.UpdatedAt = latest(t.UpdatedAt, &row.Errors[n-1].At)
	}
	return t, rec, nil
}

func latest(first time.Time, more ...*time.Time) time.Time {
	out := first
	for _, t := range more {
		if t != nil && t.After(out) {
			out = *t
		}
	}
	return out
}

// cleanRiverError drops the prefix River puts on errors wrapped by
// JobCancel.
func cleanRiverError(s string) string {
	return strings.TrimPrefix(s, "JobCancelError: ")
}

func timeoutFromMillis(ms int64) time.Duration {
	switch {
	case ms < 0:
		return NoTimeout
	case ms == 0:
		return DefaultTimeout
	default:
		return time.Duration(ms) * time.Millisecond
	}
}

// mapState maps River's job states onto ratekeeper's.
func mapState(s rivertype.JobState, failed bool) State {
	switch s {
	case rivertype.JobStateRunning:
		return StateRunning
	case rivertype.JobStateCompleted:
		return StateCompleted
	case rivertype.JobStateDiscarded:
		return StateFailed
	case rivertype.JobStateCancelled:
		if failed {
			return StateFailed
		}
		return StateCancelled
	default: // available, scheduled, retryable, pending
		return StatePending
	}
}

// riverStates returns the River states a ratekeeper state covers. Failed
// and cancelled share River's cancelled and need the record to tell apart.
func riverStates(s State) []rivertype.JobState {
	switch s {
	case StatePending:
		return []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStateRetryable, rivertype.JobStatePending}
	case StateRunning:
		return []rivertype.JobState{rivertype.JobStateRunning}
	case StateCompleted:
		return []rivertype.JobState{rivertype.JobStateCompleted}
	case StateFailed:
		return []rivertype.JobState{rivertype.JobStateDiscarded, rivertype.JobStateCancelled}
	case StateCancelled:
		return []rivertype.JobState{rivertype.JobStateCancelled}
	}
	return nil
}

// resolvedOptions are SubmitOptions with defaults applied, as stored.
type resolvedOptions struct {
	maxAttempts int
	meta        submitMeta
	at          time.Time
	uniqueKey   string
}

// resolve checks o and applies the defaults.
func (o SubmitOptions) resolve() (resolvedOptions, error) {
	var r resolvedOptions
	switch {
	case o.MaxRetries == 0:
		r.maxAttempts = DefaultMaxRetries + 1
	case o.MaxRetries == NoRetries:
		r.maxAttempts = 1
	case o.MaxRetries > 0 && o.MaxRetries < 10_000:
		r.maxAttempts = o.MaxRetries + 1
	default:
		return r, fmt.Errorf("%w: max retries %d: use 0 for the default (%d), a positive number below 10000, or NoRetries", ErrInvalid, o.MaxRetries, DefaultMaxRetries)
	}
	if o.MaxReschedules < NoReschedules {
		return r, fmt.Errorf("%w: max reschedules %d: use 0 for unlimited, a positive number, or NoReschedules", ErrInvalid, o.MaxReschedules)
	}
	r.meta.MaxReschedules = o.MaxReschedules
	switch {
	case o.Timeout == 0:
		r.meta.TimeoutMillis = DefaultTimeout.Milliseconds()
	case o.Timeout == NoTimeout:
		r.meta.TimeoutMillis = -1
	case o.Timeout >= time.Millisecond:
		r.meta.TimeoutMillis = o.Timeout.Milliseconds()
	default:
		return r, fmt.Errorf("%w: timeout %s: use 0 for the default (%s), at least 1ms, or NoTimeout", ErrInvalid, o.Timeout, DefaultTimeout)
	}
	if len(o.UniqueKey) > 1000 {
		return r, fmt.Errorf("%w: unique key of %d bytes: at most 1000", ErrInvalid, len(o.UniqueKey))
	}
	r.at = o.At
	r.uniqueKey = o.UniqueKey
	return r, nil
}

// attemptFacts are what the worker knows about the attempt being decided.
type attemptFacts struct {
	// Attempt is the claim number (Task.Attempt).
	Attempt int
	// RiverAttempt and MaxAttempts decide, as River does, whether a failed
	// attempt is the last.
	RiverAttempt   int
	MaxAttempts    int
	Reschedules    int
	MaxReschedules int
	Retries        int
	Timeout        time.Duration
	// ClaimedAt is when River claimed the attempt (by the database's clock
	// on PostgreSQL).
	ClaimedAt time.Time
}

// ending is how the handler's context ended, if it did.
type ending struct {
	cancelled bool // Queue.Cancel while running
	stopping  bool // the worker is shutting down
	timedOut  bool // the attempt's timeout passed
}

// outcome is the decided end of one attempt.
type outcome struct {
	kind  EventKind // completed, rescheduled, retried, failed, cancelled, interrupted
	delay time.Duration
	err   error
	// early marks a failure before retries ran out (Permanent, max
	// reschedules): River is told to cancel, ratekeeper says failed.
	early bool
}

// decide turns a handler's return into the attempt's outcome.
func decide(f attemptFacts, herr error, end ending, now time.Time, backoff func(retry int) time.Duration) outcome {
	if herr == nil {
		return outcome{kind: EventCompleted}
	}
	if end.cancelled {
		return outcome{kind: EventCancelled, err: herr}
	}
	if end.stopping && !end.timedOut {
		return outcome{kind: EventInterrupted}
	}
	if IsPermanent(herr) {
		return outcome{kind: EventFailed, err: herr, early: true}
	}
	var delay time.Duration
	reschedule := false
	var re *RescheduleError
	var ra retryAter
	switch {
	case errors.As(herr, &re):
		delay, reschedule = re.Delay, true
	case errors.As(herr, &ra):
		delay, reschedule = max(ra.RetryAt().Sub(now), 0), true
	}
	if reschedule {
		if f.MaxReschedules != 0 && f.Reschedules >= max(f.MaxReschedules, 0) {
			return outcome{kind: EventFailed, err: fmt.Errorf("max reschedules (%d) exceeded", max(f.MaxReschedules, 0)), early: true}
		}
		return outcome{kind: EventRescheduled, delay: delay}
	}
	if end.timedOut {
		herr = fmt.Errorf("attempt timed out after %s: %w", f.Timeout, herr)
	}
	if f.RiverAttempt >= f.MaxAttempts {
		return outcome{kind: EventFailed, err: herr}
	}
	return outcome{kind: EventRetried, err: herr, delay: max(backoff(f.Retries+1), 0)}
}

// apply records outcome o of attempt f in rec and returns its event.
func (rec *record) apply(taskID int64, f attemptFacts, o outcome, worker string, now time.Time) Event {
	ev := Event{
		TaskID:          taskID,
		At:              now,
		Kind:            o.kind,
		Attempt:         f.Attempt,
		Worker:          worker,
		Delay:           o.delay,
		RescheduleCount: f.Reschedules,
		Key:             fmt.Sprintf("end-%d", f.Attempt),
	}
	switch o.kind {
	case EventRescheduled:
		ev.RescheduleCount++
	case EventRetried:
		rec.Retries++
	case EventInterrupted:
		rec.Interrupted++
	case EventFailed:
		rec.Failed = o.early
	}
	if o.err != nil {
		ev.Message = o.err.Error()
	}
	ev.RetryCount = rec.Retries
	rec.Claims = f.Attempt
	rec.UpdatedAt = now
	return ev
}

// DefaultBackoff is the wait before retry number retry (1, 2, ...) after a
// failed attempt when Options.Backoff is nil: 1s, 2s, 4s, ... capped at one
// hour, the upper half randomised so that failures of many tasks at once
// do not retry in lock step.
func DefaultBackoff(retry int) time.Duration {
	d := time.Hour
	if retry < 13 {
		d = min(time.Second<<max(retry-1, 0), time.Hour)
	}
	return d/2 + jitter(d/2)
}
