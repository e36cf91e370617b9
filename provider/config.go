package provider

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Pacing policies a provider may name. Package provider validates the name;
// the pacing code gives it meaning.
const (
	PolicySpread   = "spread"
	PolicyAdaptive = "adaptive"
	PolicyGreedy   = "greedy"
)

// ParsePolicy checks a policy name ("" means the client's default).
func ParsePolicy(s string) (string, error) {
	switch p := strings.ToLower(strings.TrimSpace(s)); p {
	case "", PolicySpread, PolicyAdaptive, PolicyGreedy:
		return p, nil
	}
	return "", fmt.Errorf("unknown policy %q; expected spread, adaptive or greedy", s)
}

// Config is a parsed configuration file. It describes providers to add to or
// refine in a [Registry] with [Registry.ApplyConfig].
//
// The file is TOML with one table per provider:
//
//	[providers.github]                 # refine a built-in provider
//	token_env = ["GITHUB_TOKEN"]       # env vars holding comma-separated tokens
//	max_concurrency = 10               # requests in flight per owner (0: no cap)
//	write_spacing = "2s"               # least time between two writes
//	policy = "adaptive"                # spread, adaptive or greedy
//	velocity = 1.5                     # spread: how much faster than budget ÷ time to reset
//	min_interval = "100ms"             # least time between two requests of a bucket (any policy)
//	max_interval = "1m"                # most time spread/adaptive put between two requests
//	burst = 10                         # requests that may go back to back before the spacing applies
//	reserve = 100                      # requests kept back per bucket, or "10%" of each bucket's limit
//	max_wait = "10m"                   # longest single wait for quota
//	max_pause = "1h"                   # longest pause a Retry-After or a secondary penalty can impose
//	secondary_wait = "60s"             # first pause after a secondary refusal without Retry-After
//	default_limit = 60                 # assumed when the server sends no headers ...
//	default_window = "1m"              # ... per this window
//
//	[providers.gitlab.limits]          # limits the server enforces without announcing them
//	"GET /api/v4/users/*" = "300/10m"  # requests per window for every matching request
//	"POST /api/v4/projects/*/issues" = "200/1m"
//
//	[providers.ghe]                    # a new provider
//	kind = "github"                    # github, gitlab, huggingface/hf, gitea/codeberg/forgejo, generic
//	base_url = "https://ghe.example.com/api/v3"
//	web_url = "https://ghe.example.com" # where repository pages live (derived when omitted)
//
//	[providers.ghe.app]                # GitHub App installations as credentials
//	app_id = 12345
//	private_key_file = "ghe-app.pem"   # relative to the config file's directory
//	installation_ids = [111, 222]
//
//	[providers.corp]
//	base_url = "https://api.corp.example"
//	auth_header = "X-Api-Key"          # header carrying the token
//	auth_prefix = ""                   # text before the token ("Bearer", "token" or none)
//
// Durations are strings such as "500ms", "2s" or "10m". A GitLab OAuth token
// needs auth_header = "Authorization" and auth_prefix = "Bearer".
type Config struct {
	// AutoHosts is the top-level auto_hosts key, nil when absent: false
	// turns off what a host no provider owns gets automatically (a token
	// from a variable named after it, 60 requests a minute when it states
	// no limit).
	AutoHosts *bool

	file      string
	dir       string
	lines     map[string]int
	providers []providerSettings // in file order
}

// Names returns the provider names the file configures, in file order.
func (c *Config) Names() []string {
	out := make([]string, len(c.providers))
	for i, s := range c.providers {
		out[i] = s.name
	}
	return out
}

type providerSettings struct {
	name    string
	at      func(key ...string) string // "file:line: providers.NAME.key" for messages
	kind    *Kind
	baseURL *string
	webURL  *string

	tokenEnv    []string
	tokenEnvSet bool

	authHeader, authPrefix *string

	defaultLimit   *int
	defaultWindow  *time.Duration
	policy         *string
	reserve        *int
	reservePercent *float64
	maxConcurrency *int
	writeSpacing   *time.Duration
	maxWait        *time.Duration
	maxPause       *time.Duration
	secondaryWait  *time.Duration
	velocity       *float64
	minInterval    *time.Duration
	maxInterval    *time.Duration
	burst          *int

	app *AppConfig

	limits    []EndpointLimit // [providers.NAME.limits], in file order
	limitsSet bool
}

