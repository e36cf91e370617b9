package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/sim"
)

func init() { register(newSimCmd) }

type simOptions struct {
	config      string
	listen      string
	allowRemote bool

	dialect         string
	prefix          string
	tokens          string
	limit           int64
	window          time.Duration
	windowMode      string
	exhaustedStatus int
	seed            int64
	skew            time.Duration
	latency         time.Duration

	noSecondary     bool
	maxConcurrent   int
	pointsPerMinute int
	writeSpacing    time.Duration
	penalty         time.Duration
	retryAfter      bool

	errorRate       float64
	unavailableRate float64
	dropRate        float64
	slowRate        float64
	slowDelay       time.Duration
	bareRefusalAt   int64
	bareStatus      int
	overloadRate    float64

	endpointLimits []string
	resourceLimits []string
	outputRatio    float64
}

// simShapeFlags describe the APIs; a config file describes them instead.
var simShapeFlags = []string{
	"dialect", "prefix", "tokens", "limit", "window", "window-mode", "exhausted-status", "skew", "latency",
	"no-secondary", "max-concurrent", "points-per-minute", "write-spacing", "penalty", "secondary-retry-after",
	"error-rate", "unavailable-rate", "drop-rate", "slow-rate", "slow-delay", "endpoint-limit",
	"bare-refusal-at", "bare-refusal-status",
	"overload-rate", "resource-limit", "output-ratio",
}

var simSecondaryFlags = []string{"max-concurrent", "points-per-minute", "write-spacing", "penalty", "secondary-retry-after"}

