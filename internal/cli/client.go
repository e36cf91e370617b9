package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/transport"
)

// clientFlags are the flags of every command that talks to APIs through
// the rate-keeping client.
type clientFlags struct {
	db        string
	providers []string
	config    string
	policy    string
	reserve   int
	maxWait   time.Duration
	verbose   bool
}

func (f *clientFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.db, "db", "./ratekeeper.db",
		"database shared by every ratekeeper process using it: a SQLite file, or postgres://… for a fleet; \"memory\" keeps state in this process only")
	fl.StringSliceVar(&f.providers, "provider", nil,
		"NAME=BASEURL adds or moves a provider (repeatable), e.g. github=http://127.0.0.1:8080/github; a bare NAME selects a configured provider")
	fl.StringVar(&f.config, "config", "", "TOML file describing providers, tokens env, limits and policy")
	fl.StringVar(&f.policy, "policy", "greedy", "pacing policy: greedy (as fast as the quota allows), spread or adaptive (leave quota for other work)")
	fl.IntVar(&f.reserve, "reserve", 0, "requests per bucket to keep back for other work")
	fl.DurationVar(&f.maxWait, "max-wait", transport.DefaultMaxWait, "longest single wait for quota; beyond it the request fails saying when quota returns")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "tell which credential, waits and cache outcome on stderr")
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
func (f *clientFlags) options(stderr io.Writer) (ratekeeper.Options, error) {
	if f.reserve < 0 {
		return ratekeeper.Options{}, fmt.Errorf("--reserve %d: want 0 or more requests", f.reserve)
	}
	if f.maxWait <= 0 {
		return ratekeeper.Options{}, fmt.Errorf("--max-wait %v: want a positive duration such as 5m", f.maxWait)
	}
	_, configure := f.split()
	opts := ratekeeper.Options{
		DB:         f.db,
		ConfigFile: f.config,
		Providers:  configure,
		Policy:     f.policy,
		Reserve:    f.reserve,
		MaxWait:    f.maxWait,
	}
	if f.verbose {
		opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		opts.OnEvent = func(e transport.Event) { fmt.Fprintln(stderr, describeEvent(e)) }
	}
	return opts, nil
}

// transport builds the client's transport, with a usage error for bad
// flags and exit status 1 for a database that cannot be used.
func (f *clientFlags) transport(stderr io.Writer) (*transport.Transport, error) {
	return f.transportWith(stderr, nil)
}

// transportWith is transport with a hook that adjusts the options (a
// Prometheus registerer, say) before the transport is built.
func (f *clientFlags) transportWith(stderr io.Writer, tune func(*ratekeeper.Options)) (*transport.Transport, error) {
	opts, err := f.options(stderr)
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	if tune != nil {
		tune(&opts)
	}
	t, err := ratekeeper.NewTransport(opts)
	var dbErr *ratekeeper.DatabaseError
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
		return fmt.Sprintf("ratekeeper: %s rejected credential %s; it will not be used again", e.Provider, e.Credential)
	case transport.EventRetried:
		cause := fmt.Sprintf("HTTP %d", e.Status)
		if e.Err != nil {
			cause = e.Err.Error()
		}
		return fmt.Sprintf("ratekeeper: retrying %s after %s in %s (attempt %d)", who, cause, e.Wait.Round(time.Millisecond), e.Attempt+1)
	}
	return fmt.Sprintf("ratekeeper: %s %s", e.Kind, who)
}
