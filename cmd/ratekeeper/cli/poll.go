package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	_ "time/tzdata" // --tz works with any IANA zone, even without zoneinfo on the machine

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/poll"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/wiring"
)

func init() { register(newPollCmd) }

// Exit statuses of `ratekeeper poll` when it stops by itself.
const (
	exitPollErrors = 3 // too many consecutive errors
	exitPollIdle   = 4 // idle timeout
	exitPollFloor  = 5 // remaining quota below --min-remaining at start
)

type pollOptions struct {
	client clientFlags

	min, max, afterChange, business, normal time.Duration
	idle, idleAfter, night                  time.Duration
	growth, raise, decay                    float64
	tz, businessHours, businessDays, quiet  string
	budgetShare                             float64
	minRemaining                            int64
	backoffBase, backoffMax                 time.Duration
	maxErrors                               int
	idleTimeout                             time.Duration

	workerID string
	exec     string
	initial  bool
	headers  []string
	durable  bool
	metrics  metricsFlags
}

func newPollCmd() *cobra.Command {
	var o pollOptions
	cmd := &cobra.Command{
		Use:   "poll URL...",
		Short: "Watch URLs for changes with adaptive, quota-friendly polling",
		Long: `poll watches URLs through the rate-keeping client and prints one JSON line per
change on stdout: {"url", "etag", "changed_at", "body"}, or "new_items" instead
of "body" when the answer is a JSON array (the items not in the previous one).
--exec runs a command per change instead, with the body on its stdin and
RATEKEEPER_POLL_URL, _ETAG, _CHANGED_AT (and _NEW_ITEMS) in its environment.
The first answer is the baseline; --initial emits it too.

Unchanged polls are conditional requests answered 304 (free on GitHub). The
interval adapts (the defaults):

  1m   right after a change (--after-change), stretched ×1.5 per empty poll
  3m   in business hours (--business-interval, --business-hours 9-18,
       --business-days mon-fri)
  5m   otherwise (--default-interval)
  10m  after an hour without change (--idle-interval, --idle-after)
  15m  in quiet hours (--night-interval, --quiet-hours 22-7)

within --interval-min/--interval-max, with hours in --tz. A change raises an
activity score that keeps the interval short, empty polls lower it. The
server's X-Poll-Interval is a floor. The budget guard keeps polling within
--budget-share of the remaining quota, stretching the interval or pausing
until the reset near exhaustion; it says so on stderr when it pauses or
lengthens the interval by a tenth or more. Stderr says when the next poll is
due after the first poll and whenever the interval or its rule changes (-v:
at every poll). Errors back off
exponentially with jitter (--backoff-base, capped at --backoff-max).

--worker-id gives each poller of a fleet a stable offset, so they spread out.
--durable runs each URL as a durable task in the --db database (the one that
also shares quota state) that reschedules itself for its next poll: stopping and starting again continues the schedule (a task
also works other tasks of that database; 'ratekeeper tasks cancel ID' drops a
URL for good).

Ctrl-C, SIGTERM or SIGHUP stops cleanly (exit 0). Other exit statuses:
  1  an error (an unreachable database, stdout closed)
  2  bad input: an unknown time zone, --interval-min above --interval-max, …
  3  --max-errors consecutive errors of one URL (default 10; 0 never stops)
  4  --idle-timeout passed without a change on any URL
  5  the remaining quota is below --min-remaining at start

A URL that no configured provider owns is polled anonymously, without pacing
or quota checks, with a warning.`,
		Example: `  ratekeeper poll https://api.github.com/repos/golang/go/events
  ratekeeper poll --tz Asia/Tokyo --business-hours 9-18 --budget-share 0.1 \
      https://api.github.com/repos/o/r/issues?state=open --exec ./on-change.sh
  ratekeeper poll --durable --db postgres://db/ratekeeper --worker-id eu-1 URL...`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runPoll(cmd, &o, args) },
	}
	o.client.add(cmd)
	d := poll.DefaultPolicy()
	fl := cmd.Flags()
	fl.DurationVar(&o.min, "interval-min", d.Min, "shortest adaptive interval")
	fl.DurationVar(&o.max, "interval-max", d.Max, "longest adaptive interval (X-Poll-Interval and the budget guard may ask for more)")
	fl.DurationVar(&o.afterChange, "after-change", d.AfterChange, "interval right after a change")
	fl.DurationVar(&o.business, "business-interval", d.Business, "interval in business hours")
	fl.DurationVar(&o.normal, "default-interval", d.Default, "interval outside business and quiet hours")
	fl.DurationVar(&o.idle, "idle-interval", d.Idle, "least interval once nothing changed for --idle-after")
	fl.DurationVar(&o.idleAfter, "idle-after", d.IdleAfter, "time without change after which a URL counts as idle")
	fl.DurationVar(&o.night, "night-interval", d.Night, "interval in quiet hours")
	fl.Float64Var(&o.growth, "growth", d.Growth, "stretch of the interval per empty poll after a change")
	fl.Float64Var(&o.raise, "activity-raise", d.ActivityRaise, "share of the distance to 1 a change adds to the activity score")
	fl.Float64Var(&o.decay, "activity-decay", d.ActivityDecay, "share of the activity score an empty poll removes")
	fl.StringVar(&o.tz, "tz", "Local", "time zone of the hours, an IANA name such as Asia/Tokyo")
	fl.StringVar(&o.businessHours, "business-hours", d.BusinessHours.String(), "business hours FROM-TO (9-18, 08:30-17:00) or off")
	fl.StringVar(&o.businessDays, "business-days", d.BusinessDays.String(), "business days: mon-fri, sat-sun, mon,wed,fri, all")
	fl.StringVar(&o.quiet, "quiet-hours", d.QuietHours.String(), "quiet hours FROM-TO (22-7 wraps past midnight) or off")
	fl.Float64Var(&o.budgetShare, "budget-share", d.BudgetShare, "largest share of the remaining quota polling may spend, 0 to 1")
	fl.Int64Var(&o.minRemaining, "min-remaining", 0, "refuse to start (and pause) when the remaining quota is below this")
	fl.DurationVar(&o.backoffBase, "backoff-base", d.BackoffBase, "first backoff after an error, doubling per error")
	fl.DurationVar(&o.backoffMax, "backoff-max", d.BackoffMax, "longest backoff after errors")
	fl.IntVar(&o.maxErrors, "max-errors", d.MaxErrors, "stop after this many consecutive errors of one URL; 0 never stops")
	fl.DurationVar(&o.idleTimeout, "idle-timeout", 0, "stop when no URL changed for this long; 0 never stops")
	fl.StringVar(&o.workerID, "worker-id", "", "name of this poller in a fleet; sets a stable offset of its polls")
	fl.StringVar(&o.exec, "exec", "", "run this shell command per change, with the body on stdin, instead of printing")
	fl.BoolVar(&o.initial, "initial", false, "emit each URL's first answer too")
	fl.StringArrayVarP(&o.headers, "header", "H", nil, "request header 'Name: value' (repeatable)")
	fl.BoolVar(&o.durable, "durable", false, "run each URL as a durable, self-rescheduling task in the --db database")
	o.metrics.add(cmd)
	return adviseOnDamage(cmd, pollDamagedAdvice)
}

