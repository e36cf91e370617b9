package sim

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Dialect names accepted in APIConfig.Dialect. "hf" is an alias of
// huggingface; "forgejo" and "codeberg" are aliases of gitea (they speak the
// same API).
const (
	DialectGitHub      = "github"
	DialectGitLab      = "gitlab"
	DialectHuggingFace = "huggingface"
	DialectGitea       = "gitea"
	// DialectOpenAI and DialectAnthropic are language-model APIs that
	// charge tokens as well as requests, from buckets that refill
	// continuously (see WindowContinuous).
	DialectOpenAI    = "openai"
	DialectAnthropic = "anthropic"
)

// Window modes accepted in APIConfig.WindowMode and ResourceConfig.WindowMode.
const (
	// WindowRolling starts a window at the first request after the previous
	// window ended, as GitHub does: the reset is that request's second plus
	// the window.
	WindowRolling = "rolling"
	// WindowFixed aligns windows on multiples of the window length since the
	// Unix epoch (of the server's possibly skewed clock), as Hugging Face's
	// 5-minute windows and GitLab's Rack::Attack periods are.
	WindowFixed = "fixed"
	// WindowContinuous is a token bucket: it refills limit/window every
	// instant, as the language-model APIs' buckets do. It is the only
	// mode of the openai and anthropic dialects, and theirs alone.
	WindowContinuous = "continuous"
)

// Config describes one simulator: one or more simulated APIs, each mounted at
// its own path prefix. The zero value of every optional field means "what the
// real provider does" (see the package documentation for the defaults).
//
// A Config can be written in Go, or loaded from a TOML or JSON file with
// LoadConfig; the file keys are the snake_case names in the struct tags.
type Config struct {
	// Seed makes fault injection reproducible: the same seed and the same
	// sequence of requests to an API give the same faults.
	Seed int64 `toml:"seed" json:"seed"`
	// APIs are the simulated APIs. At least one is required.
	APIs []APIConfig `toml:"apis" json:"apis"`
}

