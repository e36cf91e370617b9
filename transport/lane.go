package transport

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper/cache"
	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
)

// lane is everything that is fixed per provider, worked out once: its
// credentials (pool), the key of its state, its policy, secondary limits,
// waits and pauses, the default of a bucket that states nothing, the cache
// as its entity tags need it, and what its answers teach over time (the
// server's clock skew and its typical round trip). A request's exchange
// reads its lane; it never recomputes these.
type lane struct {
	p   *provider.Provider
	key string // the provider's part of bucket and owner keys
	// pool is the provider's credentials (Options.Pools, or its token
	// variables: creds.Load); poolErr is why they cannot be loaded (every
	// request then fails with it).
	pool    *creds.Pool
	poolErr error
	// policy paces the provider's buckets; policyErr is why a configured
	// policy cannot work (every request then fails with it).
	policy    quota.Policy
	policyErr error
	// secondary is the owner's secondary limits for REST requests,
	// graphql for GraphQL (its own points budget).
	secondary, graphql quota.Secondary
	maxWait, maxPause  time.Duration
	def                quota.Default
	cache              *cache.Cache
	// scopes counts the successes of each scope (see scopeTally).
	scopes scopeTally
	// sight is what is known of which credentials see which owners
	// (route.go).
	sight sight
	// speaksOpenAI: the lane's host, which no provider prices in tokens,
	// answered in OpenAI's tokens headers (see noteOpenAIHeaders).
	speaksOpenAI atomic.Bool

	mu   sync.Mutex
	skew quota.Skew
	// rtt is the typical round trip, an exponentially weighted average
	// of the answers' times: how soon a request in flight is expected
	// back, which is when a request waiting for its concurrency slot (or
	// for a first probe, or the learning turn) can expect to go. It is
	// the server's own number, so these waits scale with the server.
	rtt time.Duration
}

// defaultRoundTrip is a lane's round trip before any answer came back.
const defaultRoundTrip = time.Second

// laneForURL returns the lane a request to u goes by: its provider's,
// made at New, or for a host no provider owns, the lane made with its
// generic provider on first use (autoLane). It fails for a URL no lane can
// be made for, and with the error of credentials that cannot be loaded.
func (t *Transport) laneForURL(u *url.URL) (*lane, error) {
	var l *lane
	if p := t.reg.Match(u); p != nil {
		l = t.laneFor(p)
	} else if l = t.autoLane(u); l == nil {
		return nil, fmt.Errorf("ratekeeper: %s: no provider owns this URL and none can be made for it (want an http or https URL with a host)", redactURL(u))
	}
	if l.poolErr != nil {
		return nil, l.poolErr
	}
	return l, nil
}