// LoadConfig reads and parses the TOML configuration file at path.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read config file: %w", err)
	}
	return ParseConfig(data, path)
}

// ParseConfig parses a TOML configuration; file names it in error messages
// and anchors relative private_key_file paths. Every error names the file,
// the line and the key, and says what was expected; unknown keys are errors,
// since a misspelt key silently ignored is a setting silently lost. The
// error holds every problem found, one a line (errors.Join), not only the
// first: a syntax error stops the reading, any other problem does not.
func ParseConfig(data []byte, file string) (*Config, error) {
	c, problems := parseConfig(data, file)
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return c, nil
}

// parseConfig parses a configuration into the providers whose settings
// are all valid, and every problem found.
func parseConfig(data []byte, file string) (*Config, []error) {
	doc := string(data)
	var raw map[string]any
	if _, err := toml.Decode(doc, &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, []error{fmt.Errorf("%s:%d: %s", file, pe.Position.Line, pe.Message)}
		}
		return nil, []error{fmt.Errorf("%s: %v", file, err)}
	}
	lines := keyLines(doc)
	at := func(key ...string) string {
		path := strings.Join(key, ".")
		for n := len(key); n > 0; n-- {
			if line, ok := lines[strings.Join(key[:n], "\x00")]; ok {
				return fmt.Sprintf("%s:%d: %s", file, line, path)
			}
		}
		return fmt.Sprintf("%s: %s", file, path)
	}
	c := &Config{file: file, dir: filepath.Dir(file), lines: lines}
	var problems []error
	for _, key := range inFileOrder(raw, lines) {
		switch key {
		case "providers":
		case "auto_hosts":
			b, ok := raw[key].(bool)
			if !ok {
				problems = append(problems, fmt.Errorf("%s: expected true or false, got %s", at(key), tomlType(raw[key])))
				continue
			}
			c.AutoHosts = &b
		default:
			problems = append(problems, fmt.Errorf("%s: unknown key; the file has one key, auto_hosts, and one section, [providers.NAME]", at(key)))
		}
	}
	if v, ok := raw["providers"]; ok {
		tables, ok := v.(map[string]any)
		if !ok {
			return c, append(problems, fmt.Errorf("%s: expected tables [providers.NAME], got %s", at("providers"), tomlType(v)))
		}
		for _, name := range inFileOrder(tables, lines, "providers") {
			s, errs := c.parseProvider(name, tables[name], at)
			if len(errs) > 0 {
				problems = append(problems, errs...)
				continue
			}
			c.providers = append(c.providers, s)
		}
	}
	return c, problems
}

// CheckConfig finds every problem of a configuration, as loading it would
// (ParseConfig, then ApplyConfig on the built-in providers), and goes on
// past each: a provider's settings are applied when they parse, so that a
// missing base_url shows beside another provider's misspelt key. It also
// reads each GitHub App's private key file, which loading needs. cfg is
// the configuration when there is no problem; the registry is the
// built-in providers with the file applied.
func CheckConfig(data []byte, file string) (cfg *Config, reg *Registry, problems []error) {
	c, problems := parseConfig(data, file)
	if c == nil {
		return nil, nil, problems
	}
	reg = Defaults()
	problems = append(problems, reg.applyConfig(c)...)
	for _, s := range c.providers {
		if s.app == nil {
			continue
		}
		if _, err := os.ReadFile(s.app.PrivateKeyFile); err != nil {
			problems = append(problems, fmt.Errorf("%s: cannot read the App's private key: %v", s.at("app", "private_key_file"), err))
		}
	}
	if len(problems) > 0 {
		return nil, reg, problems
	}
	return c, reg, nil
}

