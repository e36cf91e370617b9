package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"
	promcollectors "github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/gateway"
	"github.com/ratekeeper/ratekeeper/internal/buildinfo"
	"github.com/ratekeeper/ratekeeper/transport"
	"github.com/ratekeeper/ratekeeper/wiring"
)

func init() { register(newServeCmd) }

type serveOptions struct {
	client             clientFlags
	listen             string
	clientKeys         string
	passThrough        bool
	maxPassThrough     int
	passThroughRefusal time.Duration
	maxBody            string
	coalesceLimit      string
	upstreamTimeout    time.Duration
	readTimeout        time.Duration
	maxUnauthenticated int
	maxPendingPerAddr  int
	hosts              []string
	publicURL          string
	refresh            time.Duration
	shutdownTimeout    time.Duration
	upstreamHeaders    bool
}

func newServeCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the rate-limit-aware gateway: a reverse proxy with a dashboard, /status and /metrics",
		Long: `serve runs an HTTP gateway that lets programs in any language share this
machine's (or fleet's, with --db) tokens, quota view and conditional cache.

A request for /NAME/PATH goes to provider NAME's base URL plus PATH, paced and
sent with the credential that can go soonest; identical concurrent GETs share one
upstream request. --max-wait bounds the whole time a request waits for quota,
queueing behind other requests included: when quota returns later than that,
the client gets 429 at once, with Retry-After (when quota returns) and
x-ratelimit-remaining/-reset headers, so its own rate-limit handling works.
Every answer's rate-limit headers say what the pool of tokens can still do
(limits summed over distinct buckets, the soonest reset), the server's own
under X-Ratekeeper-Upstream-NAME; --upstream-rate-limit-headers passes the
server's instead. Nothing is sent at start: owners are learnt from answers. Once
sent, a request gets --upstream-timeout for the upstream's answer (504 beyond);
an answer is always recorded in the quota state, even when its client has left,
and a request whose client left while it waited is not sent. The gateway does
not resend after server errors: the client gets the upstream's answer.

With --pass-through a client may send its own token in the provider's auth
header; it is forwarded and its quota tracked (at most --max-pass-through tokens,
the least recently used forgotten). A token the provider rejects (401) is then
refused by the gateway itself for --pass-through-refusal, without being sent
upstream again.

Endpoints: / (dashboard), /status (JSON, as 'status --json'), /metrics
(Prometheus), /healthz (alive: 200) and /readyz (200 when the database
answers and each provider has a token not rejected, else 503 and why).

Anywhere but loopback, clients must present a key: --client-keys FILE holds one
client per line, "NAME KEY" (# comments allowed; keys of 16+ characters from
letters, digits and -._~+/=, e.g. from 'openssl rand -hex 24'); RATEKEEPER_GATEWAY_KEYS
may hold the same entries separated by commas or newlines. Clients send the key in the
X-Ratekeeper-Key header (or, without --pass-through, as their token). The key is
checked before a request's body is read; a request without a valid key gets 401
and its connection is closed. A request header must arrive within 10 s and a
body within --read-timeout (408 beyond). With client keys, at most
--max-unauthenticated connections may be open without having presented a key
(more get 503). With or without keys, when one client address holds more than
--max-pending-per-address connections that have sent no request for a second,
each new connection from it closes the oldest of them: a client trickling
headers loses its own connections, never locks others out. What is refused is
counted in /metrics (ratekeeper_gateway_refused_connections_total by reason)
and logged, a line per reason at most every 10 s. SIGINT or
SIGTERM stops accepting and lets requests in flight finish (--shutdown-timeout).`,
		Example: `  ratekeeper serve --provider github=https://api.github.com
  curl http://127.0.0.1:8080/github/repos/golang/go
  ratekeeper serve --listen 0.0.0.0:8080 --client-keys keys.txt --db postgres://db/ratekeeper
  ratekeeper serve --provider github --pass-through`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, &o) },
	}
	o.client.add(cmd)
	f := cmd.Flags()
	// A client holds a connection open while the gateway waits, so the
	// gateway's default wait is short.
	o.client.maxWait = gateway.DefaultMaxWait
	mw := f.Lookup("max-wait")
	mw.DefValue = gateway.DefaultMaxWait.String()
	mw.Usage = "longest a request waits for quota in all, queueing included; beyond it the client gets 429 with Retry-After"
	f.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to listen on (HOST:PORT); anything but loopback needs --client-keys")
	f.StringVar(&o.clientKeys, "client-keys", "", `file of client keys, one "NAME KEY" per line`)
	f.BoolVar(&o.passThrough, "pass-through", false, "forward a client's own token (in the provider's auth header) and track its quota")
	f.IntVar(&o.maxPassThrough, "max-pass-through", gateway.DefaultMaxPassThrough, "most client tokens tracked at once with --pass-through; the least recently used are forgotten")
	f.DurationVar(&o.passThroughRefusal, "pass-through-refusal", gateway.DefaultPassThroughRefusal, "how long a pass-through token the provider rejected (401) is refused without being sent again (0: never refused)")
	f.StringVar(&o.maxBody, "max-body", "10MiB", "largest request body accepted (413 beyond)")
	f.StringVar(&o.coalesceLimit, "coalesce-limit", "1MiB", "largest answer shared between identical concurrent GETs; 0 turns coalescing off")
	f.DurationVar(&o.upstreamTimeout, "upstream-timeout", gateway.DefaultUpstreamTimeout, "longest wait for an upstream's response header once a request is sent (504 beyond)")
	f.DurationVar(&o.readTimeout, "read-timeout", gateway.DefaultReadTimeout, "longest time to receive a request's body (408 beyond, connection closed)")
	f.IntVar(&o.maxUnauthenticated, "max-unauthenticated", gateway.DefaultMaxUnauthenticated, "with client keys: most connections open without having presented a key (503 beyond)")
	f.IntVar(&o.maxPendingPerAddr, "max-pending-per-address", gateway.DefaultMaxPendingPerAddress, "most connections from one client address without a request (with keys: a valid key) for a second or more; beyond it a new one closes the oldest")
	f.StringSliceVar(&o.hosts, "host", nil, "HOST=PROVIDER routes requests whose Host header is HOST to PROVIDER, whole path (repeatable)")
	f.StringVar(&o.publicURL, "public-url", "", "the gateway's URL as clients see it, for rewritten Link and Location headers (default: from the request)")
	f.DurationVar(&o.refresh, "refresh", 15*time.Minute, "read the providers' free status endpoints (GitHub's /rate_limit) this often, for the dashboard; nothing at start, nothing counted (0: never)")
	f.BoolVar(&o.upstreamHeaders, "upstream-rate-limit-headers", false, "pass the server's own rate-limit headers (default: what the pool of tokens can still do, the server's under X-Ratekeeper-Upstream-NAME)")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", gateway.DefaultShutdownTimeout, "how long requests in flight may finish after SIGTERM")
	return cmd
}

