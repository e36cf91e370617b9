package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/sqlite"
	"github.com/ratekeeper/ratekeeper/tasks"
	"github.com/ratekeeper/ratekeeper/transport"
	"github.com/ratekeeper/ratekeeper/wiring"
)

// clientFlags are the flags of every command that talks to APIs through
// the rate-keeping client.
type clientFlags struct {
	db        string
	dbOutage  time.Duration
	providers []string
	config    string
	policy    string
	reserve   string
	maxWait   time.Duration
	// scopeMaxWait: see durableScopeMaxWait; zero for the other commands.
	scopeMaxWait time.Duration
	maxPause     time.Duration
	secWait      time.Duration
	// noAutoHosts: a host no provider owns gets no token or default
	// pacing of its own (transport.Options.NoAutoProviders).
	noAutoHosts bool
	pacing      pacingFlags
	verbose     bool
}

// pacingFlags tune the policy for every provider whose configuration does
// not set its own.
type pacingFlags struct {
	velocity         float64
	minIntv, maxIntv time.Duration
	burst            int
}

func (f *clientFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.db, "db", "./ratekeeper.db",
		"database shared by every ratekeeper process using it: a SQLite file, or postgres://… for a fleet; \"memory\" keeps state in this process only")
	addOutageFlag(cmd.Flags(), &f.dbOutage)
	f.addAllButDB(cmd)
}

// addOutageFlag adds --db-outage-timeout, next to --db.
func addOutageFlag(fl *pflag.FlagSet, to *time.Duration) {
	fl.DurationVar(to, "db-outage-timeout", store.DefaultOutageTimeout,
		"how long --db may be away (restarting, connections lost, SQLite locked by another process) before the command gives up; meanwhile it waits, trying again with backoff (0: give up at once)")
}

// outageTimeout is a --db-outage-timeout as the library takes it: the
// flag's 0 (give up at once) is the library's negative.
func outageTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// addAllButDB adds the client flags except --db, for a command whose
// parent already has it (tasks worker): the caller sets f.db.
func (f *clientFlags) addAllButDB(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringSliceVar(&f.providers, "provider", nil,
		"NAME=BASEURL adds or moves a provider (repeatable), e.g. github=http://127.0.0.1:8080/github; a bare NAME selects a configured provider")
	fl.StringVar(&f.config, "config", "", "TOML file describing providers, tokens env, limits and policy")
	fl.StringVar(&f.policy, "policy", "greedy", "pacing policy: greedy (as fast as the quota allows), spread or adaptive (leave quota for other work)")
	fl.StringVar(&f.reserve, "reserve", "0", "quota to keep back for other work in every bucket: a count of requests (100), below each resource's limit, or a percentage of each resource's limit (10%)")
	fl.DurationVar(&f.maxWait, "max-wait", transport.DefaultMaxWait, "longest single wait for quota; beyond it the request fails saying when quota returns")
	fl.DurationVar(&f.maxPause, "max-pause", quota.DefaultMaxPause, "longest pause a server's Retry-After or a secondary-limit penalty can impose; the request is tried again after it")
	fl.DurationVar(&f.secWait, "secondary-wait", quota.SecondaryBase, "first pause after a secondary-limit refusal without Retry-After; it doubles, with jitter, at each new refusal")
	fl.BoolVar(&f.noAutoHosts, "no-auto-hosts", false, "a host no provider owns gets no token from a variable named after it (GIT_EXAMPLE_COM_TOKEN) and no default pacing of 60 a minute; only its own rate-limit headers pace it")
	fl.Float64Var(&f.pacing.velocity, "velocity", 0, "spread: how much faster than budget ÷ time to reset to send (default 1.5; above 1 spends each window's budget before its reset)")
	fl.DurationVar(&f.pacing.minIntv, "min-interval", 0, "least time between two requests of one bucket, under any policy (e.g. 100ms)")
	fl.DurationVar(&f.pacing.maxIntv, "max-interval", 0, "most time spread or adaptive put between two requests of one bucket (default 1m)")
	fl.IntVar(&f.pacing.burst, "burst", 0, "requests of one bucket that may go back to back before spread's or adaptive's spacing applies")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "tell which credential, waits and cache outcome on stderr")
}