// policy turns the flags into a poll.Policy, with a usage error naming the
// flag for bad input.
func (o *pollOptions) policy() (poll.Policy, error) {
	p := poll.Policy{
		AfterChange: o.afterChange, Business: o.business, Default: o.normal, Idle: o.idle, IdleAfter: o.idleAfter,
		Night: o.night, Min: o.min, Max: o.max, Growth: o.growth, ActivityRaise: o.raise, ActivityDecay: o.decay,
		BudgetShare: o.budgetShare, MinRemaining: o.minRemaining, BudgetWindow: poll.DefaultBudgetWindow,
		BackoffBase: o.backoffBase, BackoffMax: o.backoffMax, MaxErrors: o.maxErrors, IdleTimeout: o.idleTimeout,
	}
	loc, err := time.LoadLocation(o.tz)
	if err != nil || o.tz == "" {
		return p, fmt.Errorf("--tz %q: unknown time zone; want an IANA name such as Asia/Tokyo, Europe/Paris or UTC, or Local", o.tz)
	}
	p.Location = loc
	if p.BusinessHours, err = poll.ParseHours(o.businessHours); err != nil {
		return p, fmt.Errorf("--business-hours: %v", err)
	}
	if p.QuietHours, err = poll.ParseHours(o.quiet); err != nil {
		return p, fmt.Errorf("--quiet-hours: %v", err)
	}
	if p.BusinessDays, err = poll.ParseWeekdays(o.businessDays); err != nil {
		return p, fmt.Errorf("--business-days: %v", err)
	}
	if o.min > o.max {
		return p, fmt.Errorf("--interval-min %v is above --interval-max %v: want min ≤ max", o.min, o.max)
	}
	if !(o.budgetShare > 0 && o.budgetShare <= 1) {
		return p, fmt.Errorf("--budget-share %v: want a share above 0 and at most 1, such as 0.2 for 20 %%", o.budgetShare)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"interval-min", o.min}, {"interval-max", o.max}, {"after-change", o.afterChange}, {"business-interval", o.business},
		{"default-interval", o.normal}, {"idle-interval", o.idle}, {"idle-after", o.idleAfter}, {"night-interval", o.night},
		{"backoff-base", o.backoffBase}, {"backoff-max", o.backoffMax}} {
		if f.d <= 0 {
			return p, fmt.Errorf("--%s %v: want a positive duration such as 90s or 5m", f.name, f.d)
		}
	}
	switch {
	case o.minRemaining < 0:
		return p, fmt.Errorf("--min-remaining %d: want 0 (no floor) or a number of requests", o.minRemaining)
	case o.maxErrors < 0:
		return p, fmt.Errorf("--max-errors %d: want 0 (never stop) or a number of consecutive errors", o.maxErrors)
	case o.idleTimeout < 0:
		return p, fmt.Errorf("--idle-timeout %v: want 0 (never stop) or a positive duration", o.idleTimeout)
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p, nil
}