func runServe(cmd *cobra.Command, o *serveOptions) error {
	gopts, err := o.gatewayOptions(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	gw, err := gateway.New(gopts)
	var dbErr *wiring.DatabaseError
	if errors.As(err, &dbErr) {
		return exitf(1, "--db: %v", err)
	}
	if err != nil {
		return exitf(2, "%v", err)
	}
	defer gw.Close()
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return exitf(1, "listen on %s: %v", o.listen, err)
	}
	out := cmd.OutOrStdout()
	o.announce(out, "http://"+ln.Addr().String(), gw, gopts.Keys)
	if err := gw.Serve(cmd.Context(), ln); err != nil {
		return exitf(1, "%v", err)
	}
	fmt.Fprintln(out, "ratekeeper gateway stopped")
	return nil
}

// gatewayOptions reads the flags into the gateway's options; each problem
// is an input error (exit status 2).
func (o *serveOptions) gatewayOptions(stderr io.Writer) (gateway.Options, error) {
	keys, err := serveKeys(o.clientKeys)
	if err != nil {
		return gateway.Options{}, exitf(2, "%v", err)
	}
	if err := gateway.CheckListen(o.listen, keys.Len()); err != nil {
		return gateway.Options{}, exitf(2, "--listen: %v", err)
	}
	maxBody, err := parseSize("--max-body", o.maxBody, 1)
	if err != nil {
		return gateway.Options{}, exitf(2, "%v", err)
	}
	coalesce, err := parseSize("--coalesce-limit", o.coalesceLimit, 0)
	if err != nil {
		return gateway.Options{}, exitf(2, "%v", err)
	}
	if coalesce == 0 {
		coalesce = -1 // the gateway's "off"; its 0 is the default
	}
	if err := o.checkLimits(); err != nil {
		return gateway.Options{}, exitf(2, "%v", err)
	}
	hosts, err := o.hostRoutes()
	if err != nil {
		return gateway.Options{}, err
	}
	copts, err := o.client.options(stderr)
	if err != nil {
		return gateway.Options{}, exitf(2, "%v", err)
	}
	copts.UpstreamRateLimitHeaders = o.upstreamHeaders
	level := slog.LevelInfo
	if o.client.verbose {
		level = slog.LevelDebug
	}
	selected, _ := o.client.split()
	return gateway.Options{
		Client:               copts,
		Providers:            selected,
		Hosts:                hosts,
		PassThrough:          o.passThrough,
		Keys:                 keys,
		MaxBody:              maxBody,
		CoalesceLimit:        coalesce,
		UpstreamTimeout:      o.upstreamTimeout,
		ReadTimeout:          o.readTimeout,
		MaxUnauthenticated:   o.maxUnauthenticated,
		MaxPendingPerAddress: o.maxPendingPerAddr,
		MaxPassThrough:       o.maxPassThrough,
		PassThroughRefusal:   refusal(o.passThroughRefusal),
		PublicURL:            o.publicURL,
		RefreshEvery:         o.refresh,
		ShutdownTimeout:      o.shutdownTimeout,
		Registry:             serveRegistry(),
		Logger:               slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}, nil
}