// inFileOrder returns the keys of table t (found at path parent) in the order
// the file defines them, so errors and settings follow the file.
func inFileOrder(t map[string]any, lines map[string]int, parent ...string) []string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	line := func(k string) int { return lines[strings.Join(append(slices.Clone(parent), k), "\x00")] }
	slices.SortFunc(keys, func(a, b string) int {
		if d := line(a) - line(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return keys
}

// parseProvider reads the table of provider name, and returns every
// problem of it.
func (c *Config) parseProvider(name string, v any, at func(...string) string) (providerSettings, []error) {
	s := providerSettings{name: CanonicalName(name)}
	s.at = func(key ...string) string { return at(append([]string{"providers", name}, key...)...) }
	if !validName(s.name) {
		return s, []error{fmt.Errorf("%s: provider name may contain only letters, digits, '-', '_' and '.', starting with a letter or digit", s.at())}
	}
	t, ok := v.(map[string]any)
	if !ok {
		return s, []error{fmt.Errorf("%s: expected a table of settings, got %s", s.at(), tomlType(v))}
	}
	var problems []error
	for _, k := range inFileOrder(t, c.lines, "providers", name) {
		val := t[k]
		known, err := s.parseText(k, val)
		if !known {
			known, err = s.parseNumber(k, val)
		}
		switch {
		case known:
		case k == "app":
			var errs []error
			if s.app, errs = c.parseApp(name, val, s.at); len(errs) > 0 {
				problems = append(problems, errs...) // each names its key
			}
			continue
		case k == "limits":
			var errs []error
			if s.limits, errs = c.parseLimits(name, val, s.at); len(errs) > 0 {
				problems = append(problems, errs...) // each names its key
			}
			s.limitsSet = true
			continue
		default:
			err = errors.New("unknown key; known keys: app, auth_header, auth_prefix, base_url, burst, default_limit, default_window, kind, limits, max_concurrency, max_interval, max_pause, max_wait, min_interval, policy, reserve, secondary_wait, token_env, velocity, web_url, write_spacing")
		}
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %v", s.at(k), err))
		}
	}
	return s, problems
}

// parseText reads key k, when it is one of the settings given as text
// (kind, URLs, token variables, auth, policy), into s; known is false for
// any other key.
func (s *providerSettings) parseText(k string, val any) (known bool, err error) {
	var str string
	switch k {
	case "kind":
		if str, err = asString(val); err == nil {
			var kind Kind
			if kind, err = ParseKind(str); err == nil {
				s.kind = &kind
			}
		}
	case "base_url", "web_url":
		if str, err = asString(val); err == nil {
			if _, err = ParseBaseURL(str); err == nil {
				if k == "base_url" {
					s.baseURL = &str
				} else {
					s.webURL = &str
				}
			}
		}
	case "token_env":
		s.tokenEnv, err = asEnvNames(val)
		s.tokenEnvSet = err == nil
	case "auth_header":
		if str, err = asString(val); err == nil {
			if !isHeaderName(str) {
				err = fmt.Errorf("%q is not a valid HTTP header name; expected e.g. \"Authorization\" or \"PRIVATE-TOKEN\"", str)
			} else {
				s.authHeader = &str
			}
		}
	case "auth_prefix":
		if str, err = asString(val); err == nil {
			if strings.ContainsFunc(str, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
				err = fmt.Errorf("%q must be one word without spaces, such as \"Bearer\" or \"token\", or empty", str)
			} else {
				s.authPrefix = &str
			}
		}
	case "policy":
		if str, err = asString(val); err == nil {
			if str, err = ParsePolicy(str); err == nil {
				s.policy = &str
			}
		}
	default:
		return false, nil
	}
	return true, err
}

// parseNumber reads key k, when it is one of the numeric settings (counts,
// durations, the reserve, the velocity), into s; known is false for any
// other key.
func (s *providerSettings) parseNumber(k string, val any) (known bool, err error) {
	switch k {
	case "default_limit":
		s.defaultLimit, err = asInt(val, 1)
	case "reserve":
		s.reserve, s.reservePercent, err = asReserve(val)
	case "max_concurrency":
		s.maxConcurrency, err = asInt(val, 0)
	case "default_window":
		s.defaultWindow, err = asDuration(val, time.Second)
	case "write_spacing":
		s.writeSpacing, err = asDuration(val, 0)
	case "max_wait":
		s.maxWait, err = asDuration(val, 0)
	case "max_pause":
		s.maxPause, err = asDuration(val, time.Second)
	case "secondary_wait":
		s.secondaryWait, err = asDuration(val, time.Second)
	case "velocity":
		s.velocity, err = asVelocity(val)
	case "min_interval":
		s.minInterval, err = asDuration(val, 0)
	case "max_interval":
		s.maxInterval, err = asDuration(val, 0)
	case "burst":
		s.burst, err = asInt(val, 0)
	default:
		return false, nil
	}
	return true, err
}

// parseLimits reads [providers.NAME.limits]: path patterns, each with a
// count per window, such as "GET /api/v4/users/*" = "300/10m".
func (c *Config) parseLimits(name string, v any, at func(...string) string) ([]EndpointLimit, []error) {
	t, ok := v.(map[string]any)
	if !ok {
		return nil, []error{fmt.Errorf("%s: expected a table of patterns such as \"GET /api/v4/users/*\" = \"300/10m\", got %s", at("limits"), tomlType(v))}
	}
	var out []EndpointLimit
	var problems []error
	for _, k := range inFileOrder(t, c.lines, "providers", name, "limits") {
		rate, err := asString(t[k])
		if err == nil && strings.Contains(k, "**") {
			// The simulator's patterns have **; a user copying one here
			// is told what the client's patterns say instead.
			err = errors.New("** is the simulator's (ratekeeper sim) way to say one or more segments; here * is one segment and a final * the rest of the path")
			if strings.Count(k, "**") == 1 && strings.HasSuffix(k, "/**") {
				err = fmt.Errorf("%v: write %q", err, strings.TrimSuffix(k, "*"))
			}
		}
		if err == nil {
			var l EndpointLimit
			if l, err = ParseEndpointLimit(k, rate); err == nil {
				out = append(out, l)
			}
		}
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %v", at("limits", k), err))
		}
	}
	return out, problems
}

