package sim

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// QuickOptions are the knobs of a config made from a few command-line
// flags instead of a file.
type QuickOptions struct {
	// Dialects are the APIs to serve: one is mounted at Prefix (default
	// "/"), several each at "/" + its dialect name as written.
	Dialects []string
	Prefix   string
	// Tokens are given to every API (see ParseTokens).
	Tokens          []TokenConfig
	Limit           int64
	Window          time.Duration
	WindowMode      string
	ExhaustedStatus int
	Seed            int64
	Skew, Latency   time.Duration
	// Secondary nil keeps each provider's defaults.
	Secondary *SecondaryConfig
	Faults    FaultConfig
	// EndpointLimits are given to every API (see ParseEndpointLimit).
	EndpointLimits []EndpointLimitConfig
	// Resources limit other resources by name; each API takes the ones
	// its dialect has.
	Resources map[string]ResourceConfig
	// OutputRatio is given to every API (see APIConfig.OutputRatio).
	OutputRatio float64
}

// QuickConfig builds and validates the config QuickOptions describe.
func QuickConfig(o QuickOptions) (Config, error) {
	cfg := Config{Seed: o.Seed}
	if len(o.Dialects) == 0 {
		return Config{}, fmt.Errorf("sim config: dialect: none given (want github, gitlab, huggingface, gitea, openai or anthropic)")
	}
	if o.Prefix != "" && len(o.Dialects) > 1 {
		return Config{}, fmt.Errorf("sim config: prefix: %q cannot mount %d APIs (each is mounted at /<dialect>; give one dialect or no prefix)", o.Prefix, len(o.Dialects))
	}
	for _, d := range o.Dialects {
		d = strings.ToLower(strings.TrimSpace(d))
		ac := APIConfig{
			Dialect: d, Prefix: o.Prefix, Tokens: append([]TokenConfig(nil), o.Tokens...),
			Limit: o.Limit, Window: o.Window, WindowMode: o.WindowMode, ExhaustedStatus: o.ExhaustedStatus,
			Skew: o.Skew, Latency: o.Latency, Faults: o.Faults,
			EndpointLimits: append([]EndpointLimitConfig(nil), o.EndpointLimits...),
			OutputRatio:    o.OutputRatio,
		}
		if c, ok := canonicalDialect(d); ok {
			sp := dialectSpec(c)
			for name, r := range o.Resources {
				if sp.resourceIndex(name) > 0 {
					if ac.Resources == nil {
						ac.Resources = map[string]ResourceConfig{}
					}
					ac.Resources[name] = r
				}
			}
		}
		if o.Secondary != nil {
			sc := *o.Secondary
			ac.Secondary = &sc
		}
		cfg.APIs = append(cfg.APIs, ac)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("sim config: %w", err)
	}
	return cfg, nil
}

// ParseEndpointLimit reads an endpoint limit as the command line gives
// it: "[METHOD ]PATH=LIMIT/WINDOW" and optional ",KEY=VALUE" settings
// refusal (headers, retry-after, bare, plain), name, mode (fixed,
// rolling) and anonymous (a count), e.g.
// "GET /api/v4/users/*=40/60s,refusal=bare,name=throttle_users_api".
// The result is checked when the config is validated.
func ParseEndpointLimit(spec string) (EndpointLimitConfig, error) {
	const want = `want "[METHOD ]PATH=LIMIT/WINDOW[,refusal=KIND][,name=NAME][,mode=fixed|rolling][,anonymous=N]", e.g. "GET /api/v4/users/*=40/60s"`
	head, rest, _ := strings.Cut(spec, ",")
	i := strings.LastIndexByte(head, '=')
	if i < 0 {
		return EndpointLimitConfig{}, fmt.Errorf("endpoint-limit %q: no =LIMIT/WINDOW (%s)", spec, want)
	}
	l := EndpointLimitConfig{Pattern: strings.TrimSpace(head[:i])}
	n, w, ok := strings.Cut(head[i+1:], "/")
	limit, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
	if !ok || err != nil {
		return EndpointLimitConfig{}, fmt.Errorf("endpoint-limit %q: %q is not LIMIT/WINDOW (%s)", spec, head[i+1:], want)
	}
	window, err := time.ParseDuration(strings.TrimSpace(w))
	if err != nil {
		return EndpointLimitConfig{}, fmt.Errorf("endpoint-limit %q: window %q is not a duration like \"60s\" (%s)", spec, w, want)
	}
	l.Limit, l.Window = limit, window
	if rest == "" {
		return l, nil
	}
	for kv := range strings.SplitSeq(rest, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch strings.TrimSpace(k) {
		case "refusal":
			l.Refusal = strings.TrimSpace(v)
		case "name":
			l.Name = strings.TrimSpace(v)
		case "mode":
			l.WindowMode = strings.TrimSpace(v)
		case "anonymous":
			if l.AnonymousLimit, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil {
				return EndpointLimitConfig{}, fmt.Errorf("endpoint-limit %q: anonymous=%q is not a count", spec, v)
			}
		default:
			return EndpointLimitConfig{}, fmt.Errorf("endpoint-limit %q: unknown setting %q (%s)", spec, kv, want)
		}
	}
	return l, nil
}

// ListenAllowed reports why the simulator should not listen on addr
// (host:port): anything but a loopback address (or "localhost") is refused
// unless allowRemote, since a simulator has no business on a network.
func ListenAllowed(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %v (want host:port, e.g. 127.0.0.1:8080)", addr, err)
	}
	if allowRemote {
		return nil
	}
	if host == "" {
		return fmt.Errorf("listen address %q listens on every interface; use 127.0.0.1:PORT, or --allow-remote to mean it", addr)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("listen address %q is not a loopback address; use 127.0.0.1 or [::1], or --allow-remote to mean it", addr)
	}
	return nil
}