// durableMaxWait is the default --max-wait of the commands that work
// durable tasks (fetch, tasks worker): a task waits in memory at most this
// long for quota, then sleeps durably (rescheduled in the database until
// quota returns) and frees its worker. It must stay well below the tasks'
// attempt timeout.
const durableMaxWait = 30 * time.Second

// durableScopeMaxWait bounds, for the same commands, a wait for a scope's
// pause (a limit the server does not announce, such as GitLab's Users
// API, while the request's own bucket could serve): such a pause usually
// lasts until the end of the server's window, and the workers have the
// rest of the API to serve meanwhile.
const durableScopeMaxWait = 2 * time.Second

// durable makes --max-wait default to durableMaxWait and says what a
// longer wait becomes.
func (f *clientFlags) durable(cmd *cobra.Command) {
	if fl := cmd.Flags().Lookup("max-wait"); fl != nil {
		f.maxWait = durableMaxWait
		f.scopeMaxWait = durableScopeMaxWait
		fl.DefValue = durableMaxWait.String()
		fl.Usage = "longest wait for quota in memory; a longer one reschedules the task until quota returns (a durable sleep)"
	}
}

// selected returns the provider names given without a base URL, and the
// NAME=BASEURL values.
func (f *clientFlags) split() (selected, configure []string) {
	for _, p := range f.providers {
		if strings.Contains(p, "=") {
			configure = append(configure, p)
			name, _, _ := strings.Cut(p, "=")
			selected = append(selected, strings.TrimSpace(name))
		} else if p = strings.TrimSpace(p); p != "" {
			selected = append(selected, p)
		}
	}
	return selected, configure
}

