package transport

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
)

// CredentialStatus is what is known about one credential: who owns it,
// whether it works, and each of its buckets. It never holds the token.
type CredentialStatus struct {
	Provider   string `json:"provider"`
	Credential string `json:"credential"`
	Owner      string `json:"owner,omitempty"`
	// Account is the organisation or user a GitHub App installation is
	// on: the only account whose repositories it sees.
	Account string `json:"account,omitempty"`
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	// Anonymous: no token, the server's anonymous limits.
	Anonymous bool             `json:"anonymous,omitempty"`
	Resources []ResourceStatus `json:"resources"`
	// Concurrency is the owner's secondary-limit state, once the owner
	// was used: its cap on requests in flight and its pause.
	Concurrency *ConcurrencyStatus `json:"concurrency,omitempty"`

	// bucket is the credential's bucket owner: credentials with the same
	// one share their buckets, so a summary counts them once.
	bucket string
}

// ConcurrencyStatus is what an owner's secondary limits allow at the
// report's time. Credentials of one owner share it.
type ConcurrencyStatus struct {
	// Cap is how many of the owner's requests may be in flight: learnt
	// from the server, at most Max. A new owner starts at a few and gains
	// one per round of successes (Ramping); a secondary refusal lowers it
	// to what the server allowed (Lowered), where it holds for ten times
	// the pause, then rises by one per round of successes. 0: no cap.
	Cap int64 `json:"cap"`
	// Max is the configured max_concurrency (0: none).
	Max      int64 `json:"max"`
	Ramping  bool  `json:"ramping,omitempty"`
	Lowered  bool  `json:"lowered,omitempty"`
	InFlight int64 `json:"in_flight"`
	// PausedUntil is the end of the secondary-limit pause under way, and
	// Strikes the episodes of refusals in a row that led to it.
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	Strikes     int        `json:"strikes,omitempty"`
}

// ResourceStatus is one bucket's state.
type ResourceStatus struct {
	Resource  string     `json:"resource"`
	Limit     *int64     `json:"limit"`
	Remaining *int64     `json:"remaining"`
	Percent   *float64   `json:"percent"`
	Reset     *time.Time `json:"reset"`
	ResetsIn  *float64   `json:"resets_in_seconds"`
	Health    string     `json:"health"`
	// Assumed is true when the numbers are a default or an assumed
	// refill, not the server's word.
	Assumed bool `json:"assumed,omitempty"`
	// Unit is what the numbers count: "points" for GitHub's GraphQL,
	// "requests" otherwise.
	Unit string `json:"unit"`
	// InFlight is what reservations not yet answered hold of the bucket,
	// in its unit (a GraphQL query holds its predicted points).
	InFlight int64 `json:"in_flight"`
	// Origin says where the limit of a scope (a Resource that is a path
	// pattern, such as "/api/v4/users/*") comes from: "learnt" from the
	// server's refusals, "measuring" while the limit learnt is only a
	// lower bound (one process's count) and the fleet's requests of a
	// window are being counted to learn it, or "configured" in the
	// config file; empty for the buckets the server announces.
	Origin string `json:"origin,omitempty"`
	// Name is the server's name for the throttle, when it gave one
	// (GitLab's RateLimit-Name).
	Name string `json:"name,omitempty"`
	// BlockedUntil is when a refusal's pause ends, while it lasts:
	// nothing is sent to the bucket before it.
	BlockedUntil *time.Time `json:"blocked_until,omitempty"`
}

// StatusReport is what `ratekeeper status --json` prints and the gateway's
// /status serves.
type StatusReport struct {
	GeneratedAt time.Time `json:"generated_at"`
	// Providers has one overall line per provider (see Summarize).
	Providers   []ProviderSummary  `json:"providers"`
	Credentials []CredentialStatus `json:"credentials"`
	// NotShown is the quota state held that the report does not show
	// (see StoredState), so that a report never says a database holds
	// nothing when it holds state for something else.
	NotShown []StoredState `json:"not_shown,omitempty"`
}

// StoredState is quota state a report does not show, for one provider at
// one base URL: that of a provider the transport does not serve there
// (another --provider URL, or not selected), or, for one it serves, of
// credentials it does not hold (other tokens; requests that carried their
// own).
type StoredState struct {
	Provider string `json:"provider"`
	BaseURL  string `json:"base_url"`
	// Served is true when the transport serves the provider at BaseURL:
	// what is not shown belongs to other credentials.
	Served bool `json:"served,omitempty"`
	// Buckets counts the buckets, Owners their distinct owners
	// (credentials, or accounts).
	Buckets int `json:"buckets"`
	Owners  int `json:"owners"`
}