// APIConfig is one simulated API.
type APIConfig struct {
	// Name labels the API in stats and in the command's output. Default: the
	// dialect as written. Names must be unique.
	Name string `toml:"name" json:"name"`
	// Dialect is github, gitlab, huggingface (or hf), gitea (or forgejo,
	// codeberg), openai or anthropic. Required.
	Dialect string `toml:"dialect" json:"dialect"`
	// Prefix is the path the API is mounted at, e.g. "/github". Default: "/"
	// when the config has a single API, "/"+Name otherwise.
	Prefix string `toml:"prefix" json:"prefix"`
	// Tokens are the credentials the API accepts. Any other token gets 401.
	Tokens []TokenConfig `toml:"tokens" json:"tokens"`
	// RequireAuth refuses requests without a token with 401 instead of
	// serving them from the client IP's anonymous bucket.
	RequireAuth bool `toml:"require_auth" json:"require_auth"`

	// Limit is the primary limit per owner and window of the API's main
	// resource (GitHub core, GitLab api, Hugging Face api, Gitea api).
	// 0 means the provider's default; for gitea, whose servers send no
	// rate limit by default, 0 means unlimited.
	Limit int64 `toml:"limit" json:"limit"`
	// Window is the length of the main resource's window (whole seconds).
	Window time.Duration `toml:"window" json:"window"`
	// WindowMode is "rolling" or "fixed" (see WindowRolling, WindowFixed).
	WindowMode string `toml:"window_mode" json:"window_mode"`
	// AnonymousLimit is the main resource's limit per client IP for
	// requests without a token.
	AnonymousLimit int64 `toml:"anonymous_limit" json:"anonymous_limit"`
	// Resources overrides the other resources of the dialect by name:
	// GitHub search, code_search, graphql; Hugging Face resolvers, pages;
	// OpenAI tokens; Anthropic input_tokens, output_tokens. On openai and
	// anthropic, Window scales every resource whose own window is unset,
	// so one setting turns their minutes into seconds.
	Resources map[string]ResourceConfig `toml:"resources" json:"resources"`
	// ExhaustedStatus is the status of a request refused because its bucket
	// is empty: 403 or 429. Default: 403 for GitHub, 429 for the others.
	ExhaustedStatus int `toml:"exhausted_status" json:"exhausted_status"`
	// Secondary limits, per owner. Nil means the provider's documented
	// defaults (GitHub: 100 concurrent requests, 900 points per minute;
	// none elsewhere). A non-nil value is used as given: zero fields are off.
	Secondary *SecondaryConfig `toml:"secondary" json:"secondary"`
	// EndpointLimits are limits on some endpoints that send no header
	// while they are not exceeded (GitLab's Users, Projects and Groups
	// API limits, issue and note creation, raw endpoints; GitHub's
	// unpublished limits; a custom host's). See EndpointLimitConfig and
	// GitLabUsersAPILimits.
	EndpointLimits []EndpointLimitConfig `toml:"endpoint_limits" json:"endpoint_limits"`
	// FreeNotModified makes a 304 answer to a conditional request cost no
	// quota. Default: true for GitHub (documented), false elsewhere.
	FreeNotModified *bool `toml:"free_not_modified" json:"free_not_modified"`
	// RateLimitHeaders makes responses carry the dialect's rate-limit
	// headers. Default: true, except gitea (Gitea and Forgejo send none; when
	// set, the gitea dialect sends X-RateLimit-Limit, -Remaining and -Reset).
	RateLimitHeaders *bool `toml:"rate_limit_headers" json:"rate_limit_headers"`

	// PollInterval is the X-Poll-Interval sent on GitHub events endpoints
	// (whole seconds). Default 60s.
	PollInterval time.Duration `toml:"poll_interval" json:"poll_interval"`
	// EventsEvery makes events endpoints change on a schedule: a new event
	// appears every EventsEvery. 0: events change only on writes and touches.
	EventsEvery time.Duration `toml:"events_every" json:"events_every"`

	// Skew is added to the real clock to get the server's clock: the Date
	// header and every reset time are computed from it.
	Skew time.Duration `toml:"skew" json:"skew"`
	// Latency delays every response by this much.
	Latency time.Duration `toml:"latency" json:"latency"`
	// Faults injects seeded failures.
	Faults FaultConfig `toml:"faults" json:"faults"`

	// OutputRatio is how long a language-model answer is (openai and
	// anthropic), as a mean fraction of the request's max_tokens: each
	// answer draws between half and one and a half times it, at most
	// max_tokens. Default 0.25.
	OutputRatio float64 `toml:"output_ratio" json:"output_ratio"`
	// Apps are GitHub Apps installed on accounts of this API (github
	// dialect only): see AppConfig.
	Apps []AppConfig `toml:"apps" json:"apps"`
}

// TokenConfig is one credential.
type TokenConfig struct {
	// Token is the secret text a client sends. Required; never printed.
	Token string `toml:"token" json:"token"`
	// Owner is the user the token belongs to. Tokens with the same owner
	// share that owner's buckets, as all personal tokens of one GitHub user
	// do. Default: "user<N>" with N the token's position (1-based), so each
	// token is its own owner.
	Owner string `toml:"owner" json:"owner"`
	// UserID is the owner's numeric ID (GitHub's "user ID N" message, the id
	// fields of /user). Default: derived from Owner.
	UserID int64 `toml:"user_id" json:"user_id"`
	// Limit overrides the API's main Limit for this token's owner (e.g.
	// 15,000 for a GitHub Enterprise Cloud app). Tokens of one owner must
	// agree.
	Limit int64 `toml:"limit" json:"limit"`
	// Accounts, when set, are the only accounts (GitHub organisations or
	// users, GitLab namespaces) whose repositories the token sees, as a
	// fine-grained token limited to one organisation: any other
	// repository is a 404, charged.
	Accounts []string `toml:"accounts" json:"accounts"`
}

// ResourceConfig overrides the limits of one non-main resource.
type ResourceConfig struct {
	Limit          int64         `toml:"limit" json:"limit"`
	Window         time.Duration `toml:"window" json:"window"`
	WindowMode     string        `toml:"window_mode" json:"window_mode"`
	AnonymousLimit int64         `toml:"anonymous_limit" json:"anonymous_limit"`
}