// parseApp reads [providers.NAME.app], and returns every problem of it.
func (c *Config) parseApp(name string, v any, at func(...string) string) (*AppConfig, []error) {
	t, ok := v.(map[string]any)
	if !ok {
		return nil, []error{fmt.Errorf("%s: expected a table with app_id, private_key_file and installation_ids, got %s", at("app"), tomlType(v))}
	}
	app := &AppConfig{}
	var problems []error
	for _, k := range inFileOrder(t, c.lines, "providers", name, "app") {
		if err := app.parseKey(k, t[k], c.dir); err != nil {
			problems = append(problems, fmt.Errorf("%s: %v", at("app", k), err))
		}
	}
	// A key that is present but wrong was named above; these are the
	// keys not given at all.
	if _, given := t["app_id"]; !given {
		problems = append(problems, fmt.Errorf("%s: app_id is missing; it is the numeric id on the App's settings page", at("app")))
	}
	if _, given := t["private_key_file"]; !given {
		problems = append(problems, fmt.Errorf("%s: private_key_file is missing; it is the path of the App's PEM private key", at("app")))
	}
	if len(problems) > 0 {
		return nil, problems
	}
	return app, nil
}

// parseKey reads key k of an app table into app; dir anchors a relative
// private_key_file.
func (app *AppConfig) parseKey(k string, val any, dir string) error {
	switch k {
	case "app_id":
		n, err := asInt64(val, 1)
		if err != nil {
			return err
		}
		app.AppID = n
	case "private_key_file":
		str, err := asString(val)
		if err == nil && str == "" {
			err = errors.New("is empty; expected the path of the App's PEM private key")
		}
		if err != nil {
			return err
		}
		if !filepath.IsAbs(str) {
			str = filepath.Join(dir, str)
		}
		app.PrivateKeyFile = str
	case "installation_ids":
		list, ok := val.([]any)
		if !ok {
			return fmt.Errorf("expected an array of installation ids such as [111, 222], got %s", tomlType(val))
		}
		for i, e := range list {
			n, err := asInt64(e, 1)
			if err != nil {
				return fmt.Errorf("entry #%d: %v", i+1, err)
			}
			if slices.Contains(app.InstallationIDs, n) {
				return fmt.Errorf("installation %d is listed twice", n)
			}
			app.InstallationIDs = append(app.InstallationIDs, n)
		}
	default:
		return errors.New("unknown key; known keys: app_id, installation_ids, private_key_file")
	}
	return nil
}

