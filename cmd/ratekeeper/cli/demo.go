package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/demo"
)

func init() { register(newDemoCmd) }

func newDemoCmd() *cobra.Command {
	var o demo.Options
	var app bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a batch against a simulated GitHub through the rate-keeping client, and compare with the ideal",
		Long: `demo starts a simulated GitHub API on loopback with five made-up tokens: two
belonging to the same user (ratekeeper must detect it and pace them as one
bucket), two other users and one revoked token. It sends a batch of GETs
(repositories, READMEs, issue pages, some of them twice) through the real
client with a pool of workers, shows progress — bars on a terminal, a plain
line every --interval otherwise — and ends with a summary: requests, free 304s,
waits, violations counted by the simulator, quota used against the physical
limit K·L/W, and the elapsed time against the ideal. Then (unless --app=false)
a GitHub App on three organisations, given to the client by its id and key
alone: it finds the installations, mints each a token, and sends every
repository's GET to its own organisation's installation, each with its own
budget.

Nothing leaves this machine and no real token is read. Exit status 0 when the
batch completed with no violation, 1 otherwise, 2 for bad flags.`,
		Example: `  ratekeeper demo
  ratekeeper demo --policy adaptive
  ratekeeper demo --size 3000 --limit 500 --workers 16`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.SkipApp = !app
			if err := o.Validate(); err != nil {
				return exitf(2, "--%v", err)
			}
			s, err := demo.Run(cmd.Context(), cmd.OutOrStdout(), o)
			if err != nil {
				return exitf(1, "demo: %v", err)
			}
			var problems []error
			if s.Violations > 0 {
				problems = append(problems, fmt.Errorf("%d violations", s.Violations))
			}
			if s.Failed > 0 {
				problems = append(problems, fmt.Errorf("%d of %d GETs failed", s.Failed, s.Jobs))
			}
			if a := s.App; a != nil && (a.Failed > 0 || a.Wrong > 0 || a.Violations > 0) {
				problems = append(problems, fmt.Errorf("the App: %d of %d GETs failed, %d to a wrong installation, %d violations", a.Failed, a.Jobs, a.Wrong, a.Violations))
			}
			if len(problems) > 0 {
				return exitf(1, "demo: %v", errors.Join(problems...))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Size, "size", demo.DefaultSize, "GETs in the batch")
	f.IntVar(&o.Workers, "workers", demo.DefaultWorkers, "workers sending the batch")
	f.StringVar(&o.Policy, "policy", demo.DefaultPolicy, "pacing policy: greedy, spread or adaptive")
	f.Int64Var(&o.Limit, "limit", demo.DefaultLimit, "requests per owner per window on the simulated API")
	f.DurationVar(&o.Window, "window", demo.DefaultWindow, "window length, whole seconds")
	f.DurationVar(&o.Latency, "latency", demo.DefaultLatency, "latency of every simulated answer")
	f.StringVar(&o.Progress, "progress", demo.ProgressAuto, "auto (bars on a terminal, lines otherwise), bars, lines or off")
	f.DurationVar(&o.Interval, "interval", demo.DefaultInterval, "period of the plain progress lines")
	f.BoolVar(&app, "app", true, "after the batch, show a GitHub App on three organisations")
	return cmd
}