// serveRegistry is the gateway's /metrics registry: the Go and process
// collectors a gateway registers by default, and the build's
// ratekeeper_build_info.
func serveRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(promcollectors.NewGoCollector(), promcollectors.NewProcessCollector(promcollectors.ProcessCollectorOpts{}), buildinfo.Collector(buildinfo.Read()))
	return reg
}

// hostRoutes reads the --host HOST=PROVIDER routes.
func (o *serveOptions) hostRoutes() (map[string]string, error) {
	hosts := map[string]string{}
	for _, h := range o.hosts {
		host, name, ok := strings.Cut(h, "=")
		if !ok || strings.TrimSpace(host) == "" || strings.TrimSpace(name) == "" {
			return nil, exitf(2, "--host %q: expected HOST=PROVIDER, e.g. api.github.local=github", h)
		}
		hosts[strings.TrimSpace(host)] = strings.TrimSpace(name)
	}
	return hosts, nil
}

// announce tells on out where the gateway listens, each provider's route
// and credentials, and how clients are admitted.
func (o *serveOptions) announce(out io.Writer, base string, gw *gateway.Gateway, keys *gateway.Keys) {
	fmt.Fprintf(out, "ratekeeper gateway on %s (dashboard %s/, status %s/status, metrics %s/metrics); Ctrl-C stops it\n", base, base, base, base)
	reg := gw.Transport().Registry()
	for _, name := range gw.Providers() {
		p := reg.Lookup(name)
		fmt.Fprintf(out, "  %s/%s/ → %s (%s)\n", base, name, p.BaseURL(), credentialCount(gw.Transport(), name))
	}
	if o.passThrough {
		note := "a token the provider rejects is not refused locally"
		if o.passThroughRefusal > 0 {
			note = "a token the provider rejects is refused for " + o.passThroughRefusal.String()
		}
		fmt.Fprintf(out, "  pass-through: clients' own tokens are forwarded and their quota tracked (at most %d tokens; %s)\n", o.maxPassThrough, note)
	}
	if keys.Len() > 0 {
		fmt.Fprintf(out, "  client keys required (%d client%s)\n", keys.Len(), plural(keys.Len()))
	}
}

// credentialCount says how many credentials the provider has: "anonymous"
// when its only one sends no token.
func credentialCount(t *transport.Transport, name string) string {
	pool, err := t.Pool(name)
	if err != nil {
		return "0 credentials"
	}
	if cs := pool.Credentials(); len(cs) == 1 && cs[0].Kind() == creds.Anonymous {
		return "anonymous"
	}
	out := fmt.Sprintf("%d credential%s", pool.Len(), plural(pool.Len()))
	for _, app := range pool.Apps() {
		out += fmt.Sprintf(", GitHub App %d (installations found as requests need them)", app.ID())
	}
	return out
}

// checkLimits refuses durations and counts that cannot work, saying what
// would.
func (o *serveOptions) checkLimits() error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--upstream-timeout", o.upstreamTimeout}, {"--read-timeout", o.readTimeout}, {"--shutdown-timeout", o.shutdownTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("%s %v: want a positive duration such as 30s", d.flag, d.v)
		}
	}
	switch {
	case o.refresh < 0:
		return fmt.Errorf("--refresh %v: want 0 (never) or a duration such as 15m", o.refresh)
	case o.passThroughRefusal < 0:
		return fmt.Errorf("--pass-through-refusal %v: want 0 (never refuse) or a duration such as 10m", o.passThroughRefusal)
	case o.maxUnauthenticated < 1:
		return fmt.Errorf("--max-unauthenticated %d: want at least 1 connection, such as %d", o.maxUnauthenticated, gateway.DefaultMaxUnauthenticated)
	case o.maxPendingPerAddr < 1:
		return fmt.Errorf("--max-pending-per-address %d: want at least 1 connection, such as %d", o.maxPendingPerAddr, gateway.DefaultMaxPendingPerAddress)
	case o.maxPassThrough < 1:
		return fmt.Errorf("--max-pass-through %d: want at least 1 token, such as %d", o.maxPassThrough, gateway.DefaultMaxPassThrough)
	}
	return nil
}

// refusal maps --pass-through-refusal to the gateway's option, where 0
// means the default and a negative value never refuses.
func refusal(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// serveKeys reads the client keys from the file and from
// RATEKEEPER_GATEWAY_KEYS; nil when there are none.
func serveKeys(file string) (*gateway.Keys, error) {
	var keys *gateway.Keys
	if file != "" {
		k, err := gateway.LoadKeys(file)
		if err != nil {
			return nil, err
		}
		keys = k
	}
	if v, ok := os.LookupEnv(gateway.KeysEnv); ok && strings.TrimSpace(v) != "" {
		k, err := gateway.ParseKeysEnv(gateway.KeysEnv, v)
		if err != nil {
			return nil, err
		}
		if keys, err = keys.Merge(k); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// parseSize reads a size such as 10MiB, 512KB or 1048576.
func parseSize(flag, v string, least uint64) (int64, error) {
	n, err := humanize.ParseBytes(v)
	if err != nil || n < least || n > 1<<40 {
		return 0, fmt.Errorf("%s %q: want a size such as 10MiB, 512KB or 1048576", flag, v)
	}
	return int64(n), nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
