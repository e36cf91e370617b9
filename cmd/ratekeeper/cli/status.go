package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/transport"
)

func init() { register(newStatusCmd) }

type statusOptions struct {
	client clientFlags
	asJSON bool
	live   bool
}

func newStatusCmd() *cobra.Command {
	var o statusOptions
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each credential's owner, quota per resource, time to reset and health",
		Long: `status first prints one line per provider: its health, its credentials, its
main resource's quota summed over distinct buckets (tokens of one owner count
once) and the soonest reset, e.g.

  github: HEALTHY, 3 credentials, core 9,210/10,000, resets in 34m

Then, for every credential: the owner, each resource's remaining/limit (%),
when it resets, its health (HEALTHY 50 % or more left, FAIR 20–50 %, WARNING
5–20 %, CRITICAL under 5 %, EXHAUSTED: the bands the adaptive policy slows
down by), invalid tokens, and the owner's cap on requests in flight (CONCURRENCY, cap/max): a new owner starts at
a few and gains one per round of successes ("ramping"); a secondary-limit
refusal lowers it to what the server allowed ("lowered"), and it regains one a
minute. A secondary-limit pause under way is shown with its time left.

With a database (--db, ./ratekeeper.db by default) it shows what the processes
using it have learnt, without sending anything. --live asks the servers too:
each token's "who am I" endpoint (which validates it and names its owner) and,
where the provider has one, the free status endpoint (GitHub's GET /rate_limit,
which costs no quota). With --db memory there is nothing stored, so it is
always live. --provider NAME limits the report to some providers.`,
		Example: `  ratekeeper status
  ratekeeper status --provider github --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runStatus(cmd, &o) },
	}
	o.client.add(cmd)
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print one JSON object")
	cmd.Flags().BoolVar(&o.live, "live", false, "ask the servers (validation and free status endpoints); always on with --db memory")
	return cmd
}

func runStatus(cmd *cobra.Command, o *statusOptions) error {
	t, err := o.client.transport(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer t.Close()
	selected, _ := o.client.split()
	if store.KindOf(o.client.db) == store.Memory {
		o.live = true
	}
	if o.live {
		if err := t.Refresh(cmd.Context(), selected...); err != nil {
			return exitf(1, "%v", err)
		}
	}
	rep, err := t.Report(cmd.Context(), time.Now(), selected...)
	if err != nil {
		return exitf(1, "%v", err)
	}
	if !o.live {
		writeNotShown(cmd.ErrOrStderr(), o.client.db, rep)
	}
	out := cmd.OutOrStdout()
	if o.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	writeOverview(out, rep.Providers)
	writeStatus(out, rep.Credentials, rep.GeneratedAt, o.client.verbose)
	return nil
}

// writeOverview prints each provider's overall line, e.g. "github:
// HEALTHY, 3 credentials, core 4,210/5,000, resets in 34m".
func writeOverview(out io.Writer, ps []transport.ProviderSummary) {
	for _, p := range ps {
		var b strings.Builder
		if p.Anonymous {
			fmt.Fprintf(&b, "%s: %s, anonymous", p.Provider, p.Health)
		} else {
			fmt.Fprintf(&b, "%s: %s, %d credential%s", p.Provider, p.Health, p.Credentials, plural(p.Credentials))
		}
		if p.Invalid > 0 {
			fmt.Fprintf(&b, " (%d invalid)", p.Invalid)
		}
		switch {
		case p.Remaining == nil:
			fmt.Fprintf(&b, ", %s quota not known yet", p.Resource)
		case p.Limit == nil:
			fmt.Fprintf(&b, ", %s %s left", p.Resource, humanize.Comma(*p.Remaining))
		default:
			fmt.Fprintf(&b, ", %s %s/%s", p.Resource, humanize.Comma(*p.Remaining), humanize.Comma(*p.Limit))
		}
		if p.ResetsIn != nil {
			fmt.Fprintf(&b, ", resets in %s", time.Duration(*p.ResetsIn*float64(time.Second)).Round(time.Second))
		}
		fmt.Fprintln(out, b.String())
	}
	if len(ps) > 0 {
		fmt.Fprintln(out)
	}
}

// writeStatus prints the report made at now as a table, one line per
// bucket.
func writeStatus(out io.Writer, st []transport.CredentialStatus, now time.Time, verbose bool) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "PROVIDER\tCREDENTIAL\tOWNER\tSTATE\tRESOURCE\tREMAINING\tRESETS IN\tHEALTH\tCONCURRENCY")
	for _, c := range st {
		owner := c.Owner
		if owner == "" {
			owner = "-"
		}
		state := c.State
		if c.Reason != "" && (verbose || c.State == "invalid") {
			state += " (" + c.Reason + ")"
		}
		conc := concurrencyText(c.Concurrency, now)
		if len(c.Resources) == 0 {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t-\t-\t-\t-\t%s\n", c.Provider, c.Credential, owner, state, conc)
			continue
		}
		for i, r := range c.Resources {
			p, cr, ow, stt, cc := c.Provider, c.Credential, owner, state, conc
			if i > 0 {
				p, cr, ow, stt, cc = "", "", "", "", ""
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p, cr, ow, stt, resourceText(r), remainingText(r, verbose), resetText(r), r.Health, cc)
		}
	}
	w.Flush()
}

// resourceText is the resource's name; a scope's says where its limit
// comes from and, while a refusal pauses it, until when: "/api/v4/users/*
// (learnt, paused 42s)".
func resourceText(r transport.ResourceStatus) string {
	if r.Origin == "" {
		return r.Resource
	}
	if r.BlockedUntil != nil && r.ResetsIn != nil {
		return fmt.Sprintf("%s (%s, paused until %s)", r.Resource, r.Origin, r.BlockedUntil.Format(time.TimeOnly))
	}
	return r.Resource + " (" + r.Origin + ")"
}

func remainingText(r transport.ResourceStatus, verbose bool) string {
	var b strings.Builder
	switch {
	case r.Remaining == nil:
		b.WriteString("?")
	case r.Limit == nil:
		fmt.Fprintf(&b, "%d", *r.Remaining)
	default:
		fmt.Fprintf(&b, "%d/%d", *r.Remaining, *r.Limit)
	}
	if r.Unit == "points" {
		b.WriteString(" points")
	}
	if r.Percent != nil {
		fmt.Fprintf(&b, " (%.0f%%)", *r.Percent)
	}
	if r.Assumed && verbose {
		b.WriteString(" assumed")
	}
	return b.String()
}

// concurrencyText is an owner's cap on requests in flight: "6/20
// lowered", "5/20 ramping", "20/20", with a pause under way.
func concurrencyText(c *transport.ConcurrencyStatus, now time.Time) string {
	if c == nil {
		return "-"
	}
	var b strings.Builder
	switch {
	case c.Cap == 0:
		b.WriteString("no cap")
	case c.Max > 0:
		fmt.Fprintf(&b, "%d/%d", c.Cap, c.Max)
	default:
		fmt.Fprintf(&b, "%d", c.Cap)
	}
	switch {
	case c.Lowered:
		b.WriteString(" lowered")
	case c.Ramping:
		b.WriteString(" ramping")
	}
	if c.PausedUntil != nil {
		fmt.Fprintf(&b, ", paused %s", c.PausedUntil.Sub(now).Round(time.Second))
	}
	return b.String()
}

func resetText(r transport.ResourceStatus) string {
	if r.ResetsIn == nil {
		return "-"
	}
	return (time.Duration(*r.ResetsIn * float64(time.Second))).Round(time.Second).String()
}

// writeNotShown says what the database holds that the report does not
// show (state for a provider at another base URL, or of other tokens),
// with the flag that shows it; or, when it holds nothing at all, says so.
func writeNotShown(w io.Writer, db string, rep transport.StatusReport) {
	if !anyResource(rep.Credentials) && len(rep.NotShown) == 0 {
		fmt.Fprintf(w, "ratekeeper: %s holds no quota state yet; run with --live to ask the servers\n", db)
		return
	}
	for _, st := range rep.NotShown {
		held := fmt.Sprintf("%d bucket%s of %d owner%s", st.Buckets, plural(st.Buckets), st.Owners, plural(st.Owners))
		if st.Served {
			fmt.Fprintf(w, "ratekeeper: %s also holds %s for %s at %s not shown: other tokens than those given here, or requests that carried their own\n",
				db, held, st.Provider, st.BaseURL)
			continue
		}
		fmt.Fprintf(w, "ratekeeper: %s also holds %s for %s at %s; add --provider %s=%s to see them\n",
			db, held, st.Provider, st.BaseURL, st.Provider, st.BaseURL)
	}
}

func anyResource(st []transport.CredentialStatus) bool {
	for _, c := range st {
		if len(c.Resources) > 0 {
			return true
		}
	}
	return false
}