// laneFor returns p's lane: made at New for the registry's providers, or
// with its provider for a host no provider owns; one added to the
// registry after New gets its lane on first use.
func (t *Transport) laneFor(p *provider.Provider) *lane {
	if l := t.lanes[p]; l != nil { // read-only after New: no lock
		return l
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.late[p]
	if l == nil {
		l = t.newLane(p)
		t.late[p] = l
	}
	return l
}

// newLane works out what is fixed for p: its policy, its cache view, its
// credentials, its limits. Its errors stay in the lane (policyErr,
// poolErr): New returns them, a lane made later fails its requests with
// them.
func (t *Transport) newLane(p *provider.Provider) *lane {
	l := &lane{p: p}
	l.policy, l.policyErr = policyFor(t.opts.Policy, p)
	l.cache = t.cache.WithTagRule(p)
	l.pool = t.given[p.Name]
	if l.pool == nil {
		var notes []string
		l.pool, notes, l.poolErr = creds.Load(p, creds.Options{AppTransport: t.base, Now: t.opts.Now})
		if l.poolErr != nil {
			l.poolErr = fmt.Errorf("provider %s: %w", p.Name, l.poolErr)
		}
		for _, n := range notes {
			t.log.Debug("credentials", "provider", p.Name, "note", n)
		}
	}
	l.key = p.Name + " " + p.BaseURL().String()
	l.maxWait = cmp.Or(p.Limits.MaxWait, t.opts.MaxWait)
	l.maxPause = cmp.Or(p.Limits.MaxPause, t.opts.MaxPause)
	l.def = quota.Default{Limit: int64(p.Limits.DefaultLimit), Window: p.Limits.DefaultWindow}
	l.secondary = quota.Secondary{
		MaxConcurrent:    int64(p.Secondary.MaxConcurrency),
		Wait:             cmp.Or(p.Secondary.Wait, t.opts.SecondaryWait),
		WriteSpacing:     p.Secondary.WriteSpacing,
		PointsPerMinute:  int64(p.Secondary.EndpointPointsPerMinute),
		ContentPerMinute: int64(p.Secondary.ContentCreationPerMinute),
		ContentPerHour:   int64(p.Secondary.ContentCreationPerHour),
	}
	l.graphql = l.secondary
	if p.Secondary.GraphQLPointsPerMinute > 0 {
		l.graphql.PointsPerMinute = int64(p.Secondary.GraphQLPointsPerMinute)
	}
	return l
}

// A URL no provider owns is not sent around the engine: its host becomes a
// generic provider on first use, with a lane like any provider's. Its
// token comes from an environment variable named after the host — the
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

// autoLane returns the lane of u's host, making it with its generic
// provider on first use, when it is announced (EventUnmatched); nil when
// none can be made (a URL without a host).
func (t *Transport) autoLane(u *url.URL) *lane {
	if u == nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil
	}
	origin := strings.ToLower(u.Scheme + "://" + u.Host)
	t.mu.Lock()
	l := t.auto[origin]
	t.mu.Unlock()
	if l != nil {
		return l
	}
	p, env := t.newAutoProvider(u, origin)
	if p == nil {
		return nil
	}
	made := t.newLane(p)
	t.mu.Lock()
	if l = t.auto[origin]; l == nil {
		l, t.auto[origin], t.late[p] = made, made, made
	}
	t.mu.Unlock()
	if l == made {
		t.emit(Event{Kind: EventUnmatched, Provider: p.Name, URL: origin, TokenEnv: env, Variables: slices.Clone(p.TokenEnv),
			Auto: !t.opts.NoAutoProviders})
	}
	return l
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
		// flight and no assumed quota. A host that states nothing is
		// sent one first request, then held back by nothing (see
		// quota.Bucket.Silent).
		p.TokenEnv = nil
		p.Limits.DefaultLimit, p.Limits.DefaultWindow = 0, 0
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

// poolFor returns p's credentials.
func (t *Transport) poolFor(p *provider.Provider) (*creds.Pool, error) {
	l := t.laneFor(p)
	return l.pool, l.poolErr
}

// policyFor is base as p's configuration tunes it.
func policyFor(base quota.Policy, p *provider.Provider) (quota.Policy, error) {
	pol := base
	if p.Limits.Policy != "" {
		k, err := quota.ParseKind(p.Limits.Policy)
		if err != nil {
			return pol, fmt.Errorf("provider %s: %w", p.Name, err)
		}
		pol.Kind = k
	}
	if p.Limits.Reserve > 0 || p.Limits.ReservePercent > 0 {
		pol.Reserve, pol.ReservePercent = int64(p.Limits.Reserve), p.Limits.ReservePercent
	}
	pol.Velocity = cmp.Or(p.Limits.Velocity, pol.Velocity)
	pol.MinDelay = cmp.Or(p.Limits.MinInterval, pol.MinDelay)
	pol.MaxDelay = cmp.Or(p.Limits.MaxInterval, pol.MaxDelay)
	pol.Burst = cmp.Or(p.Limits.Burst, pol.Burst)
	if err := pol.Validate(); err != nil {
		return pol, fmt.Errorf("provider %s: %w", p.Name, err)
	}
	return pol, nil
}

// ask is what a request of class needs of its owner and bucket.
func (l *lane) ask(class provider.Request) quota.Ask {
	sec := l.secondary
	if class.Resource == provider.ResourceGraphQL {
		sec = l.graphql
	}
	return quota.Ask{Policy: l.policy, Secondary: sec, Free: class.Free, Units: int64(class.Units),
		Cost:  quota.Cost{Write: class.Write, Points: int64(class.Points), Endpoint: class.Endpoint, CreatesContent: class.CreatesContent},
		Scope: quota.Default{Limit: class.Scope.Limit, Window: class.Scope.Window}}
}

// answer is what reading r (nil: none) of a request sent at sent tells the
// quota state; jitter picks the point of an exponential penalty.
func (l *lane) answer(r *headers.Reading, counted bool, sent time.Time, jitter float64) quota.Answer {
	return quota.Answer{Reading: r, Counted: counted, Default: l.def, Jitter: jitter, Sent: sent,
		Secondary: l.secondary, MaxPause: l.maxPause, BareWait: l.p.Secondary.BareWait}
}

// read takes an answer received at now for a request sent at sent: the
// round trip and the server's Date feed the lane's estimates, and the
// reading comes back on our clock (quota.Read, the one reader of headers).
func (l *lane) read(status int, h http.Header, prefix []byte, sent, now time.Time, meter string) headers.Reading {
	st, ok := headers.ServerTime(h)
	if age := h.Get("Age"); age != "" && age != "0" {
		ok = false // a cache's copy: its Date is the origin's, not now
	}
	l.mu.Lock()
	if ok {
		l.skew.Add(st, sent, now)
	}
	skew := l.skew.Estimate()
	if d := now.Sub(sent); d >= 0 {
		if l.rtt == 0 {
			l.rtt = d
		} else {
			l.rtt += (d - l.rtt) / 8 // TCP's SRTT weight
		}
	}
	l.mu.Unlock()
	if meter != "" {
		return quota.ReadFor(status, h, prefix, now, skew, meter)
	}
	return quota.Read(status, h, prefix, now, skew)
}

// skewNow is the lane's estimate of the server's clock skew.
func (l *lane) skewNow() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.skew.Estimate()
}

// roundTrip is the lane's typical round trip, at least a millisecond.
func (l *lane) roundTrip() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rtt == 0 {
		return defaultRoundTrip
	}
	return max(l.rtt, time.Millisecond)
}

// stateKey is p's part of bucket and owner keys (its lane's key).
func (t *Transport) stateKey(p *provider.Provider) string { return t.laneFor(p).key }