// ProviderSummary is a provider's overall line: "github: HEALTHY, 3
// credentials, core 4,210/5,000, resets in 34m".
type ProviderSummary struct {
	Provider string `json:"provider"`
	// Health is the band of Remaining ÷ Limit (see quota.HealthOf);
	// EXHAUSTED when every credential is invalid, UNKNOWN when nothing is
	// known of the resource yet.
	Health      string `json:"health"`
	Credentials int    `json:"credentials"`
	Invalid     int    `json:"invalid,omitempty"`
	// Anonymous: the provider has no token, only anonymous access.
	Anonymous bool `json:"anonymous,omitempty"`
	// Resource is the provider's main resource (that of a GET of its
	// base URL: GitHub's core, GitLab's api), and Remaining and Limit its
	// numbers summed over the distinct buckets: credentials of one owner
	// count once. Nil when no bucket of it is known.
	Resource  string     `json:"resource"`
	Remaining *int64     `json:"remaining"`
	Limit     *int64     `json:"limit"`
	Reset     *time.Time `json:"reset"` // the soonest of those buckets
	ResetsIn  *float64   `json:"resets_in_seconds"`
}

// Report is Status wrapped with its time, its providers' overall lines
// and what the state holds that it does not show.
func (t *Transport) Report(ctx context.Context, now time.Time, only ...string) (StatusReport, error) {
	rep := StatusReport{GeneratedAt: now.UTC(), Credentials: []CredentialStatus{}}
	buckets, owners, err := t.stored(ctx)
	if err == nil {
		var st []CredentialStatus
		if st, err = t.status(ctx, now, buckets, owners, only); st != nil {
			rep.Credentials = st
		}
		rep.NotShown = t.notShown(buckets, only)
	}
	t.Summarize(&rep, only...)
	return rep, err
}

// Summarize sets rep.Providers from rep.Credentials: one line for each
// provider of this transport (or only those named), in order.
func (t *Transport) Summarize(rep *StatusReport, only ...string) {
	var mains []mainResource
	for _, p := range t.providers(only) {
		mains = append(mains, mainResource{provider: p.Name, resource: p.Classify(http.MethodGet, p.BaseURL()).Resource})
	}
	rep.Providers = summarize(mains, rep.Credentials, rep.GeneratedAt)
}

type mainResource struct{ provider, resource string }

// summarize computes the providers' overall lines from their credentials'
// lines at now. Each distinct bucket (credential's bucket owner) of the
// main resource counts once: its remaining and limit are added up, and
// the health is the band of the sums, so three tokens of one user read as
// one bucket, and two users' as twice the quota.
func summarize(mains []mainResource, creds []CredentialStatus, now time.Time) []ProviderSummary {
	out := make([]ProviderSummary, 0, len(mains))
	for _, m := range mains {
		s := ProviderSummary{Provider: m.provider, Resource: m.resource}
		var remaining, limit int64
		known, limitKnown := false, true
		anonymous := 0
		seen := map[string]bool{}
		for _, c := range creds {
			if c.Provider != m.provider {
				continue
			}
			s.Credentials++
			if c.Anonymous {
				anonymous++
			}
			if c.State == "invalid" {
				s.Invalid++
				continue
			}
			for _, r := range c.Resources {
				if r.Resource != m.resource || seen[c.bucket] {
					continue
				}
				seen[c.bucket] = true
				if r.Remaining == nil {
					continue
				}
				known = true
				remaining += *r.Remaining
				if r.Limit != nil {
					limit += *r.Limit
				} else {
					limitKnown = false
				}
				if r.Reset != nil && (s.Reset == nil || r.Reset.Before(*s.Reset)) {
					s.Reset = r.Reset
				}
			}
		}
		s.Anonymous = s.Credentials > 0 && anonymous == s.Credentials
		switch {
		case s.Credentials > 0 && s.Invalid == s.Credentials:
			s.Health = string(quota.Exhausted)
		case !known:
			s.Health = string(quota.HealthUnknown)
		default:
			s.Remaining = &remaining
			if limitKnown {
				s.Limit = &limit
			} else {
				limit = 0
			}
			s.Health = string(quota.HealthOf(remaining, limit))
		}
		if s.Reset != nil {
			in := max(s.Reset.Sub(now), 0).Seconds()
			s.ResetsIn = &in
		}
		out = append(out, s)
	}
	return out
}

// Status reports every configured provider's credentials (or only the
// named providers) and their buckets at now, from the state the transport
// holds: it sends nothing.
func (t *Transport) Status(ctx context.Context, now time.Time, only ...string) ([]CredentialStatus, error) {
	buckets, owners, err := t.stored(ctx)
	if err != nil {
		return nil, err
	}
	return t.status(ctx, now, buckets, owners, only)
}

