package poll

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Policy holds every number the poller decides with: the adaptive profile,
// its bounds, the budget guard and the error rules. Start from
// DefaultPolicy and change what you need; Validate says what is wrong with
// a Policy. Its methods are pure functions of their arguments: no clock, no
// I/O, no randomness (jitter is passed in).
type Policy struct {
	// AfterChange is the interval right after a change was seen.
	AfterChange time.Duration
	// Business is the interval in business hours.
	Business time.Duration
	// Default is the interval outside business and quiet hours.
	Default time.Duration
	// Idle is the least interval once nothing changed for IdleAfter.
	Idle      time.Duration
	IdleAfter time.Duration
	// Night is the interval in quiet hours.
	Night time.Duration
	// Min and Max bound the adaptive interval. X-Poll-Interval, the
	// budget guard and rate limits may still ask for longer.
	Min, Max time.Duration

	// Growth stretches the interval after a change for each consecutive
	// empty poll: AfterChange × Growth^empty, up to the base interval.
	Growth float64
	// ActivityRaise is the share of the distance to 1 that a change adds
	// to the activity score; ActivityDecay the share of the score that an
	// empty poll removes. The score pulls the interval from the base
	// toward AfterChange.
	ActivityRaise, ActivityDecay float64

	// BusinessHours on BusinessDays and QuietHours (every day) are read
	// in Location (nil: time.Local). Quiet hours win where they overlap.
	BusinessHours Hours
	BusinessDays  Weekdays
	QuietHours    Hours
	Location      *time.Location

	// BudgetShare is the largest share of the remaining quota polling may
	// spend before the quota resets, in (0, 1].
	BudgetShare float64
	// MinRemaining is the quota floor: polling refuses to start below it,
	// and pauses until the reset when it falls below it. 0: no floor.
	MinRemaining int64
	// BudgetWindow is the time to reset assumed when a server states a
	// remaining count without a reset.
	BudgetWindow time.Duration

	// BackoffBase and BackoffMax shape the wait after consecutive errors:
	// BackoffBase × 2^(n−1) with jitter, capped at BackoffMax.
	BackoffBase, BackoffMax time.Duration
	// MaxErrors stops polling after that many consecutive errors of one
	// URL; 0 never stops.
	MaxErrors int
	// IdleTimeout stops polling when no URL changed for that long since
	// polling started; 0 never stops.
	IdleTimeout time.Duration
}

// Defaults of DefaultPolicy.
const (
	DefaultAfterChange   = time.Minute
	DefaultBusiness      = 3 * time.Minute
	DefaultInterval      = 5 * time.Minute
	DefaultIdle          = 10 * time.Minute
	DefaultIdleAfter     = time.Hour
	DefaultNight         = 15 * time.Minute
	DefaultMin           = 30 * time.Second
	DefaultMax           = time.Hour
	DefaultGrowth        = 1.5
	DefaultActivityRaise = 0.5
	DefaultActivityDecay = 0.2
	DefaultBudgetShare   = 0.2
	DefaultBudgetWindow  = time.Hour
	DefaultBackoffBase   = time.Minute
	DefaultBackoffMax    = time.Hour
	DefaultMaxErrors     = 10
)

// PauseMargin is added to a reset before polling resumes after a pause,
// against servers whose window turns a little after the reset they state.
const PauseMargin = time.Second

// DefaultBusinessHours and DefaultQuietHours are the default spans.
var (
	DefaultBusinessHours = Hours{From: 9 * 60, To: 18 * 60}
	DefaultQuietHours    = Hours{From: 22 * 60, To: 7 * 60}
)

