package transport

import (
	"math"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/provider"
)

// A URL no provider owns is not sent around the engine: its host becomes a
// generic provider on first use, through the same loop as every request.
// Its token comes from an environment variable named after the host — the
// unambiguous HOST_TOKEN (git.example.com → GIT_EXAMPLE_COM_TOKEN), then
// the first label's (GIT_TOKEN), as configured generic providers read — and
// is sent to that exact host (scheme, name and port) only. A variable that
// belongs to a built-in or configured provider (GITHUB_TOKEN, GH_TOKEN,
// GITLAB_TOKEN, HF_TOKEN, …) is never read for it, so github.evil.example
// gets nothing. Its answers' rate-limit headers pace it like any
// provider's; a host that states none is held to the generic default, 60
// requests a minute, and at most 10 in flight, like a configured generic
// provider. Options.NoAutoProviders turns both off: no token, and no
// pacing but what its own headers say.

// autoProvider returns the provider made for u's host, making it on first
// use; nil when none can be made (a URL without a host).
func (t *Transport) autoProvider(u *url.URL) *provider.Provider {
	if u == nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil
	}
	origin := strings.ToLower(u.Scheme + "://" + u.Host)
	t.mu.Lock()
	p, ok := t.auto[origin]
	t.mu.Unlock()
	if ok {
		return p
	}
	p, env := t.newAutoProvider(u, origin)
	if p == nil {
		return nil
	}
	t.mu.Lock()
	if q, ok := t.auto[origin]; ok {
		t.mu.Unlock()
		return q
	}
	if t.auto == nil {
		t.auto = map[string]*provider.Provider{}
	}
	t.auto[origin] = p
	t.mu.Unlock()
	t.emit(Event{Kind: EventUnmatched, Provider: p.Name, URL: origin, TokenEnv: env, Variables: slices.Clone(p.TokenEnv),
		Auto: !t.opts.NoAutoProviders})
	return p
}

// newAutoProvider builds the generic provider of origin, and names the
// variable its token came from ("" for none).
func (t *Transport) newAutoProvider(u *url.URL, origin string) (*provider.Provider, string) {
	name := autoName(u.Host)
	p, err := provider.New(name, provider.Generic, origin)
	if err != nil {
		t.log.Warn("cannot pace a host no provider owns", "host", u.Host, "err", err)
		return nil, ""
	}
	if t.opts.NoAutoProviders {
		// Nothing but its own headers: no token, no cap on requests in
		// flight, and a default quota no batch reaches — not none: a
		// bucket nothing is known about lets one request through at a
		// time, and a host that states nothing would stay unknown.
		p.TokenEnv = nil
		p.Limits.DefaultLimit, p.Limits.DefaultWindow = math.MaxInt32, time.Minute
		p.Secondary = provider.Secondary{}
		return p, ""
	}
	p.TokenEnv = t.autoTokenEnv(u.Hostname(), name)
	for _, env := range p.TokenEnv {
		if v, ok := os.LookupEnv(env); ok && v != "" {
			return p, env
		}
	}
	return p, ""
}

// autoName is a provider name for host: its lower-cased name and port,
// with what a provider name may not hold turned into '-'.
func autoName(host string) string {
	var b strings.Builder
	for i, r := range strings.ToLower(host) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case r == '.' && i > 0:
			b.WriteRune(r)
		default:
			if i > 0 {
				b.WriteByte('-')
			}
		}
	}
	return strings.Trim(b.String(), "-.")
}

// autoTokenEnv lists the variables an unknown host's token may come from,
// the unambiguous one first, leaving out every variable a registered API
// or a configured provider reads.
func (t *Transport) autoTokenEnv(hostname, name string) []string {
	taken := map[string]bool{}
	for _, env := range provider.FixedTokenEnv() {
		taken[env] = true
	}
	for _, p := range t.reg.Providers() {
		for _, env := range p.TokenEnv {
			taken[env] = true
		}
	}
	var out []string
	for _, env := range []string{
		provider.GenericTokenEnv(name, strings.ReplaceAll(hostname, ".", "_")),
		provider.GenericTokenEnv(name, hostname),
	} {
		if !taken[env] && !slices.Contains(out, env) {
			out = append(out, env)
		}
	}
	return out
}
