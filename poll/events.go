package poll

import (
	"fmt"
	"strings"
	"time"
)

// EventKind says what an Event reports.
type EventKind string

// Kinds of events.
const (
	// EventPolled: a poll finished (every poll; chatty).
	EventPolled EventKind = "polled"
	// EventChanged: a change was seen and emitted.
	EventChanged EventKind = "changed"
	// EventNext: when the next poll is due, said when the interval (or
	// the rule that set it) changed — not at every poll.
	EventNext EventKind = "next"
	// EventBudget: the budget guard stretched the interval, by a tenth or
	// more, and the interval changed (see EventNext).
	EventBudget EventKind = "budget"
	// EventPaused: polling pauses until the quota resets.
	EventPaused EventKind = "paused"
	// EventRateLimited: the server refused the poll for rate limiting,
	// or quota was too far away to wait for.
	EventRateLimited EventKind = "rate_limited"
	// EventBackoff: the poll failed; the next one backs off.
	EventBackoff EventKind = "backoff"
	// EventExecFailed: the command of an Exec sink failed.
	EventExecFailed EventKind = "exec_failed"
	// EventWarning: something worth knowing that does not stop polling.
	EventWarning EventKind = "warning"
	// EventTask: which durable task polls the URL.
	EventTask EventKind = "task"
)

// Event reports something about one URL's polling. It never carries a
// token: URL is masked (see Redact).
type Event struct {
	Kind    EventKind
	URL     string
	At      time.Time
	Outcome Outcome
	// Status is the HTTP status of the answer (0: none).
	Status int
	// Interval, Next and Rule are the decision after the poll;
	// Unstretched is the interval before the budget guard.
	Interval    time.Duration
	Next        time.Time
	Rule        Rule
	Unstretched time.Duration
	// Quota is what the answer said about the quota.
	Quota Quota
	// Errors counts consecutive errors.
	Errors int
	Err    error
	// Message explains a warning.
	Message string
}

// String renders the event as one log line.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "poll %s: ", e.URL)
	next := fmt.Sprintf("next poll in %s (%s)", round(e.Interval), e.Rule)
	switch e.Kind {
	case EventPolled:
		what := e.Outcome.String()
		if e.Status != 0 {
			what += fmt.Sprintf(" (HTTP %d)", e.Status)
		}
		fmt.Fprintf(&b, "%s; %s", what, next)
	case EventChanged:
		fmt.Fprintf(&b, "changed; %s", next)
	case EventNext:
		b.WriteString(next)
	case EventBudget:
		fmt.Fprintf(&b, "budget guard stretches the interval from %s to %s: %s", round(e.Unstretched), round(e.Interval), quotaText(e.Quota, e.At))
	case EventPaused:
		fmt.Fprintf(&b, "budget guard pauses polling until %s (in %s): %s", e.Next.Format(time.RFC3339), round(e.Interval), quotaText(e.Quota, e.At))
	case EventRateLimited:
		fmt.Fprintf(&b, "rate limited (%v); %s", e.Err, next)
	case EventBackoff:
		fmt.Fprintf(&b, "error %d in a row: %v; %s", e.Errors, e.Err, next)
	case EventExecFailed:
		fmt.Fprintf(&b, "%v", e.Err)
	default:
		b.WriteString(e.Message)
		if e.Err != nil {
			fmt.Fprintf(&b, ": %v", e.Err)
		}
	}
	return b.String()
}

func quotaText(q Quota, now time.Time) string {
	if !q.Known {
		return "quota unknown"
	}
	s := fmt.Sprintf("%d requests remaining", q.Remaining)
	if q.Limit > 0 {
		s = fmt.Sprintf("%d of %d requests remaining", q.Remaining, q.Limit)
	}
	if q.Resource != "" {
		s += " (" + q.Resource + ")"
	}
	if !q.Reset.IsZero() {
		s += fmt.Sprintf(", resetting in %s", round(q.Reset.Sub(now)))
	}
	return s
}

func round(d time.Duration) time.Duration {
	if d >= time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