// DefaultPolicy returns the documented default profile (see the package
// documentation) in the local time zone.
func DefaultPolicy() Policy {
	return Policy{
		AfterChange:   DefaultAfterChange,
		Business:      DefaultBusiness,
		Default:       DefaultInterval,
		Idle:          DefaultIdle,
		IdleAfter:     DefaultIdleAfter,
		Night:         DefaultNight,
		Min:           DefaultMin,
		Max:           DefaultMax,
		Growth:        DefaultGrowth,
		ActivityRaise: DefaultActivityRaise,
		ActivityDecay: DefaultActivityDecay,
		BusinessHours: DefaultBusinessHours,
		BusinessDays:  MondayToFriday,
		QuietHours:    DefaultQuietHours,
		BudgetShare:   DefaultBudgetShare,
		BudgetWindow:  DefaultBudgetWindow,
		BackoffBase:   DefaultBackoffBase,
		BackoffMax:    DefaultBackoffMax,
		MaxErrors:     DefaultMaxErrors,
	}
}

// Validate reports every problem of the policy, each naming the field and
// saying what would be right.
func (p Policy) Validate() error {
	var errs []error
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"AfterChange", p.AfterChange}, {"Business", p.Business}, {"Default", p.Default},
		{"Idle", p.Idle}, {"IdleAfter", p.IdleAfter}, {"Night", p.Night},
		{"Min", p.Min}, {"Max", p.Max}, {"BudgetWindow", p.BudgetWindow},
		{"BackoffBase", p.BackoffBase}, {"BackoffMax", p.BackoffMax},
	}
	for _, f := range positive {
		if f.d <= 0 {
			errs = append(errs, fmt.Errorf("%s is %v: want a positive duration", f.name, f.d))
		}
	}
	if p.Min > p.Max {
		errs = append(errs, fmt.Errorf("interval Min %v is above Max %v: want Min ≤ Max", p.Min, p.Max))
	}
	if p.BackoffBase > p.BackoffMax {
		errs = append(errs, fmt.Errorf("BackoffBase %v is above BackoffMax %v", p.BackoffBase, p.BackoffMax))
	}
	if !(p.Growth >= 1) || math.IsInf(p.Growth, 0) {
		errs = append(errs, fmt.Errorf("factor Growth %v: want 1 or more", p.Growth))
	}
	if !(p.ActivityRaise >= 0 && p.ActivityRaise <= 1) {
		errs = append(errs, fmt.Errorf("ActivityRaise %v: want a share from 0 to 1", p.ActivityRaise))
	}
	if !(p.ActivityDecay >= 0 && p.ActivityDecay <= 1) {
		errs = append(errs, fmt.Errorf("ActivityDecay %v: want a share from 0 to 1", p.ActivityDecay))
	}
	if !(p.BudgetShare > 0 && p.BudgetShare <= 1) {
		errs = append(errs, fmt.Errorf("BudgetShare %v: want a share above 0 and at most 1 (0.2 is 20 %%)", p.BudgetShare))
	}
	if p.MinRemaining < 0 {
		errs = append(errs, fmt.Errorf("MinRemaining %d: want 0 (no floor) or more requests", p.MinRemaining))
	}
	if p.MaxErrors < 0 {
		errs = append(errs, fmt.Errorf("MaxErrors %d: want 0 (never stop) or more", p.MaxErrors))
	}
	if p.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("IdleTimeout %v: want 0 (none) or a positive duration", p.IdleTimeout))
	}
	for _, h := range []struct {
		name string
		h    Hours
	}{{"BusinessHours", p.BusinessHours}, {"QuietHours", p.QuietHours}} {
		if h.h.From < 0 || h.h.From >= 24*60 && !h.h.Empty() || h.h.To < 0 || h.h.To > 24*60 {
			errs = append(errs, fmt.Errorf("%s %d-%d: want minutes of the day, From 0 to 1439 and To 0 to 1440", h.name, h.h.From, h.h.To))
		}
	}
	if p.BusinessDays > EveryDay {
		errs = append(errs, fmt.Errorf("BusinessDays %#x: only bits 0 (Sunday) to 6 (Saturday) exist", uint8(p.BusinessDays)))
	}
	return errors.Join(errs...)
}

func (p Policy) loc() *time.Location {
	if p.Location == nil {
		return time.Local
	}
	return p.Location
}

// Outcome is what one poll found.
type Outcome uint8