// options turns the flags into client options; stderr receives the
// verbose lines.
func (f *clientFlags) options(stderr io.Writer) (wiring.Options, error) {
	reserve, percent, err := provider.ParseReserve(f.reserve)
	if err != nil {
		return wiring.Options{}, fmt.Errorf("--%v", err)
	}
	if f.maxWait <= 0 {
		return wiring.Options{}, fmt.Errorf("--max-wait %v: want a positive duration such as 5m", f.maxWait)
	}
	if f.maxPause < time.Second {
		return wiring.Options{}, fmt.Errorf("--max-pause %v: want a duration of a second or more, such as 1h", f.maxPause)
	}
	if f.secWait < time.Second {
		return wiring.Options{}, fmt.Errorf("--secondary-wait %v: want a duration of a second or more, such as 60s", f.secWait)
	}
	if err := f.pacing.check(); err != nil {
		return wiring.Options{}, err
	}
	_, configure := f.split()
	opts := wiring.Options{
		Velocity:        f.pacing.velocity,
		MinInterval:     f.pacing.minIntv,
		MaxInterval:     f.pacing.maxIntv,
		Burst:           f.pacing.burst,
		DB:              f.db,
		DBOutageTimeout: outageTimeout(f.dbOutage),
		ConfigFile:      f.config,
		Providers:       configure,
		Policy:          f.policy,
		Reserve:         reserve,
		ReservePercent:  percent,
		MaxWait:         f.maxWait,
		ScopeMaxWait:    f.scopeMaxWait,
		MaxPause:        f.maxPause,
		SecondaryWait:   f.secWait,
		NoAutoHosts:     f.noAutoHosts,
	}
	verbose := f.verbose
	if verbose {
		opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	// A URL that matched no provider is said even without -v (once per
	// host): which token it gets, if any, and its default pacing, which
	// the user may not expect.
	opts.OnEvent = func(e transport.Event) {
		if verbose || e.Kind == transport.EventUnmatched {
			fmt.Fprintln(stderr, describeEvent(e))
		}
	}
	return opts, nil
}

// check reports a pacing flag that cannot work, saying what would.
func (p pacingFlags) check() error {
	switch {
	case p.velocity < 0 || math.IsNaN(p.velocity) || math.IsInf(p.velocity, 0):
		return fmt.Errorf("--velocity %v: want a number above 0 such as 1.5", p.velocity)
	case p.minIntv < 0:
		return fmt.Errorf("--min-interval %v: want a duration of 0 or more, such as 100ms", p.minIntv)
	case p.maxIntv < 0:
		return fmt.Errorf("--max-interval %v: want a duration of 0 or more, such as 1m", p.maxIntv)
	case p.maxIntv > 0 && p.minIntv > p.maxIntv:
		return fmt.Errorf("--min-interval %v is above --max-interval %v: want the min at most the max", p.minIntv, p.maxIntv)
	case p.burst < 0:
		return fmt.Errorf("--burst %d: want 0 or more requests, such as 10", p.burst)
	}
	return nil
}

// transport builds the client's transport, with a usage error for bad
// flags and exit status 1 for a database that cannot be used.
func (f *clientFlags) transport(stderr io.Writer) (*transport.Transport, error) {
	return f.transportWith(stderr, nil)
}

// transportWith is transport with a hook that adjusts the options (a
// Prometheus registerer, say) before the transport is built.
func (f *clientFlags) transportWith(stderr io.Writer, tune func(*wiring.Options)) (*transport.Transport, error) {
	opts, err := f.options(stderr)
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	if store.KindOf(f.db) == store.SQLite {
		if err := sqlite.CheckPath(store.SQLitePath(f.db)); err != nil {
			return nil, &ExitError{Code: 1, Err: fmt.Errorf("--db %s: %w", f.db, err)}
		}
	}
	if tune != nil {
		tune(&opts)
	}
	t, err := wiring.Transport(opts)
	var dbErr *wiring.DatabaseError
	if errors.As(err, &dbErr) {
		return nil, &ExitError{Code: 1, Err: fmt.Errorf("--db: %w", err)}
	}
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	selected, _ := f.split()
	for _, name := range selected {
		if _, err := t.Registry().Get(name); err != nil {
			t.Close()
			return nil, &ExitError{Code: 2, Err: fmt.Errorf("--provider %s: %w", name, err)}
		}
	}
	return t, nil
}

// checkDB refuses, before any command that opens a --db runs, a SQLite
// file that fails quick_check: the quota state, cached answers and tasks
// in it cannot be trusted, and a command that used it would act on them
// (serve, get and status as much as fetch). Exit status 1, with what to do
// (see damagedAdvice). It is the one check every command gets, here
// rather than where each opens its database, so that none can miss it.
func checkDB(cmd *cobra.Command) error {
	f := cmd.Flag("db")
	if f == nil {
		return nil
	}
	return checkDatabase(cmd.Context(), f.Value.String(), damagedAdvice(cmd))
}

// adviceKey is the annotation by which a command says what to do about a
// damaged --db, for what it would have done; subcommands inherit it.
const adviceKey = "ratekeeper/damaged-db-advice"

// damagedAdvice is what to do about a damaged --db, for cmd.
func damagedAdvice(cmd *cobra.Command) string {
	for c := cmd; c != nil; c = c.Parent() {
		if a, ok := c.Annotations[adviceKey]; ok {
			return a
		}
	}
	return "the quota state and cached answers in it cannot be trusted, so nothing was run. " +
		"Move it aside (or restore it from a backup) and run the command again: a new database is made, and quota state is learnt again from the servers' answers"
}

// adviseOnDamage sets what cmd (and its subcommands) advise about a
// damaged --db.
func adviseOnDamage(cmd *cobra.Command, advice string) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[adviceKey] = advice
	return cmd
}