// ApplyConfig adds the file's providers to the registry and refines the ones
// it already has. A provider that is not in the registry needs a base_url; a
// kind that differs from an existing provider's restarts it from the new
// kind's defaults. Nothing changes when an error is returned; the error
// holds every provider's problem, one a line.
func (r *Registry) ApplyConfig(c *Config) error {
	next := &Registry{providers: slices.Clone(r.providers)}
	if problems := next.applyConfig(c); len(problems) > 0 {
		return errors.Join(problems...)
	}
	r.providers = next.providers
	return nil
}

// applyConfig applies each provider of c to r, going on past a provider
// that fails, and returns every failure.
func (r *Registry) applyConfig(c *Config) []error {
	var problems []error
	for _, s := range c.providers {
		p, err := s.build(r)
		if err == nil {
			if err = r.Add(p); err != nil {
				err = fmt.Errorf("%s: %v", s.at(), err)
			}
		}
		if err != nil {
			problems = append(problems, err)
		}
	}
	return problems
}

func (s *providerSettings) build(r *Registry) (*Provider, error) {
	p, err := s.base(r)
	if err != nil {
		return nil, err
	}
	if s.webURL != nil {
		if err := p.SetWebURL(*s.webURL); err != nil {
			return nil, fmt.Errorf("%s: %v", s.at("web_url"), err)
		}
	}
	if s.tokenEnvSet {
		p.TokenEnv = s.tokenEnv
	}
	if s.authHeader != nil {
		p.Auth.Header = *s.authHeader
	}
	if s.authPrefix != nil {
		p.Auth.Prefix = *s.authPrefix
	}
	if err := s.applyLimits(p); err != nil {
		return nil, err
	}
	if s.limitsSet {
		p.EndpointLimits = s.limits
	}
	if s.app != nil {
		if !p.SupportsApps() {
			return nil, fmt.Errorf("%s: GitHub App installations need a provider of kind github, and %s is %s", s.at("app"), p.Name, p.Kind)
		}
		app := *s.app
		p.App = &app
	}
	return p, nil
}

// base is the provider the settings start from: a copy of the one r
// already holds under the name (moved to base_url when given), or a new
// one of the kind when there is none or the kind changes.
func (s *providerSettings) base(r *Registry) (*Provider, error) {
	old := r.Lookup(s.name)
	kind := KindOf(s.name)
	if old != nil {
		kind = old.Kind
	}
	if s.kind != nil {
		kind = *s.kind
	}
	switch {
	case old == nil && s.baseURL == nil:
		return nil, fmt.Errorf("%s: base_url is required for a provider that is not built in or already configured (known: %s)",
			s.at(), strings.Join(r.Names(), ", "))
	case old == nil || old.Kind != kind:
		base := ""
		if s.baseURL != nil {
			base = *s.baseURL
		} else {
			base = old.base.String()
		}
		p, err := New(s.name, kind, base)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", s.at("base_url"), err)
		}
		return p, nil
	}
	cp := *old
	p := &cp
	p.TokenEnv = slices.Clone(old.TokenEnv)
	if s.baseURL != nil {
		if err := p.SetBaseURL(*s.baseURL); err != nil {
			return nil, fmt.Errorf("%s: %v", s.at("base_url"), err)
		}
		if slices.Equal(old.TokenEnv, old.defaultTokenEnv()) {
			p.TokenEnv = p.defaultTokenEnv()
		}
	}
	return p, nil
}