// SecondaryConfig are GitHub-style secondary limits, kept per owner across
// all of the owner's resources. A zero field is off.
type SecondaryConfig struct {
	// MaxConcurrent is the most requests of one owner in flight at once.
	MaxConcurrent int `toml:"max_concurrent" json:"max_concurrent"`
	// PointsPerMinute caps the points an owner spends in any 60 seconds:
	// GET, HEAD and OPTIONS cost 1, other methods 5 (GitHub's table);
	// a GraphQL query 1 and a mutation 5.
	PointsPerMinute int `toml:"points_per_minute" json:"points_per_minute"`
	// GraphQLPointsPerMinute is the GraphQL endpoint's own budget of
	// those points (GitHub: 2,000, apart from REST's 900); 0 counts
	// GraphQL requests in PointsPerMinute.
	GraphQLPointsPerMinute int `toml:"graphql_points_per_minute" json:"graphql_points_per_minute"`
	// WriteSpacing is the least time between two writes of one owner.
	WriteSpacing time.Duration `toml:"write_spacing" json:"write_spacing"`
	// Penalty is how long an owner is refused after tripping a secondary
	// limit. Default 60s.
	Penalty time.Duration `toml:"penalty" json:"penalty"`
	// RetryAfter sends retry-after (the seconds left in the penalty) with
	// the refusal. GitHub sometimes does and sometimes does not.
	RetryAfter bool `toml:"retry_after" json:"retry_after"`
	// Status is 403 or 429. Default 403.
	Status int `toml:"status" json:"status"`
}

// FaultConfig injects failures, drawn for each request from a generator
// seeded by Config.Seed, so a given seed and request sequence always fail the
// same requests. Rates are fractions of requests; their sum must not exceed 1.
// Faults happen after authentication and before any quota is spent.
type FaultConfig struct {
	// ErrorRate answers 500, 502 or 504 without Retry-After.
	ErrorRate float64 `toml:"error_rate" json:"error_rate"`
	// UnavailableRate answers 503 with Retry-After.
	UnavailableRate float64 `toml:"unavailable_rate" json:"unavailable_rate"`
	// UnavailableRetryAfter is the Retry-After of those 503s. Default 1s.
	UnavailableRetryAfter time.Duration `toml:"unavailable_retry_after" json:"unavailable_retry_after"`
	// DropRate closes the connection without an answer.
	DropRate float64 `toml:"drop_rate" json:"drop_rate"`
	// SlowRate delays the answer by SlowDelay, then answers normally.
	SlowRate float64 `toml:"slow_rate" json:"slow_rate"`
	// SlowDelay is the delay of slow answers. Default 2s.
	SlowDelay time.Duration `toml:"slow_delay" json:"slow_delay"`
	// BareRefusalAt answers the API's request number N (from 1, counted
	// as faults are: after authentication) itself, as a proxy or an abuse
	// filter in front of the API does: BareRefusalStatus with an HTML
	// page and no rate-limit header at all, charging nothing. The
	// refused request's bucket then counts the requests arriving before
	// GitHub's "at least a minute" (GitHubSecondaryWait) on github, or
	// MinRetryWait elsewhere, as early retries. 0: none.
	BareRefusalAt int64 `toml:"bare_refusal_at" json:"bare_refusal_at"`
	// BareRefusalStatus is 429 or 403. Default 429.
	BareRefusalStatus int `toml:"bare_refusal_status" json:"bare_refusal_status"`
	// OverloadRate answers a server that did not process the request:
	// Anthropic's 529 overloaded_error, OpenAI's 503 "overloaded", a 503
	// elsewhere. No quota is spent.
	OverloadRate float64 `toml:"overload_rate" json:"overload_rate"`
}

func (f FaultConfig) any() bool {
	return f.ErrorRate > 0 || f.UnavailableRate > 0 || f.DropRate > 0 || f.SlowRate > 0 || f.BareRefusalAt > 0 || f.OverloadRate > 0
}

// canonicalDialect maps the accepted spellings to a dialect name.
func canonicalDialect(s string) (string, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "github":
		return DialectGitHub, true
	case "gitlab":
		return DialectGitLab, true
	case "huggingface", "hf", "hugging-face", "hugging_face":
		return DialectHuggingFace, true
	case "gitea", "forgejo", "codeberg":
		return DialectGitea, true
	case "openai":
		return DialectOpenAI, true
	case "anthropic":
		return DialectAnthropic, true
	}
	return "", false
}