// Outcomes of a poll.
const (
	// First: the first answer, which sets the baseline later answers are
	// compared with. It is neither a change nor an empty poll.
	First Outcome = iota
	// Changed: the content differs from the previous poll's.
	Changed
	// Unchanged: a 304, or the same content again (an empty poll).
	Unchanged
	// Failed: a network error or an HTTP error status.
	Failed
	// RateLimited: the server refused for rate limiting, or the client
	// would have had to wait for quota longer than it may.
	RateLimited
)

var outcomeNames = [...]string{"first", "changed", "unchanged", "failed", "rate_limited"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// Rule names the rule that set an interval.
type Rule string

// Rules, in the order Next applies them.
const (
	RuleDefault     Rule = "default"
	RuleBusiness    Rule = "business-hours"
	RuleNight       Rule = "quiet-hours"
	RuleIdle        Rule = "idle"
	RuleActivity    Rule = "activity"
	RuleAfterChange Rule = "after-change"
	RuleMin         Rule = "min"
	RuleMax         Rule = "max"
	RulePeriodStart Rule = "period-start"
	RuleBackoff     Rule = "backoff"
	RuleRateLimited Rule = "rate-limited"
	RulePollFloor   Rule = "x-poll-interval"
	RuleBudget      Rule = "budget"
	RulePaused      Rule = "paused-until-reset"
)

// Quota is what a server said about the quota a poll spends.
type Quota struct {
	// Known is false when the server said nothing.
	Known     bool
	Remaining int64
	// Limit is -1 when unknown.
	Limit int64
	// Reset is when the quota refills, on the local clock; zero when the
	// server did not say.
	Reset time.Time
	// Resource names the bucket ("core"), when the server said.
	Resource string
}

// State is what the policy remembers about one polled URL between polls.
// The zero value is a URL never polled.
type State struct {
	// Started is the first poll; LastPoll the latest; LastChange the
	// latest poll that saw a change (zero: none yet).
	Started, LastPoll, LastChange time.Time
	Polls, Changes                int64
	// Activity is the activity score, 0 to 1.
	Activity float64
	// Empty counts consecutive polls without a change.
	Empty int
	// Errors counts consecutive failed polls.
	Errors int
	// PollFloor is the latest X-Poll-Interval.
	PollFloor time.Duration
	// Quota is the latest quota a response stated.
	Quota Quota
	// Window is the longest time to reset seen: the quota window is at
	// least that long. Allowance is the budget guard's allowance in
	// polls at AllowanceAt.
	Window      time.Duration
	Allowance   float64
	AllowanceAt time.Time
	// Interval and Next are the latest decision.
	Interval time.Duration
	Next     time.Time
}

// Observation is what one poll saw, as Next needs it.
type Observation struct {
	Outcome Outcome
	// PollInterval is the response's X-Poll-Interval (0: none).
	PollInterval time.Duration
	// Quota is what the response said about the quota.
	Quota Quota
	// RetryAt is when a RateLimited poll may go again (zero: unknown).
	RetryAt time.Time
	// NotModified says the answer was a 304 (or the client's cache
	// turned one into its stored 200).
	NotModified bool
	// Unsent says the client never sent the request (it would have
	// waited for quota longer than it may).
	Unsent bool
	// Sharers counts the URLs this poller polls in the same quota
	// bucket, this one included (0 counts as 1): they split the budget.
	Sharers int
	// Jitter is a random number in [0, 1) for the error backoff.
	Jitter float64
}

// Decision is when to poll next, and why.
type Decision struct {
	// Interval is the wait until the next poll; Next is now + Interval.
	Interval time.Duration
	Next     time.Time
	// Rule is the rule that set Interval.
	Rule Rule
	// Adaptive is the profile's interval alone, with AdaptiveRule the
	// rule that set it (before backoff, X-Poll-Interval and budget).
	Adaptive     time.Duration
	AdaptiveRule Rule
	// Budget is the interval the budget guard asked for (0: none);
	// Paused says it asked to pause until the reset. Unstretched is the
	// interval every rule but the budget guard gave: the guard stretched
	// the interval when Interval is longer.
	Budget      time.Duration
	Paused      bool
	Unstretched time.Duration
	// Stop is ErrTooManyErrors when polling must stop.
	Stop error
}

// Adaptive returns the profile's interval for a URL in state s at now, and
// the rule that set it:
//
//  1. the base is Night in quiet hours, else Business in business hours
//     on business days, else Default;
//  2. once nothing changed for IdleAfter (since the last change, or the
//     first poll), the interval is the base or Idle, whichever is longer,
//     and rules 3 and 4 do not apply;
//  3. the activity score a pulls the base toward AfterChange:
//     base − a × (base − AfterChange);
//  4. after a change, the interval is AfterChange × Growth^empty (empty:
//     consecutive empty polls since), when that is shorter;
//  5. the result is bounded by Min and Max.
func (p Policy) Adaptive(s State, now time.Time) (time.Duration, Rule) {
	d, rule := p.adaptive(s, now)
	switch {
	case d < p.Min:
		return p.Min, RuleMin
	case d > p.Max:
		return p.Max, RuleMax
	}
	return d, rule
}

func (p Policy) adaptive(s State, now time.Time) (time.Duration, Rule) {
	t := now.In(p.loc())
	base, rule := p.Default, RuleDefault
	switch {
	case p.QuietHours.Contains(t):
		base, rule = p.Night, RuleNight
	case p.business(t):
		base, rule = p.Business, RuleBusiness
	}
	ref := s.LastChange
	if ref.IsZero() {
		ref = s.Started
	}
	if !ref.IsZero() && now.Sub(ref) >= p.IdleAfter {
		if p.Idle > base {
			return p.Idle, RuleIdle
		}
		return base, rule
	}
	d := base
	if a := min(max(s.Activity, 0), 1); a > 0 && p.AfterChange < base {
		d = base - time.Duration(a*float64(base-p.AfterChange)).Round(time.Second)
		if d < base {
			rule = RuleActivity
		}
	}
	if !s.LastChange.IsZero() {
		ramp := float64(p.AfterChange) * math.Pow(p.Growth, float64(s.Empty))
		if ramp < float64(d) {
			d, rule = time.Duration(ramp).Round(time.Second), RuleAfterChange
		}
	}
	return d, rule
}

// business reports whether t (in the policy's location) is in business
// hours on a business day. The early morning part of a span that wraps
// past midnight belongs to the day before.
func (p Policy) business(t time.Time) bool {
	if !p.BusinessHours.Contains(t) {
		return false
	}
	day := t.Weekday()
	if p.BusinessHours.wraps() && t.Hour()*60+t.Minute() < p.BusinessHours.To {
		day = (day + 6) % 7
	}
	return p.BusinessDays.Has(day)
}

// periodStart returns the earliest start of a period (quiet hours ending,
// business hours starting, a new day) after now and before now+d at which
// the adaptive interval is shorter than d, so that a slow interval never
// overshoots the start of a faster period.
func (p Policy) periodStart(s State, now time.Time, d time.Duration) (time.Time, bool) {
	loc := p.loc()
	t := now.In(loc)
	end := now.Add(d)
	marks := []int{0, p.BusinessHours.From, p.BusinessHours.To, p.QuietHours.From, p.QuietHours.To}
	var best time.Time
	for day := 0; ; day++ {
		midnight := time.Date(t.Year(), t.Month(), t.Day()+day, 0, 0, 0, 0, loc)
		if !midnight.Before(end) && day > 0 {
			break
		}
		for _, m := range marks {
			b := time.Date(t.Year(), t.Month(), t.Day()+day, m/60, m%60, 0, 0, loc)
			if !b.After(now) || !b.Before(end) || (!best.IsZero() && !b.Before(best)) {
				continue
			}
			if next, _ := p.Adaptive(s, b); next < d {
				best = b
			}
		}
	}
	return best, !best.IsZero()
}

// Backoff is the wait after n consecutive errors: BackoffBase × 2^(n−1),
// capped at BackoffMax, of which the upper half is jitter (jitter in
// [0, 1)), so pollers that failed together do not retry together and the
// wait still grows with n.
func (p Policy) Backoff(n int, jitter float64) time.Duration {
	if n < 1 {
		return 0
	}
	d := p.BackoffMax
	if n-1 < 62 {
		if b := p.BackoffBase << (n - 1); b > 0 && b>>(n-1) == p.BackoffBase && b < d {
			d = b
		}
	}
	jitter = min(max(jitter, 0), 1)
	return d/2 + time.Duration(jitter*float64(d-d/2))
}

// budget applies the budget guard to s after a poll that cost cost
// requests, and returns the wait it asks for before the next poll (0:
// none) and whether that wait is a pause until the quota resets.
//
// The guard is an allowance per URL, refilled continuously at
//
//	rate = BudgetShare × remaining ÷ (window × sharers)
//
// and capped at one poll, so nothing is saved up. Each poll spends its
// cost; the next poll waits until the allowance is back to one poll.
// window is the length of the quota window — the longest time to reset
// ever seen, which a window is at least as long as (BudgetWindow when the
// server states no reset) — not the time left to the reset: a rate divided
// by a shrinking time would let polling spend nearly everything just
// before each reset. Within a window remaining only falls, so the polls of
// one URL spend at most 1 + BudgetShare × remaining ÷ sharers from any
// moment to the reset: the URLs of a bucket together never spend more
// than the share of what remained (plus one poll each).
//
// It pauses until the reset (plus PauseMargin) instead when remaining is
// below MinRemaining, when the share is less than one poll per URL, or
// when the allowance would not be back before the reset.
func (p Policy) budget(s *State, prev Quota, cost float64, sharers int, now time.Time) (time.Duration, bool) {
	q := s.Quota
	if !q.Known || q.Remaining < 0 {
		return 0, false
	}
	sharers = max(sharers, 1)
	toReset := p.BudgetWindow
	if !q.Reset.IsZero() {
		toReset = q.Reset.Sub(now)
		if toReset <= 0 {
			s.Allowance, s.AllowanceAt = 1, now // the window has turned: the quota is back
			return 0, false
		}
	}
	s.Window = max(s.Window, toReset)
	newWindow := !prev.Known || q.Reset.Sub(prev.Reset) > time.Second || s.AllowanceAt.IsZero()
	rate := p.BudgetShare * float64(q.Remaining) / (float64(s.Window) * float64(sharers)) // polls per nanosecond
	if newWindow {
		s.Allowance = 1
	} else if el := now.Sub(s.AllowanceAt); el > 0 {
		s.Allowance = min(1, s.Allowance+rate*float64(el))
	}
	s.AllowanceAt = now
	s.Allowance -= cost
	pause := toReset + PauseMargin
	if (p.MinRemaining > 0 && q.Remaining < p.MinRemaining) || p.BudgetShare*float64(q.Remaining) < float64(sharers) {
		return pause, true
	}
	if s.Allowance >= 1 {
		return 0, false
	}
	wait := time.Duration(math.Ceil((1 - s.Allowance) / rate))
	if wait >= toReset {
		return pause, true
	}
	return wait, false
}

// pollCost is what a poll is counted as having spent: nothing when the
// client never sent it (it would have waited too long for quota), nothing
// for a 304 unless the server's remaining count dropped since the previous
// answer in the same window (the server charges 304s, or others spent:
// either way it counts), and one request for anything else.
func pollCost(o Observation, prev Quota) float64 {
	switch {
	case o.Unsent:
		return 0
	case o.NotModified:
		q := o.Quota
		if q.Known && prev.Known && q.Remaining < prev.Remaining && !q.Reset.After(prev.Reset.Add(time.Second)) {
			return 1
		}
		return 0
	}
	return 1
}

// Next takes the state of a URL and what its latest poll saw at now, and
// returns the new state and when to poll next. The rules, in order:
//
//   - the state absorbs the observation: a change raises the activity
//     score and resets the empty streak; an empty poll lowers the score
//     and extends the streak; a success resets the error count; an error
//     extends it (and stops polling at MaxErrors);
//   - the adaptive interval (see Adaptive), cut short at the start of a
//     faster period (but not below Min);
//   - after an error, the backoff when it is longer; after a rate-limit
//     refusal, the time the quota returns when that is later;
//   - X-Poll-Interval as a floor;
//   - the budget guard as a floor: an allowance refilled at BudgetShare ×
//     remaining ÷ (window × sharers) polls per unit of time, spent by each
//     poll that costs a request (not by free 304s), pausing until the reset
//     when the quota is below MinRemaining or too low for one poll per URL
//     (see the package documentation).
func (p Policy) Next(s State, o Observation, now time.Time) (State, Decision) {
	if s.Started.IsZero() {
		s.Started = now
	}
	s.Polls++
	s.LastPoll = now
	switch o.Outcome {
	case First:
		s.Errors = 0
	case Changed:
		s.Changes++
		s.LastChange = now
		s.Activity += p.ActivityRaise * (1 - s.Activity)
		s.Empty = 0
		s.Errors = 0
	case Unchanged:
		s.Empty++
		s.Activity -= p.ActivityDecay * s.Activity
		s.Errors = 0
	case Failed:
		s.Errors++
	}
	switch o.Outcome {
	case First, Changed, Unchanged:
		s.PollFloor = o.PollInterval // the server may stop asking
	default:
		if o.PollInterval > 0 {
			s.PollFloor = o.PollInterval
		}
	}
	prevQuota := s.Quota
	if o.Quota.Known {
		s.Quota = o.Quota
	}

	var d Decision
	d.Adaptive, d.AdaptiveRule = p.Adaptive(s, now)
	if b, ok := p.periodStart(s, now, d.Adaptive); ok {
		d.Adaptive, d.AdaptiveRule = max(b.Sub(now), p.Min), RulePeriodStart
	}
	d.Interval, d.Rule = d.Adaptive, d.AdaptiveRule
	raise := func(to time.Duration, rule Rule) {
		if to > d.Interval {
			d.Interval, d.Rule = to, rule
		}
	}
	switch o.Outcome {
	case Failed:
		raise(p.Backoff(s.Errors, o.Jitter), RuleBackoff)
		if p.MaxErrors > 0 && s.Errors >= p.MaxErrors {
			d.Stop = ErrTooManyErrors
		}
	case RateLimited:
		if !o.RetryAt.IsZero() {
			raise(o.RetryAt.Sub(now), RuleRateLimited)
		}
	}
	raise(s.PollFloor, RulePollFloor)
	d.Unstretched = d.Interval
	d.Budget, d.Paused = p.budget(&s, prevQuota, pollCost(o, prevQuota), o.Sharers, now)
	if d.Paused {
		raise(d.Budget, RulePaused)
	} else {
		raise(d.Budget, RuleBudget)
	}
	d.Next = now.Add(d.Interval)
	s.Interval, s.Next = d.Interval, d.Next
	return s, d
}

// CheckStart reports whether polling may start with quota q: it returns
// an error wrapping ErrQuotaFloor when the remaining quota is known and
// below MinRemaining.
func (p Policy) CheckStart(q Quota, now time.Time) error {
	if p.MinRemaining <= 0 || !q.Known || q.Remaining >= p.MinRemaining {
		return nil
	}
	if !q.Reset.IsZero() && !q.Reset.After(now) {
		return nil // the window has turned since: the quota is back
	}
	msg := fmt.Sprintf("remaining quota %d is below the floor of %d", q.Remaining, p.MinRemaining)
	if q.Resource != "" {
		msg = fmt.Sprintf("remaining %s quota %d is below the floor of %d", q.Resource, q.Remaining, p.MinRemaining)
	}
	if !q.Reset.IsZero() {
		msg += fmt.Sprintf("; it resets at %s (in %s)", q.Reset.Format(time.RFC3339), q.Reset.Sub(now).Round(time.Second))
	}
	return fmt.Errorf("%w: %s", ErrQuotaFloor, msg)
}