// applyLimits sets the pacing and secondary-limit settings given on p.
func (s *providerSettings) applyLimits(p *Provider) error {
	setIf(&p.Limits.DefaultLimit, s.defaultLimit)
	setIf(&p.Limits.DefaultWindow, s.defaultWindow)
	setIf(&p.Limits.Policy, s.policy)
	if s.reserve != nil || s.reservePercent != nil {
		p.Limits.Reserve, p.Limits.ReservePercent = 0, 0
		setIf(&p.Limits.Reserve, s.reserve)
		setIf(&p.Limits.ReservePercent, s.reservePercent)
	}
	setIf(&p.Limits.MaxWait, s.maxWait)
	setIf(&p.Limits.MaxPause, s.maxPause)
	setIf(&p.Limits.Velocity, s.velocity)
	setIf(&p.Limits.MinInterval, s.minInterval)
	setIf(&p.Limits.MaxInterval, s.maxInterval)
	setIf(&p.Limits.Burst, s.burst)
	if mn, mx := p.Limits.MinInterval, p.Limits.MaxInterval; mx > 0 && mn > mx {
		return fmt.Errorf("%s: min_interval %v is above max_interval %v; want the min at most the max", s.at("min_interval"), mn, mx)
	}
	setIf(&p.Secondary.Wait, s.secondaryWait)
	setIf(&p.Secondary.MaxConcurrency, s.maxConcurrency)
	setIf(&p.Secondary.WriteSpacing, s.writeSpacing)
	return nil
}

func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

func asString(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", fmt.Errorf("expected a string, got %s", tomlType(v))
}

func asInt64(v any, minimum int64) (int64, error) {
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("expected an integer, got %s", tomlType(v))
	}
	if n < minimum {
		return 0, fmt.Errorf("must be at least %d, got %d", minimum, n)
	}
	return n, nil
}

func asInt(v any, minimum int) (*int, error) {
	n, err := asInt64(v, int64(minimum))
	if err != nil {
		return nil, err
	}
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("%d is too large", n)
	}
	i := int(n)
	return &i, nil
}

// asReserve reads reserve: an integer count, or a string holding a count
// or a percentage ("10%").
func asReserve(v any) (*int, *float64, error) {
	switch v := v.(type) {
	case int64:
		n, err := asInt(v, 0)
		return n, nil, err
	case string:
		n, pct, err := ParseReserve(v)
		if err != nil {
			return nil, nil, errors.New(strings.TrimPrefix(err.Error(), fmt.Sprintf("reserve %q: ", v)))
		}
		if pct > 0 {
			return nil, &pct, nil
		}
		return &n, nil, nil
	}
	return nil, nil, fmt.Errorf(`expected a count of requests such as 100 or a percentage such as "10%%", got %s`, tomlType(v))
}

// asVelocity reads a pacing velocity: a number above 0 (an integer will
// do), such as 1.5.
func asVelocity(v any) (*float64, error) {
	var f float64
	switch n := v.(type) {
	case float64:
		f = n
	case int64:
		f = float64(n)
	default:
		return nil, fmt.Errorf("expected a number such as 1.5, got %s", tomlType(v))
	}
	if !(f > 0) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("%v: want a number above 0 such as 1.5 (above 1 spends a window's budget before its reset)", f)
	}
	return &f, nil
}

func asDuration(v any, minimum time.Duration) (*time.Duration, error) {
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf(`expected a duration string such as "500ms", "2s" or "10m", got %s`, tomlType(v))
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf(`%q is not a duration; expected e.g. "500ms", "2s" or "10m"`, s)
	}
	if d < minimum {
		if minimum == 0 {
			return nil, fmt.Errorf("%q is negative", s)
		}
		return nil, fmt.Errorf("%q is shorter than %v", s, minimum)
	}
	return &d, nil
}

