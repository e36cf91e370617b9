package tasks

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
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
//	queue                     queueFor(type): one River queue per type
//	priority                  Priority (raised by a rate-limit reschedule)
//	args                      {"input": <task input>, "unique_key": "..."}
//	max_attempts              MaxRetries + 1
//	scheduled_at              AvailableAt
//	metadata.ratekeeper       {"max_reschedules": N, "timeout_ms": T, "priority": P}, set at submit
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
	// Priority is the priority the task was submitted with, which a raise
	// on a rate-limit reschedule starts from (0 on tasks submitted before
	// priorities: the row's priority then).
	Priority int `json:"priority,omitempty"`
}

// queueName is the River queue of http tasks, and the prefix of the others'
// queues, so that other River users of the same database keep theirs apart.
const queueName = "ratekeeper"

// queueFor returns the River queue holding tasks of type typ. Each type has
// its own queue so that a worker claims only tasks of the types it handles
// (River's producer takes any job of the queues it works, whatever its
// kind): a task of a type no running worker handles stays pending instead
// of failing on an unknown kind. http keeps the original queue, so older
// databases need no change for it.
//
// River's queue names allow runs of lower-case letters and digits joined by
// single _ | or -, at most 64 characters; a type may hold . and : too. The
// type's letters and digits keep the name readable, and a digest of the
// whole type keeps two types from ever sharing a queue.
func queueFor(typ string) string {
	if typ == HTTPType {
		return queueName
	}
	var slug []byte
	for i := 0; i < len(typ) && len(slug) < 40; i++ {
		c := typ[i]
		switch {
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
			slug = append(slug, c)
		case len(slug) > 0 && slug[len(slug)-1] != '_':
			slug = append(slug, '_')
		}
	}
	slug = bytes.TrimRight(slug, "_")
	sum := sha256.Sum256([]byte(typ))
	return queueName + "-" + string(slug) + "-" + hex.EncodeToString(sum[:4])
}

// ours reports whether row is a ratekeeper task (River may hold other
// applications' jobs in the same tables).
func ours(row *rivertype.JobRow) bool {
	return row != nil && row.Queue == queueFor(row.Kind)
}

// oursSQL selects the rows of ratekeeper's queues in River's job list
// (whose Queues filter needs every name, and the types are open-ended).
const oursSQL = "(queue = '" + queueName + "' OR queue LIKE '" + queueName + "-%')"

// record is the bookkeeping stored as River's recorded output.
type record struct {
	// Result is the handler's result once completed.
	Result json.RawMessage `json:"result"`
	// Retries counts failed attempts that were retried.
	Retries int `json:"retries"`
	// Interrupted counts River snoozes that were shutdowns, not reschedules.
	Interrupted int `json:"interrupted"`
	// Unsent counts those of them that sent nothing: given back while
	// they waited (ErrStopping), so no later attempt need fear a
	// request of theirs reached the server (mayHaveSent).
	Unsent int `json:"unsent,omitempty"`
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
		Priority:        row.Priority,
		Attempt:         row.Attempt + meta.Snoozes,
		RetryCount:      rec.Retries,
		MaxRetries:      max(row.MaxAttempts-1, 0),
		RescheduleCount: max(meta.Snoozes-rec.Interrupted, 0),
		unsent:          rec.Unsent,
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

// priority is the River priority the task is submitted with.
func (r resolvedOptions) priority() int { return r.meta.Priority }

// resolve checks o and applies the defaults.
func (o SubmitOptions) resolve() (resolvedOptions, error) {
	var r resolvedOptions
	switch {
	case o.MaxRetries == 0:
		r.maxAttempts = DefaultMaxRetries + 1
	case o.MaxRetries == NoRetries:
		r.maxAttempts = 1
	case o.MaxRetries > 0 && o.MaxRetries <= RetriesLimit:
		r.maxAttempts = o.MaxRetries + 1
	default:
		return r, fmt.Errorf("%w: max retries %d: use 0 for the default (%d), 1 to %d, or NoRetries", ErrInvalid, o.MaxRetries, DefaultMaxRetries, RetriesLimit)
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
	switch {
	case o.Priority == 0:
		r.meta.Priority = DefaultPriority
	case o.Priority >= HighestPriority && o.Priority <= LowestPriority:
		r.meta.Priority = o.Priority
	default:
		return r, fmt.Errorf("%w: priority %d: use %d (first) to %d (last), or 0 for the default (%d)", ErrInvalid, o.Priority, HighestPriority, LowestPriority, DefaultPriority)
	}
	if len(o.UniqueKey) > UniqueKeyLimit {
		return r, fmt.Errorf("%w: unique key of %d bytes: at most %d", ErrInvalid, len(o.UniqueKey), UniqueKeyLimit)
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
	// Priority is the task's priority now; BasePriority the one it was
	// submitted with.
	Priority, BasePriority int
}

// ending is how the handler's context ended, if it did.
type ending struct {
	cancelled bool // Queue.Cancel while running
	stopping  bool // the worker is shutting down
	unsent    bool // given back before anything was sent (ErrStopping)
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
	// rateLimited marks a reschedule asked for by an error with RetryAt
	// (quota returns then), as opposed to the handler's own Reschedule.
	rateLimited bool
	// local marks an interruption by a LocalFault: the worker stops.
	local bool
	// unsent marks an interruption of an attempt that sent nothing.
	unsent bool
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
		return outcome{kind: EventInterrupted, unsent: end.unsent}
	}
	if IsLocalFault(herr) {
		// Not the task's doing: no outcome, no retry spent.
		return outcome{kind: EventInterrupted, err: herr, local: true, unsent: end.unsent}
	}
	if IsPermanent(herr) {
		return outcome{kind: EventFailed, err: herr, early: true}
	}
	var delay time.Duration
	reschedule, rateLimited := false, false
	var re *RescheduleError
	var ra retryAter
	switch {
	case errors.As(herr, &re):
		delay, reschedule = re.Delay, true
	case errors.As(herr, &ra):
		delay, reschedule, rateLimited = max(ra.RetryAt().Sub(now), 0), true, true
	}
	if reschedule {
		if f.MaxReschedules != 0 && f.Reschedules >= max(f.MaxReschedules, 0) {
			return outcome{kind: EventFailed, err: fmt.Errorf("max reschedules (%d) exceeded", max(f.MaxReschedules, 0)), early: true}
		}
		return outcome{kind: EventRescheduled, delay: delay, rateLimited: rateLimited}
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
		if o.unsent {
			rec.Unsent++
		}
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