func newSimCmd() *cobra.Command {
	var o simOptions
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Serve simulated rate-limited APIs (GitHub, GitLab, Hugging Face, Gitea, OpenAI, Anthropic) on loopback",
		Long: `sim serves simulated GitHub, GitLab, Hugging Face, Gitea, OpenAI and Anthropic
APIs with their real rate-limit headers, per-token buckets, secondary limits,
ETags and optional faults, so clients can be tested without spending real quota.

The openai and anthropic dialects charge tokens as well as requests, from
buckets that refill continuously: --limit is requests per --window, and
--resource-limit tokens=N (OpenAI) or input_tokens=N, output_tokens=N
(Anthropic) the tokens; --window scales every bucket, so --window 10s turns
their minutes into ten seconds. A prompt is one token per 4 characters; an
answer is --output-ratio of its max_tokens on average.

Without --config, the flags describe the APIs: one dialect is mounted at /, several
(--dialect github,gitlab) each at /<dialect>. --tokens 3 makes the tokens
sim-token-1 … sim-token-3 (each its own owner); --tokens alice:tok-a1,alice:tok-a2,tok-b
gives tokens whose OWNER: prefix makes them share that owner's bucket.
With --config FILE (TOML or JSON, see 'go doc github.com/ratekeeper/ratekeeper/sim'),
only --listen, --allow-remote and --seed may be given too.

--endpoint-limit adds a limit on the endpoints a pattern matches that sends no
header while it admits, as GitLab's Users API limits or GitHub's unpublished
ones: counted per owner, it refuses with 429 and, by refusal=, its own headers
and Retry-After (headers, the default), Retry-After only, no header at all
(bare) or a plain "Retry later" (plain).

It prints one line per API with its URL and masked tokens, serves GET /_stats
(per-bucket and per-endpoint-limit counters, with violations and early
retries: requests to a refused scope before the time its refusal named;
?timeline=1 adds requests per second) and POST /_sim/touch?path=P (change a
resource), and runs until interrupted; it then prints the totals.`,
		Example: `  ratekeeper sim
  ratekeeper sim --dialect github,gitlab,huggingface,gitea --tokens 2 --limit 100 --window 1m
  ratekeeper sim --dialect gitlab --endpoint-limit 'GET /api/v4/users/*=40/60s,refusal=bare'
  ratekeeper sim --dialect openai --tokens org-acme:sk-1,org-acme:sk-2 --window 10s --resource-limit tokens=20000
  ratekeeper sim --dialect anthropic --window 10s --overload-rate 0.05
  ratekeeper sim --config sim.toml --listen 127.0.0.1:0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSim(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.config, "config", "", "TOML or JSON file describing the APIs")
	f.StringVar(&o.listen, "listen", "127.0.0.1:8081", "address to listen on; port 0 picks a free one (the default is not serve's 8080, so both run side by side)")
	f.BoolVar(&o.allowRemote, "allow-remote", false, "allow listening on a non-loopback address")
	f.StringVar(&o.dialect, "dialect", "github", "dialects to serve, comma-separated: github, gitlab, huggingface, gitea, openai, anthropic")
	f.StringVar(&o.prefix, "prefix", "", "path to mount a single API at (default /)")
	f.StringVar(&o.tokens, "tokens", "3", "a count N (tokens sim-token-1…N) or a list TOKEN,OWNER:TOKEN,…")
	f.Int64Var(&o.limit, "limit", 0, "primary limit per owner and window (0: the provider's default)")
	f.DurationVar(&o.window, "window", 0, "window length, whole seconds (0: the provider's default)")
	f.StringVar(&o.windowMode, "window-mode", "", "rolling or fixed (default: the provider's)")
	f.IntVar(&o.exhaustedStatus, "exhausted-status", 0, "status for an empty bucket, 403 or 429 (0: the provider's)")
	f.Int64Var(&o.seed, "seed", 1, "seed of the fault injection")
	f.DurationVar(&o.skew, "skew", 0, "offset of the server's clock (Date and reset times)")
	f.DurationVar(&o.latency, "latency", 0, "delay added to every answer")
	f.BoolVar(&o.noSecondary, "no-secondary", false, "turn secondary limits off")
	f.IntVar(&o.maxConcurrent, "max-concurrent", 0, "secondary limit: requests of one owner in flight (replaces the provider's secondary limits)")
	f.IntVar(&o.pointsPerMinute, "points-per-minute", 0, "secondary limit: points per owner per minute (GET 1, write 5)")
	f.DurationVar(&o.writeSpacing, "write-spacing", 0, "secondary limit: least time between two writes of one owner")
	f.DurationVar(&o.penalty, "penalty", time.Minute, "how long a secondary-limit penalty lasts")
	f.BoolVar(&o.retryAfter, "secondary-retry-after", true, "send retry-after with secondary-limit refusals")
	f.Float64Var(&o.errorRate, "error-rate", 0, "fraction of requests answered 500/502/504")
	f.Float64Var(&o.unavailableRate, "unavailable-rate", 0, "fraction of requests answered 503 with Retry-After")
	f.Float64Var(&o.dropRate, "drop-rate", 0, "fraction of connections closed without an answer")
	f.Float64Var(&o.slowRate, "slow-rate", 0, "fraction of answers delayed by --slow-delay")
	f.DurationVar(&o.slowDelay, "slow-delay", 2*time.Second, "delay of slow answers")
	f.Int64Var(&o.bareRefusalAt, "bare-refusal-at", 0, "answer the API's request number N (from 1) with a proxy's page and no rate-limit header (0: none)")
	f.IntVar(&o.bareStatus, "bare-refusal-status", 429, "status of that answer: 429 or 403")
	f.Float64Var(&o.overloadRate, "overload-rate", 0, "fraction of requests answered as an overloaded server (Anthropic's 529, a 503 elsewhere)")
	f.StringArrayVar(&o.resourceLimits, "resource-limit", nil, `a limit of another resource, repeatable: "NAME=LIMIT" (tokens, input_tokens, output_tokens, search…)`)
	f.Float64Var(&o.outputRatio, "output-ratio", 0, "language models: mean answer length as a fraction of max_tokens (0: 0.25)")
	f.StringArrayVar(&o.endpointLimits, "endpoint-limit", nil,
		`a limit on some endpoints that sends no header until it refuses, repeatable: "[METHOD ]PATH=LIMIT/WINDOW[,refusal=headers|retry-after|bare|plain][,name=NAME][,mode=fixed|rolling]" (* is one path segment, ** one or more)`)
	return cmd
}

func runSim(cmd *cobra.Command, o simOptions) error {
	if err := sim.ListenAllowed(o.listen, o.allowRemote); err != nil {
		return exitf(2, "%v", err)
	}
	cfg, err := simConfig(cmd, o)
	if err != nil {
		return exitf(2, "%v", err)
	}
	srv, err := sim.New(cfg)
	if err != nil {
		return exitf(2, "%v", err)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return exitf(1, "listen on %s: %v", o.listen, err)
	}
	base := "http://" + ln.Addr().String()
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "ratekeeper sim listening on %s (stats: %s/_stats); Ctrl-C stops it\n", base, base)
	for _, a := range srv.APIs() {
		fmt.Fprintln(out, describeAPI(a, base))
	}

	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return exitf(1, "serve: %v", err)
	case <-cmd.Context().Done():
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return exitf(1, "shutdown: %v", err)
	}
	<-served
	printSimTotals(out, srv.Stats())
	return nil
}

// simConfig builds the config from --config or from the flags.
func simConfig(cmd *cobra.Command, o simOptions) (sim.Config, error) {
	flags := cmd.Flags()
	if o.config != "" {
		var given []string
		for _, name := range simShapeFlags {
			if flags.Changed(name) {
				given = append(given, "--"+name)
			}
		}
		if len(given) > 0 {
			return sim.Config{}, fmt.Errorf("%s cannot be combined with --config: describe the APIs in the file", strings.Join(given, ", "))
		}
		cfg, err := sim.LoadConfig(o.config)
		if err != nil {
			return sim.Config{}, err
		}
		if flags.Changed("seed") {
			cfg.Seed = o.seed
		}
		return cfg, nil
	}
	toks, err := sim.ParseTokens(o.tokens)
	if err != nil {
		return sim.Config{}, fmt.Errorf("--%v", err)
	}
	var limits []sim.EndpointLimitConfig
	for _, spec := range o.endpointLimits {
		l, err := sim.ParseEndpointLimit(spec)
		if err != nil {
			return sim.Config{}, fmt.Errorf("--%v", err)
		}
		limits = append(limits, l)
	}
	resources := map[string]sim.ResourceConfig{}
	for _, spec := range o.resourceLimits {
		name, n, ok := strings.Cut(spec, "=")
		limit, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
		if !ok || err != nil || limit <= 0 {
			return sim.Config{}, fmt.Errorf("--resource-limit %q: want NAME=LIMIT with a positive count, e.g. tokens=20000", spec)
		}
		resources[strings.TrimSpace(name)] = sim.ResourceConfig{Limit: limit}
	}
	q := sim.QuickOptions{EndpointLimits: limits, Resources: resources, OutputRatio: o.outputRatio,
		Dialects: strings.Split(o.dialect, ","), Prefix: o.prefix, Tokens: toks,
		Limit: o.limit, Window: o.window, WindowMode: o.windowMode, ExhaustedStatus: o.exhaustedStatus,
		Seed: o.seed, Skew: o.skew, Latency: o.latency,
		Faults: sim.FaultConfig{ErrorRate: o.errorRate, UnavailableRate: o.unavailableRate, DropRate: o.dropRate,
			SlowRate: o.slowRate, SlowDelay: o.slowDelay, BareRefusalAt: o.bareRefusalAt, BareRefusalStatus: o.bareStatus,
			OverloadRate: o.overloadRate},
	}
	secondaryGiven := false
	for _, name := range simSecondaryFlags {
		secondaryGiven = secondaryGiven || flags.Changed(name)
	}
	switch {
	case o.noSecondary && secondaryGiven:
		return sim.Config{}, errors.New("--no-secondary cannot be combined with --max-concurrent, --points-per-minute, --write-spacing, --penalty or --secondary-retry-after")
	case o.noSecondary:
		q.Secondary = &sim.SecondaryConfig{}
	case secondaryGiven:
		q.Secondary = &sim.SecondaryConfig{MaxConcurrent: o.maxConcurrent, PointsPerMinute: o.pointsPerMinute,
			WriteSpacing: o.writeSpacing, Penalty: o.penalty, RetryAfter: o.retryAfter}
	}
	return sim.QuickConfig(q)
}

// describeAPI is the one line printed per API: never a token's text.
func describeAPI(a sim.APIInfo, base string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-12s %s  [%s]", a.Name, a.URL(base), a.Dialect)
	main := a.Resources[0]
	if main.Limit > 0 {
		fmt.Fprintf(&b, "  %d/%s %s", main.Limit, shortDuration(main.Window), main.WindowMode)
	} else {
		b.WriteString("  unlimited")
	}
	if a.Secondary != nil {
		b.WriteString("  secondary limits on")
	}
	for _, l := range a.EndpointLimits {
		fmt.Fprintf(&b, "  [%s %d/%s %s, refused %s]", l.Pattern, l.Limit, shortDuration(l.Window), l.WindowMode, l.Refusal)
	}
	for _, app := range a.Apps {
		fmt.Fprintf(&b, "  App %d installed on %s", app.ID, strings.Join(app.Installations, ", "))
	}
	if len(a.Tokens) == 0 && len(a.Apps) == 0 {
		b.WriteString("  no tokens (anonymous only)")
	} else if len(a.Tokens) > 0 {
		const shown = 8
		var parts []string
		for i, t := range a.Tokens {
			if i == shown {
				parts = append(parts, fmt.Sprintf("… and %d more", len(a.Tokens)-shown))
				break
			}
			parts = append(parts, fmt.Sprintf("%s (%s)", t.Masked, t.Owner))
		}
		b.WriteString("  tokens: " + strings.Join(parts, ", "))
	}
	return b.String()
}

// shortDuration writes 1h0m0s as 1h and 5m0s as 5m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func printSimTotals(out io.Writer, st sim.Stats) {
	t := st.Total
	fmt.Fprintf(out, "ratekeeper sim stopped: %d requests, %d accepted, %d not modified, %d unauthorized, %d violations (%d primary, %d secondary, %d endpoint limits), %d early retries\n",
		t.Requests, t.Accepted, t.NotModified, t.Unauthorized, t.Violations, t.PrimaryViolations, t.SecondaryViolations, t.EndpointViolations, t.EarlyRetries)
	if len(st.APIs) > 1 {
		for _, a := range st.APIs {
			fmt.Fprintf(out, "  %-12s %d requests, %d violations, %d early retries\n", a.API, a.Requests, a.Violations, a.EarlyRetries)
		}
	}
	for _, e := range st.EndpointLimits {
		fmt.Fprintf(out, "  %s %s (%s): %d requests, %d refused, %d early retries\n", e.API, e.Name, e.Owner, e.Requests, e.Refused, e.EarlyRetries)
	}
}