// stored reads every bucket and owner of the state.
func (t *Transport) stored(ctx context.Context) (map[BucketID]quota.Bucket, map[OwnerID]quota.Owner, error) {
	buckets, err := t.state.Buckets(ctx)
	if err != nil {
		return nil, nil, err
	}
	owners, err := t.state.Owners(ctx)
	return buckets, owners, err
}

func (t *Transport) status(ctx context.Context, now time.Time, buckets map[BucketID]quota.Bucket, owners map[OwnerID]quota.Owner, only []string) ([]CredentialStatus, error) {
	ids := sortedBucketIDs(buckets)
	var out []CredentialStatus
	for _, p := range t.providers(only) {
		pool, err := t.poolFor(p)
		if err != nil {
			return nil, err
		}
		t.restore(ctx, p, pool)
		for _, app := range pool.Apps() {
			app.For(ctx, "", "") // lists the App's installations, when due
		}
		for _, c := range pool.Credentials() {
			st := c.Status(now)
			cs := CredentialStatus{Provider: p.Name, Credential: c.Masked(), State: st.State.String(), Reason: st.Reason,
				Anonymous: c.Kind() == creds.Anonymous, Resources: []ResourceStatus{}}
			if o := c.Owner(); o.Key() != "" {
				cs.Owner = o.String()
			}
			if a := c.Account(); a != "" {
				cs.Account = a
				if cs.Owner == "" {
					cs.Owner = "installation on " + a
				}
			}
			owner := c.BucketOwner()
			cs.bucket = owner
			if o, ok := owners[OwnerID{Provider: t.stateKey(p), Owner: owner}]; ok {
				cs.Concurrency = concurrencyStatus(&o, t.laneFor(p).secondary, now)
			}
			for _, id := range ids {
				if id.Provider != t.stateKey(p) || id.Owner != owner {
					continue
				}
				b := buckets[id]
				if IsScope(id.Resource) && !b.Learnt && !b.Configured {
					continue // a scope nothing is known of
				}
				cs.Resources = append(cs.Resources, resourceStatus(id.Resource, &b, now))
			}
			out = append(out, cs)
		}
	}
	return out, nil
}