// fieldErr is a configuration problem at a named field.
func fieldErr(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...))
}

// Validate reports every problem of the configuration, each naming the field
// (with the file's key names, e.g. "apis[1].window") and saying what would be
// right. A nil error means New will accept the config.
func (c Config) Validate() error {
	var errs []error
	if len(c.APIs) == 0 {
		errs = append(errs, errors.New(`apis: no API configured (want at least one, e.g. [[apis]] dialect = "github")`))
	}
	m := mounts{names: map[string]int{}, prefixes: map[string]int{}}
	for i, a := range c.APIs {
		p := fmt.Sprintf("apis[%d]", i)
		d, ok := canonicalDialect(a.Dialect)
		if !ok {
			if a.Dialect == "" {
				errs = append(errs, fieldErr(p+".dialect", "missing (want github, gitlab, huggingface, gitea, openai or anthropic)"))
			} else {
				errs = append(errs, fieldErr(p+".dialect", "unknown dialect %q (want github, gitlab, huggingface, gitea, openai or anthropic)", a.Dialect))
			}
		}
		errs = append(errs, m.add(p, i, a, len(c.APIs))...)
		errs = append(errs, validateLimits(p, a.Limit, a.AnonymousLimit, a.Window, a.WindowMode)...)
		if a.ExhaustedStatus != 0 && a.ExhaustedStatus != 403 && a.ExhaustedStatus != 429 {
			errs = append(errs, fieldErr(p+".exhausted_status", "%d is not a rate-limit status (want 403 or 429)", a.ExhaustedStatus))
		}
		// Resources are named by the dialect: without one they cannot
		// be checked.
		if ok {
			errs = append(errs, validateResources(p, d, a.Resources)...)
		}
		errs = append(errs, validateTokens(p, a.Tokens)...)
		if a.Secondary != nil {
			errs = append(errs, validateSecondary(p+".secondary", *a.Secondary)...)
		}
		errs = append(errs, validateEndpointLimits(p, a.EndpointLimits)...)
		errs = append(errs, validateTimings(p, a)...)
		errs = append(errs, validateFaults(p+".faults", a.Faults)...)
		if a.OutputRatio < 0 || a.OutputRatio > 1 || a.OutputRatio != a.OutputRatio {
			errs = append(errs, fieldErr(p+".output_ratio", "%v is not a fraction between 0 and 1 (0 means 0.25)", a.OutputRatio))
		}
		errs = append(errs, validateApps(p, d, a.Apps)...)
	}
	return errors.Join(errs...)
}

// mounts are the names and prefixes of the APIs checked so far, each with
// the index of the API that has it.
type mounts struct {
	names, prefixes map[string]int
}

// add checks that API i's name and prefix are not taken by an earlier
// one, then records them.
func (m mounts) add(p string, i int, a APIConfig, apis int) []error {
	var errs []error
	if name := apiName(a); name != "" {
		if j, dup := m.names[name]; dup {
			errs = append(errs, fieldErr(p+".name", "%q is also the name of apis[%d] (names must be unique)", name, j))
		}
		m.names[name] = i
	}
	prefix, err := effectivePrefix(a, apis)
	if err != nil {
		return append(errs, fieldErr(p+".prefix", "%v", err))
	}
	if j, dup := m.prefixes[prefix]; dup {
		errs = append(errs, fieldErr(p+".prefix", "%q is also the prefix of apis[%d] (each API needs its own; set prefix)", displayPrefix(prefix), j))
	}
	m.prefixes[prefix] = i
	return errs
}

// validateResources checks the overrides of dialect d's other resources,
// in name order.
func validateResources(p, d string, resources map[string]ResourceConfig) []error {
	var errs []error
	spec := dialectSpec(d)
	for _, k := range sortedKeys(resources) {
		rp := p + ".resources." + k
		idx := spec.resourceIndex(k)
		switch {
		case idx < 0:
			errs = append(errs, fieldErr(rp, "unknown resource for %s (want %s)", d, strings.Join(spec.otherResourceNames(), ", ")))
		case idx == 0:
			errs = append(errs, fieldErr(rp, "%s is the main resource: set it with limit, window and window_mode of the API", k))
		}
		r := resources[k]
		errs = append(errs, validateLimits(rp, r.Limit, r.AnonymousLimit, r.Window, r.WindowMode)...)
	}
	return errs
}