func asEnvNames(v any) ([]string, error) {
	var list []any
	switch v := v.(type) {
	case string:
		list = []any{v}
	case []any:
		list = v
	default:
		return nil, fmt.Errorf(`expected a list of environment variable names such as ["MY_TOKEN"], got %s`, tomlType(v))
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("entry #%d: expected a string, got %s", i+1, tomlType(e))
		}
		if !isEnvName(s) {
			return nil, fmt.Errorf("entry #%d: %q is not an environment variable name (letters, digits and '_', not starting with a digit)", i+1, s)
		}
		out = append(out, s)
	}
	return out, nil
}

func isEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// isHeaderName reports whether s is an RFC 9110 token.
func isHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return false
		}
	}
	return true
}

func tomlType(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("string %q", v)
	case int64:
		return fmt.Sprintf("integer %d", v)
	case float64:
		return fmt.Sprintf("float %v", v)
	case bool:
		return fmt.Sprintf("boolean %v", v)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	case []map[string]any:
		return "an array of tables"
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("a date/time %v", v)
}

// keyLines maps every key a TOML document defines (its path joined with
// "\x00") to the line defining it. The TOML decoder keeps key positions to
// itself, so this light scan recovers them for error messages; a key it cannot
// place falls back to its nearest placed parent.
func keyLines(doc string) map[string]int {
	out := map[string]int{}
	record := func(path []string, line int) {
		for n := 1; n <= len(path); n++ {
			k := strings.Join(path[:n], "\x00")
			if _, ok := out[k]; !ok {
				out[k] = line
			}
		}
	}
	var table []string
	inMulti := ""
	for i, line := range strings.Split(doc, "\n") {
		n := i + 1
		if inMulti != "" {
			if strings.Contains(line, inMulti) {
				inMulti = ""
			}
			continue
		}
		t := strings.TrimSpace(line)
		if t == "" || t[0] == '#' {
			continue
		}
		if t[0] == '[' {
			inner := strings.TrimPrefix(t[1:], "[")
			if parts, rest, ok := parseKeyExpr(inner); ok && strings.HasPrefix(strings.TrimSpace(rest), "]") {
				table = parts
				record(parts, n)
			}
			continue
		}
		parts, rest, ok := parseKeyExpr(t)
		rest = strings.TrimLeft(rest, " \t")
		if !ok || !strings.HasPrefix(rest, "=") {
			continue
		}
		record(append(slices.Clone(table), parts...), n)
		value := strings.TrimSpace(rest[1:])
		for _, q := range []string{`"""`, `'''`} {
			if strings.HasPrefix(value, q) && !strings.Contains(value[3:], q) {
				inMulti = q
			}
		}
	}
	return out
}

// parseKeyExpr reads a dotted TOML key (bare, "basic" or 'literal' parts)
// from the start of s and returns its parts and what follows.
func parseKeyExpr(s string) (parts []string, rest string, ok bool) {
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return nil, "", false
		}
		var part string
		switch s[0] {
		case '"', '\'':
			q := s[0]
			end := -1
			for j := 1; j < len(s); j++ {
				if q == '"' && s[j] == '\\' {
					j++
					continue
				}
				if s[j] == q {
					end = j
					break
				}
			}
			if end < 0 {
				return nil, "", false
			}
			part = s[1:end]
			if q == '"' {
				if unq, err := unquoteBasic(s[:end+1]); err == nil {
					part = unq
				}
			}
			s = s[end+1:]
		default:
			j := 0
			for j < len(s) && (s[j] == '_' || s[j] == '-' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			if j == 0 {
				return nil, "", false
			}
			part, s = s[:j], s[j:]
		}
		parts = append(parts, part)
		s = strings.TrimLeft(s, " \t")
		if !strings.HasPrefix(s, ".") {
			return parts, s, true
		}
		s = s[1:]
	}
}

func unquoteBasic(q string) (string, error) {
	var v struct{ K string }
	_, err := toml.Decode("K = "+q, &v)
	return v.K, err
}