func (t *Transport) providers(only []string) []*provider.Provider {
	if len(only) == 0 {
		return t.reg.Providers()
	}
	var ps []*provider.Provider
	for _, name := range only {
		if p := t.reg.Lookup(name); p != nil && !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	return ps
}

func concurrencyStatus(o *quota.Owner, s quota.Secondary, now time.Time) *ConcurrencyStatus {
	c := o.ConcurrencyCap(s, now)
	below := s.MaxConcurrent <= 0 || c < s.MaxConcurrent
	cs := &ConcurrencyStatus{Cap: c, Max: s.MaxConcurrent, InFlight: o.InFlight(now), Strikes: o.Strikes,
		Lowered: o.Lowered && below, Ramping: !o.Lowered && s.MaxConcurrent > 0 && below}
	if now.Before(o.PenaltyUntil) {
		until := o.PenaltyUntil.UTC()
		cs.PausedUntil = &until
	}
	return cs
}

// IsScope reports whether a bucket's resource names a scope (a path
// pattern such as "/api/v4/users/*" or "POST /api/v4/projects/*/issues",
// see provider.ScopeOf) rather than a bucket the server announces.
func IsScope(resource string) bool { return strings.Contains(resource, "/") }

// resourceStatus is bucket b at now: a window whose reset has passed is
// shown rolled over (refilled, assumed), not as the last answer left it.
func resourceStatus(name string, stored *quota.Bucket, now time.Time) ResourceStatus {
	b := stored.At(now)
	rs := ResourceStatus{Resource: name, Health: string(b.HealthAt(now)), Assumed: b.Assumed, Unit: "requests", InFlight: b.InFlight(now)}
	if name == provider.ResourceGraphQL {
		rs.Unit = "points"
	}
	switch {
	case b.Learnt && b.Provisional:
		rs.Origin = "measuring"
	case b.Learnt:
		rs.Origin = "learnt"
	case b.Configured:
		rs.Origin = "configured"
	}
	if b.Name != "" && IsScope(name) {
		rs.Name = b.Name
	}
	if now.Before(b.BlockedUntil) {
		u := b.BlockedUntil.UTC()
		rs.BlockedUntil = &u
	}
	if b.Limit != quota.UnknownCount {
		v := b.Limit
		rs.Limit = &v
	}
	if b.Remaining != quota.UnknownCount {
		v := b.Remaining
		rs.Remaining = &v
		if b.Limit > 0 {
			pct := float64(v) * 100 / float64(b.Limit)
			rs.Percent = &pct
		}
	}
	if !b.Reset.IsZero() {
		r := b.Reset.UTC()
		rs.Reset = &r
		in := max(r.Sub(now), 0).Seconds()
		rs.ResetsIn = &in
	}
	return rs
}

// Refresh asks the servers about every credential of the named providers
// (all when none are named): it learns each token's owner, marks rejected
// tokens invalid, and reads the provider's free status endpoint (GitHub's
// /rate_limit) where there is one, or else takes the quota from the
// validation answer. It is what `ratekeeper status --live` does.
func (t *Transport) Refresh(ctx context.Context, only ...string) error {
	for _, p := range t.providers(only) {
		pool, err := t.poolFor(p)
		if err != nil {
			return err
		}
		t.restore(ctx, p, pool)
		for _, app := range pool.Apps() {
			app.For(ctx, "", "") // lists the App's installations, when due
		}
		for _, c := range pool.Credentials() {
			if err := t.refreshOne(ctx, p, c); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *Transport) refreshOne(ctx context.Context, p *provider.Provider, c *creds.Credential) error {
	if c.Kind() != creds.Anonymous {
		// Asked for, so asked again: a token marked invalid is tried
		// anew. The request is reserved and read like any other.
		c.ClearInvalid(t.opts.Now())
		err := t.whoAmI(ctx, p, c, false)
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if c.State(t.opts.Now()) == creds.Invalid {
			return nil
		}
	}
	return t.readStatus(ctx, p, c)
}

// ReadQuota reads the free status endpoint (GitHub's /rate_limit) of the
// named providers (all when none are named) with each of their usable
// credentials, and applies what it says to their buckets. Unlike Refresh
// it spends nothing: no "who am I" request, and nothing for a provider
// without such an endpoint, whose quota the first real answer tells. It is
// what a caller that needs the quota before its first request (poll's
// budget guard) uses.
func (t *Transport) ReadQuota(ctx context.Context, only ...string) error {
	for _, p := range t.providers(only) {
		if _, ok := p.StatusURL(); !ok {
			continue
		}
		pool, err := t.poolFor(p)
		if err != nil {
			return err
		}
		t.restore(ctx, p, pool)
		for _, c := range pool.Eligible(t.opts.Now()) {
			if err := t.readStatus(ctx, p, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// readStatus reads p's free status endpoint with c and applies each of its
// resources' counters to c's buckets. An answer that is not a status is
// ignored: the endpoint is a bonus.
func (t *Transport) readStatus(ctx context.Context, p *provider.Provider, c *creds.Credential) error {
	u, ok := p.StatusURL()
	if !ok {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	l := t.laneFor(p)
	resp, _, err := t.pinned(req, l, c, false)
	if err != nil {
		return fmt.Errorf("%s %s: %w", p.Name, c.Masked(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil // the status endpoint is a bonus; the validation already spoke
	}
	limits, err := p.ParseStatus(body)
	if err != nil {
		return nil
	}
	now := t.opts.Now()
	skew := l.skewNow() // the exchange read its Date already
	for _, rl := range limits {
		r := headers.Reading{Status: 200, Limit: int64(rl.Limit), Remaining: int64(rl.Remaining), Used: int64(rl.Used)}
		if !rl.Reset.IsZero() {
			r.Reset = rl.Reset.Add(-skew)
		}
		t.observe(ctx, p, Slot{Bucket: BucketID{Provider: t.stateKey(p), Owner: c.BucketOwner(), Resource: rl.Resource}}, &r, now, false)
	}
	return nil
}

// notShown groups the buckets a report of the given providers leaves out
// (see StoredState) by provider and base URL, in that order: those of
// providers served elsewhere or not selected, and those of credentials
// the transport does not hold.
func (t *Transport) notShown(buckets map[BucketID]quota.Bucket, only []string) []StoredState {
	shown := map[string]map[string]bool{} // state key → bucket owners shown
	for _, p := range t.providers(only) {
		pool, err := t.poolFor(p)
		if err != nil {
			continue
		}
		own := map[string]bool{}
		for _, c := range pool.Credentials() {
			// A token's own identity too: its buckets from before
			// its owner was learnt are its.
			own[c.BucketOwner()], own[c.ID()] = true, true
		}
		shown[t.stateKey(p)] = own
	}
	groups := map[string]map[string]int{} // state key → buckets by owner
	for id := range buckets {
		if own, served := shown[id.Provider]; served && own[id.Owner] {
			continue
		}
		if groups[id.Provider] == nil {
			groups[id.Provider] = map[string]int{}
		}
		groups[id.Provider][id.Owner]++
	}
	var out []StoredState
	for _, key := range slices.Sorted(maps.Keys(groups)) {
		name, base, _ := strings.Cut(key, " ")
		_, served := shown[key]
		st := StoredState{Provider: name, BaseURL: base, Served: served, Owners: len(groups[key])}
		for _, n := range groups[key] {
			st.Buckets += n
		}
		out = append(out, st)
	}
	return out
}