// validateSecondary checks the secondary limits at path sp.
func validateSecondary(sp string, s SecondaryConfig) []error {
	var errs []error
	if s.MaxConcurrent < 0 {
		errs = append(errs, fieldErr(sp+".max_concurrent", "%d is negative (want 0 for no limit, or a positive count)", s.MaxConcurrent))
	}
	if s.PointsPerMinute < 0 {
		errs = append(errs, fieldErr(sp+".points_per_minute", "%d is negative (want 0 for no limit, or a positive count)", s.PointsPerMinute))
	}
	if s.GraphQLPointsPerMinute < 0 {
		errs = append(errs, fieldErr(sp+".graphql_points_per_minute", "%d is negative (want 0 to count GraphQL in points_per_minute, or a positive count)", s.GraphQLPointsPerMinute))
	}
	if s.WriteSpacing < 0 {
		errs = append(errs, fieldErr(sp+".write_spacing", "%v is negative (want 0 for none, or a duration like \"1s\")", s.WriteSpacing))
	}
	if s.Penalty < 0 {
		errs = append(errs, fieldErr(sp+".penalty", "%v is negative (want a duration like \"60s\")", s.Penalty))
	}
	if s.Status != 0 && s.Status != 403 && s.Status != 429 {
		errs = append(errs, fieldErr(sp+".status", "%d is not a rate-limit status (want 403 or 429)", s.Status))
	}
	return errs
}

// validateTimings checks the API's poll interval, event interval and
// latency.
func validateTimings(p string, a APIConfig) []error {
	var errs []error
	if a.PollInterval < 0 || a.PollInterval%time.Second != 0 {
		errs = append(errs, fieldErr(p+".poll_interval", "%v is not a whole, non-negative number of seconds (want e.g. \"60s\")", a.PollInterval))
	}
	if a.EventsEvery < 0 {
		errs = append(errs, fieldErr(p+".events_every", "%v is negative (want 0 for never, or a duration like \"30s\")", a.EventsEvery))
	}
	if a.Latency < 0 {
		errs = append(errs, fieldErr(p+".latency", "%v is negative (want 0 or a duration like \"50ms\")", a.Latency))
	}
	return errs
}

func validateLimits(p string, limit, anon int64, window time.Duration, mode string) []error {
	var errs []error
	if limit < 0 {
		errs = append(errs, fieldErr(p+".limit", "%d is negative (want 0 for the provider's default, or a positive count)", limit))
	}
	if anon < 0 {
		errs = append(errs, fieldErr(p+".anonymous_limit", "%d is negative (want 0 for the provider's default, or a positive count)", anon))
	}
	if window < 0 {
		errs = append(errs, fieldErr(p+".window", "%v is negative (want a duration like \"1h\" or \"5m\")", window))
	} else if window > 0 && (window < time.Second || window%time.Second != 0) {
		errs = append(errs, fieldErr(p+".window", "%v is not a whole number of seconds (want e.g. \"1h\", \"5m\", \"90s\")", window))
	}
	switch strings.ToLower(mode) {
	case "", WindowRolling, WindowFixed:
	default:
		errs = append(errs, fieldErr(p+".window_mode", "unknown mode %q (want rolling or fixed)", mode))
	}
	return errs
}

func validateTokens(p string, toks []TokenConfig) []error {
	var errs []error
	seen := map[string]int{}
	ownerLimit := map[string]int64{}
	ownerLimitAt := map[string]int{}
	for i, t := range toks {
		tp := fmt.Sprintf("%s.tokens[%d]", p, i)
		switch {
		case t.Token == "":
			errs = append(errs, fieldErr(tp+".token", "empty (want the secret text clients send)"))
		case strings.ContainsFunc(t.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }):
			// The text itself is never put in an error.
			errs = append(errs, fieldErr(tp+".token", "contains spaces or control characters (a header value cannot carry it)"))
		default:
			if j, dup := seen[t.Token]; dup {
				errs = append(errs, fieldErr(tp+".token", "same text as tokens[%d] (each token must be distinct; give both the same owner to share a bucket)", j))
			}
			seen[t.Token] = i
		}
		if t.Limit < 0 {
			errs = append(errs, fieldErr(tp+".limit", "%d is negative (want 0 for the API's limit, or a positive count)", t.Limit))
		}
		if t.UserID < 0 {
			errs = append(errs, fieldErr(tp+".user_id", "%d is negative (want a positive ID, or 0 to derive one)", t.UserID))
		}
		owner := tokenOwner(t, i)
		if t.Limit > 0 {
			if prev, ok := ownerLimit[owner]; ok && prev != t.Limit {
				errs = append(errs, fieldErr(tp+".limit", "%d differs from tokens[%d].limit %d of the same owner %q (an owner has one bucket)", t.Limit, ownerLimitAt[owner], prev, owner))
			} else if !ok {
				ownerLimit[owner] = t.Limit
				ownerLimitAt[owner] = i
			}
		}
	}
	return errs
}

