// Package poll watches URLs for changes with adaptive polling: unchanged
// polls are free conditional requests, the interval follows what happens
// (fast right after a change, slow when idle or at night), the server's
// X-Poll-Interval is respected, and polling never spends more than a set
// share of the remaining quota.
//
// The decisions are a pure function, Policy.Next(state, observation, now),
// with the time zone in the Policy: no clock, no I/O. A Poller does the
// I/O: it sends the GETs through an *http.Client (ratekeeper's rate-keeping
// client, to pace them), compares the answers, emits changes to a Sink and
// sleeps until the policy's next poll.
//
//	client := ratekeeper.NewClient(ratekeeper.Options{})
//	p, err := poll.New(poll.Options{
//		URLs:   []string{"https://api.github.com/repos/golang/go/events"},
//		Client: client,
//		Sink:   poll.JSONLines(os.Stdout),
//	})
//	err = p.Run(ctx) // until ctx ends or a stop condition
//
// # The default profile
//
// DefaultPolicy, every number a field of Policy (and a flag of
// `ratekeeper poll`):
//
//	situation                                   interval   field
//	right after a change                        1 min      AfterChange
//	business hours (9-18, Monday to Friday)     3 min      Business, BusinessHours, BusinessDays
//	otherwise                                   5 min      Default
//	no change for an hour (idle)                10 min     Idle, IdleAfter
//	quiet hours (22-7, every day)               15 min     Night, QuietHours
//	bounds of the adaptive interval             30 s–1 h   Min, Max
//	stretch per empty poll after a change       ×1.5       Growth
//	activity score a change adds, of 1 − score  50 %       ActivityRaise
//	activity score an empty poll removes        20 %       ActivityDecay
//	budget share of the remaining quota         20 %       BudgetShare
//	quota floor (refuse to start, pause)        none       MinRemaining
//	error backoff, from 1 min, doubling, to     1 h        BackoffBase, BackoffMax
//	stop after consecutive errors of one URL    10         MaxErrors
//	stop when nothing changed for               never      IdleTimeout
//
// Hours are wall-clock hours in Policy.Location (`--tz Asia/Tokyo`), From
// included and To excluded; a span like 22-7 wraps past midnight. Quiet
// hours win where they overlap business hours.
//
// # The rules
//
// Policy.Adaptive gives the profile's interval for a URL's state at now:
//
//  1. the base is Night in quiet hours, else Business in business hours on
//     business days, else Default;
//  2. once nothing changed for IdleAfter (since the last change, or since
//     the first poll), it is the base or Idle, whichever is longer; rules
//     3 and 4 do not apply;
//  3. the activity score a (0 to 1; a change adds ActivityRaise of the
//     distance to 1, an empty poll removes ActivityDecay of the score)
//     pulls the base toward AfterChange: base − a × (base − AfterChange);
//  4. after a change, AfterChange × Growth^n applies when shorter, n being
//     the consecutive empty polls since (1 min, 1m30s, 2m15s… up to the
//     base);
//  5. the result is bounded by Min and Max.
//
// Policy.Next then applies, each only ever lengthening the interval except
// the first:
//
//   - period start: an interval that would overshoot the start of a period
//     with a shorter interval (the end of quiet hours, the start of business
//     hours) ends at that start instead, but not below Min — a poll at 06:50
//     at night comes back at 07:00, not 07:05;
//   - errors: the backoff BackoffBase × 2^(n−1) for the n-th consecutive
//     error, its upper half random, capped at BackoffMax (1 h), and never
//     shorter than the adaptive interval; a success resets n; the MaxErrors-th
//     error stops polling;
//   - rate limits: after a refusal (403/429 with rate-limit headers), or when
//     the client would have had to wait for quota longer than its max wait
//     (an error with a RetryAt method), the next poll waits until the quota
//     returns; it is not counted as an error;
//   - X-Poll-Interval (GitHub's events feeds): a floor, above Max too;
//   - the budget guard (below): a floor, or a pause until the reset.
//
// # Conditional requests and changes
//
// Each poll is a GET carrying the previous answer's validators
// (If-None-Match, If-Modified-Since), so an unchanged resource is a 304: free
// on GitHub, and cheap everywhere. The poller sets them itself rather than
// relying on the client's cache, so it works with any client and a durable
// poller's first poll after a restart is free too; ratekeeper's client
// passes such requests through. Every poll also says Cache-Control:
// no-cache (unless Options.Header sets Cache-Control): seeing change is
// the poller's job, so a copy a cache holds as fresh for its max-age (60 s
// on GitHub) is never taken for the server's answer; each poll asks. An
// answer the client's cache turned from a 304 into its stored 200 (marked
// X-Ratekeeper-Cache: revalidated) is unchanged as well.
//
// A 200 is a change when its body differs from the previous answer's: the
// poller keeps the SHA-256 of the body (of the compacted JSON, for JSON)
// rather than the body, and for a JSON array a digest per item. The first
// answer is the baseline, not a change (Options.EmitInitial emits it). A
// change is emitted once; the Sink gets a Change:
//
//	{"url":"…","etag":"\"…\"","changed_at":"2025-06-10T10:10:00Z","body":{…}}
//	{"url":"…","etag":"\"…\"","changed_at":"…","new_items":[{…},{…}]}
//
// new_items replaces body when both answers are JSON arrays: the items not
// in the previous array (an edited item counts as new); an array that only
// lost items gives "new_items":[]. A body that is not JSON is a JSON string,
// or body_base64 when it is not UTF-8. JSONLines writes one such line per
// change; Exec runs a command per change with the whole body on its
// standard input. URLs are shown with credentials masked (Redact).
//
// # The budget guard
//
// Every answer with rate-limit headers updates what the poller knows of its
// quota (remaining, limit, reset; the time to reset is taken on the server's
// clock when it sends a Date). Per URL, the guard keeps an allowance refilled
// continuously at
//
//	BudgetShare × remaining ÷ (window × sharers)   polls per unit of time
//
// capped at one poll; each poll that cost a request spends one (a free 304 —
// one after which the server's remaining count did not drop — spends
// nothing), and the next poll waits until the allowance is back to one.
// window is the quota window's length, estimated as the longest time to
// reset ever seen (Policy.BudgetWindow, 1 h, when the server states no
// reset), and sharers counts the URLs of this poller in the same bucket
// (Options.Quota; TransportQuota tells them by provider and resource). As
// remaining only falls within a window, the URLs of a bucket never spend
// more than BudgetShare of what remained, plus one poll each, before the
// reset, whatever else spends the quota. The guard pauses until the reset
// (plus PauseMargin) when the remaining quota is below MinRemaining, when
// its share is less than one poll per URL, or when the allowance would not
// come back before the reset. Pauses are reported as EventPaused, and
// stretches as EventBudget when they lengthen the interval by a tenth or
// more (a guard that adds seconds to minutes is not news); both are
// logged and counted in metrics.
//
// When the next poll is due is reported as EventNext after a URL's first
// poll and whenever the interval changes by more than a tenth or the rule
// that sets it changes — not at every poll (EventPolled says it every
// time) — so a poller that waits minutes between polls is never silent
// about it.
//
// # Stop conditions
//
// Run returns nil when its context ends (Ctrl-C), and a *StopError when
// polling stops by itself; errors.Is tells which. `ratekeeper poll` exits
// with a distinct status for each:
//
//	ErrTooManyErrors   MaxErrors consecutive errors of one URL      exit 3
//	ErrIdleTimeout     no URL changed for IdleTimeout since start   exit 4
//	ErrQuotaFloor      remaining quota below MinRemaining at start  exit 5
//
// The start check asks Options.Quota (from the client's state, refreshed
// once per provider when unknown) before any poll; a URL whose quota is
// still unknown is checked on its first answer, which is then not emitted.
//
// # Fleets
//
// Pollers of a fleet given distinct Options.WorkerID values start at
// different moments: the first poll of URL i of n waits Offset(WorkerID,
// span) shifted by i/n of the span, span being the interval the policy gives
// at the start. Offset is a share of the span taken from the SHA-256 of the
// ID: stable on every machine and version, uniform over the fleet.
//
// # Durable polling
//
// With a task database (Poller.RunDurable), each URL is a durable task that polls once
// and reschedules itself for the next poll: the schedule, the state of the
// policy and the baseline survive restarts. See Poller.RunDurable.
//
// # Metrics
//
// With Options.Registerer, a Poller registers (labels: url, masked)
// ratekeeper_poll_polls_total{outcome}, ratekeeper_poll_changes_total,
// ratekeeper_poll_not_modified_total, ratekeeper_poll_interval_seconds,
// ratekeeper_poll_rate_limited_total and ratekeeper_poll_budget_total{action}.
//
// Layer 5 of docs/architecture.md: it owns the polling interval policy and
// runner, and must not build its own client.
package poll