// checkDatabase refuses a --db that would betray a command: a SQLite file
// that fails quick_check is refused with advice, exit status 1.
// PostgreSQL checks its own pages as it reads them (and its data
// checksums, when on), so connecting, which the command does next, is its
// cheapest check.
func checkDatabase(ctx context.Context, db, advice string) error {
	if store.KindOf(db) != store.SQLite {
		return nil
	}
	path := store.SQLitePath(db)
	if err := sqlite.CheckPath(path); err != nil {
		return &ExitError{Code: 1, Err: fmt.Errorf("--db %s: %w", db, err)}
	}
	err := sqlite.Check(ctx, path)
	var d *sqlite.DamagedError
	switch {
	case errors.As(err, &d):
		return &ExitError{Code: 1, Err: fmt.Errorf("--db %w: %s", err, advice)}
	case err != nil:
		return &ExitError{Code: 1, Err: fmt.Errorf("--db %s: %w", db, err)}
	}
	return nil
}

// taskTransport builds the transport of a command that works http tasks
// (fetch, tasks worker): its series registered on reg beside the tasks',
// and its base the network, its failures marked so that a task tells them
// from faults of this machine (tasks.Options.WireMarked).
func (f *clientFlags) taskTransport(stderr io.Writer, reg prometheus.Registerer) (*transport.Transport, error) {
	return f.transportWith(stderr, func(opts *wiring.Options) {
		opts.Registerer = reg
		opts.Base = tasks.WireTransport(http.DefaultTransport.(*http.Transport).Clone())
	})
}

// describeUnmatched says what a host no provider owns gets, and how to pin
// it.
func describeUnmatched(e transport.Event, base string) string {
	pin := fmt.Sprintf("to pin it: --provider NAME=%s (or a [providers.NAME] section with base_url in --config)", base)
	switch {
	case !e.Auto:
		return fmt.Sprintf("ratekeeper: %s matched no provider: its requests go without a token, paced only by its own rate-limit headers; %s", base, pin)
	case e.TokenEnv != "":
		return fmt.Sprintf("ratekeeper: %s matched no provider: sending it the token in %s (to this host only), paced by its rate-limit headers, or 60 requests a minute when it states none; %s",
			base, e.TokenEnv, pin)
	}
	return fmt.Sprintf("ratekeeper: %s matched no provider: no token (set %s to send one), paced by its rate-limit headers, or 60 requests a minute when it states none; %s",
		base, strings.Join(e.Variables, " or "), pin)
}

func describeEvent(e transport.Event) string {
	who := e.Provider
	if e.Resource != "" {
		who += " " + e.Resource
	}
	switch e.Kind {
	case transport.EventWaited:
		return fmt.Sprintf("ratekeeper: waited %s for %s quota (%s)", e.Wait.Round(time.Millisecond), who, e.Credential)
	case transport.EventRateLimited:
		return fmt.Sprintf("ratekeeper: %s refused by a %s rate limit (HTTP %d, %s); waiting %s", who, e.Limit, e.Status, e.Credential, e.Wait.Round(time.Millisecond))
	case transport.EventCredentialInvalid:
		return fmt.Sprintf("ratekeeper: %s rejected credential %s; it is left out for an hour (status --live tries it again at once)", e.Provider, e.Credential)
	case transport.EventUnmatched:
		base := e.URL
		if u, err := url.Parse(e.URL); err == nil {
			base = (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
		}
		return describeUnmatched(e, base)
	case transport.EventHoldersFreed:
		return fmt.Sprintf("ratekeeper: freed %d reservations of ratekeeper processes that are gone (killed with requests in flight)", e.Attempt)
	case transport.EventRetried:
		cause := fmt.Sprintf("HTTP %d", e.Status)
		if e.Err != nil {
			cause = e.Err.Error()
		}
		return fmt.Sprintf("ratekeeper: retrying %s after %s in %s (attempt %d)", who, cause, e.Wait.Round(time.Millisecond), e.Attempt+1)
	}
	return fmt.Sprintf("ratekeeper: %s %s", e.Kind, who)
}