func runPoll(cmd *cobra.Command, o *pollOptions, args []string) error {
	stderr := cmd.ErrOrStderr()
	pol, err := o.policy()
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	hdr := http.Header{}
	for _, h := range o.headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return exitf(2, "--header %q: want 'Name: value'", h)
		}
		hdr.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	for _, raw := range args {
		if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return exitf(2, "%q is not an http(s) URL such as https://api.github.com/repos/OWNER/REPO/events", raw)
		}
	}
	if err := o.metrics.check(); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	if o.durable && (store.KindOf(o.client.db) == store.Memory) {
		return exitf(2, "--durable needs a database to keep the schedule in: --db a SQLite file path or a postgres:// URL, not %q", o.client.db)
	}
	reg := prometheus.NewRegistry()
	t, err := o.client.transportWith(stderr, func(opts *wiring.Options) { opts.Registerer = reg })
	if err != nil {
		return err
	}
	defer t.Close()
	for _, raw := range args {
		u, _ := url.Parse(raw)
		if t.Registry().Match(u) == nil {
			fmt.Fprintf(stderr, "ratekeeper: warning: no configured provider owns %s; polling it anonymously, without pacing or quota checks (--provider NAME=BASEURL configures one)\n", poll.Redact(u))
		}
	}
	var sink poll.Sink = poll.JSONLines(cmd.OutOrStdout())
	if o.exec != "" {
		sink = poll.Exec(o.exec, cmd.OutOrStdout(), stderr)
	}
	p, err := poll.New(poll.Options{
		URLs: args, Client: &http.Client{Transport: t}, Policy: pol, Header: hdr, WorkerID: o.workerID,
		Sink: sink, EmitInitial: o.initial, Quota: poll.TransportQuota(t), Registerer: reg,
		OnEvent: func(e poll.Event) { printPollEvent(stderr, e, o.client.verbose) },
	})
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	ctx := cmd.Context()
	stopMetrics, err := o.metrics.serve(ctx, reg, func(ctx context.Context) error { return t.Ready(ctx) }, stderr)
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	defer stopMetrics()
	if o.client.verbose {
		fmt.Fprintf(stderr, "ratekeeper: polling %d URL(s); hours in %s: business %s on %s, quiet %s; Ctrl-C stops\n",
			len(args), pol.Location, pol.BusinessHours, pol.BusinessDays, pol.QuietHours)
	}
	if o.durable {
		err = p.RunDurable(ctx, poll.DurableOptions{DSN: o.client.db, Registerer: reg, DBOutageTimeout: outageTimeout(o.client.dbOutage)})
	} else {
		err = p.Run(ctx)
	}
	return pollExit(err)
}

// pollDamagedAdvice is what to do about a damaged --db, for poll.
const pollDamagedAdvice = "the quota state and the polls' state and schedule in it cannot be trusted, so nothing was polled. " +
	"Move it aside (or restore it from a backup) and run the same command again: a new database is made"

// pollExit maps what a poller returned to the command's exit status.
func pollExit(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, poll.ErrTooManyErrors):
		return &ExitError{Code: exitPollErrors, Err: err}
	case errors.Is(err, poll.ErrIdleTimeout):
		return &ExitError{Code: exitPollIdle, Err: err}
	case errors.Is(err, poll.ErrQuotaFloor):
		return &ExitError{Code: exitPollFloor, Err: err}
	}
	return &ExitError{Code: 1, Err: err}
}

// printPollEvent writes what the user should know on stderr: when the
// next poll is due (once per change of interval), budget stretches and
// pauses, rate limits, errors and warnings always; every poll and change
// with -v (whose lines say when the next poll is due, every time).
func printPollEvent(w io.Writer, e poll.Event, verbose bool) {
	switch e.Kind {
	case poll.EventPolled, poll.EventChanged, poll.EventTask:
		if !verbose {
			return
		}
	case poll.EventNext:
		if verbose {
			return
		}
	}
	fmt.Fprintln(w, "ratekeeper: "+withoutPrefix(e.String()))
}