func validateFaults(p string, f FaultConfig) []error {
	var errs []error
	rates := []struct {
		name string
		v    float64
	}{{"error_rate", f.ErrorRate}, {"unavailable_rate", f.UnavailableRate}, {"drop_rate", f.DropRate}, {"slow_rate", f.SlowRate}, {"overload_rate", f.OverloadRate}}
	sum := 0.0
	for _, r := range rates {
		if r.v < 0 || r.v > 1 || r.v != r.v {
			errs = append(errs, fieldErr(p+"."+r.name, "%v is not a fraction between 0 and 1", r.v))
			continue
		}
		sum += r.v
	}
	if sum > 1+1e-9 {
		errs = append(errs, fieldErr(p, "the rates add up to %.3g (want at most 1)", sum))
	}
	if f.UnavailableRetryAfter < 0 || f.UnavailableRetryAfter%time.Second != 0 {
		errs = append(errs, fieldErr(p+".unavailable_retry_after", "%v is not a whole, non-negative number of seconds (want e.g. \"2s\")", f.UnavailableRetryAfter))
	}
	if f.SlowDelay < 0 {
		errs = append(errs, fieldErr(p+".slow_delay", "%v is negative (want a duration like \"2s\")", f.SlowDelay))
	}
	if f.BareRefusalAt < 0 {
		errs = append(errs, fieldErr(p+".bare_refusal_at", "%d is negative (want a request number from 1, or 0 for none)", f.BareRefusalAt))
	}
	if s := f.BareRefusalStatus; s != 0 && s != 403 && s != 429 {
		errs = append(errs, fieldErr(p+".bare_refusal_status", "%d is not a refusal status (want 403 or 429)", s))
	}
	return errs
}

// apiName is the API's name with its default applied.
func apiName(a APIConfig) string {
	if a.Name != "" {
		return a.Name
	}
	return strings.ToLower(strings.TrimSpace(a.Dialect))
}

// tokenOwner is the token's owner with its default applied.
func tokenOwner(t TokenConfig, i int) string {
	if t.Owner != "" {
		return t.Owner
	}
	return fmt.Sprintf("user%d", i+1)
}

// effectivePrefix is the API's mount prefix with its default applied, without
// a trailing slash ("" for the root).
func effectivePrefix(a APIConfig, apis int) (string, error) {
	if a.Prefix != "" {
		return normalizePrefix(a.Prefix)
	}
	if apis == 1 {
		return "", nil
	}
	return normalizePrefix("/" + apiName(a))
}

func displayPrefix(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// normalizePrefix returns the prefix without a trailing slash ("" for the
// root), or why it is not usable.
func normalizePrefix(p string) (string, error) {
	if p == "" || p == "/" {
		return "", nil
	}
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%q does not start with / (want e.g. \"/github\")", p)
	}
	if strings.ContainsAny(p, "?#% \t") {
		return "", fmt.Errorf("%q contains characters a path prefix cannot have (want e.g. \"/github\")", p)
	}
	p = strings.TrimRight(p, "/")
	if strings.Contains(p, "//") {
		return "", fmt.Errorf("%q has an empty path segment", p)
	}
	if p == "/_stats" || p == "/_sim" || strings.HasPrefix(p, "/_sim/") || strings.HasPrefix(p, "/_stats/") {
		return "", fmt.Errorf("%q is reserved for the simulator's own endpoints", p)
	}
	return p, nil
}
