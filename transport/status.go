package transport

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
)

// CredentialStatus is what is known about one credential: who owns it,
// whether it works, and each of its buckets. It never holds the token.
type CredentialStatus struct {
	Provider   string           `json:"provider"`
	Credential string           `json:"credential"`
	Owner      string           `json:"owner,omitempty"`
	State      string           `json:"state"`
	Reason     string           `json:"reason,omitempty"`
	Resources  []ResourceStatus `json:"resources"`
	// Concurrency is the owner's secondary-limit state, once the owner
	// was used: its cap on requests in flight and its pause.
	Concurrency *ConcurrencyStatus `json:"concurrency,omitempty"`
}

// ConcurrencyStatus is what an owner's secondary limits allow at the
// report's time. Credentials of one owner share it.
type ConcurrencyStatus struct {
	// Cap is how many of the owner's requests may be in flight: learnt
	// from the server, at most Max. A new owner starts at a few and gains
	// one per round of successes (Ramping); a secondary refusal lowers it
	// to what the server allowed (Lowered), and it then regains one a
	// minute back to Max. 0: no cap.
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
}

// StatusReport is what `ratekeeper status --json` prints and the gateway's
// /status serves.
type StatusReport struct {
	GeneratedAt time.Time          `json:"generated_at"`
	Credentials []CredentialStatus `json:"credentials"`
}

// Report is Status wrapped with its time.
func (t *Transport) Report(ctx context.Context, now time.Time, only ...string) (StatusReport, error) {
	st, err := t.Status(ctx, now, only...)
	if st == nil {
		st = []CredentialStatus{}
	}
	return StatusReport{GeneratedAt: now.UTC(), Credentials: st}, err
}

// Status reports every configured provider's credentials (or only the
// named providers) and their buckets at now, from the state the transport
// holds: it sends nothing.
func (t *Transport) Status(ctx context.Context, now time.Time, only ...string) ([]CredentialStatus, error) {
	buckets, err := t.state.Buckets(ctx)
	if err != nil {
		return nil, err
	}
	owners, err := t.state.Owners(ctx)
	if err != nil {
		return nil, err
	}
	ids := sortedBucketIDs(buckets)
	var out []CredentialStatus
	for _, p := range t.providers(only) {
		pool, err := t.poolFor(p)
		if err != nil {
			return nil, err
		}
		t.restore(ctx, p, pool)
		for _, c := range pool.Credentials() {
			st := c.Status(now)
			cs := CredentialStatus{Provider: p.Name, Credential: c.Masked(), State: st.State.String(), Reason: st.Reason, Resources: []ResourceStatus{}}
			if o := c.Owner(); o.Key() != "" {
				cs.Owner = o.String()
			}
			owner := c.BucketOwner()
			if o, ok := owners[OwnerID{Provider: t.stateKey(p), Owner: owner}]; ok {
				sec, _ := t.secondaryFor(p, provider.Request{})
				cs.Concurrency = concurrencyStatus(&o, sec, now)
			}
			for _, id := range ids {
				if id.Provider != t.stateKey(p) || id.Owner != owner {
					continue
				}
				b := buckets[id]
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
		if p := t.reg.Lookup(name); p != nil {
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

func resourceStatus(name string, b *quota.Bucket, now time.Time) ResourceStatus {
	rs := ResourceStatus{Resource: name, Health: string(b.HealthAt(now)), Assumed: b.Assumed}
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
	u, ok := p.StatusURL()
	if !ok {
		return nil
	}
	req, err := http.NewRequestWithContext(withPin(ctx, pin{cred: c, validating: true}), http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	sent := t.opts.Now()
	resp, err := t.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", p.Name, c.Masked(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil // the status endpoint is a bonus; the validation already spoke
	}
	limits, err := provider.ParseStatus(body)
	if err != nil {
		return nil
	}
	now := t.opts.Now()
	skew := t.skew(p, resp.Header, sent, now)
	for _, rl := range limits {
		r := headers.Reading{Status: 200, Limit: int64(rl.Limit), Remaining: int64(rl.Remaining), Used: int64(rl.Used)}
		if !rl.Reset.IsZero() {
			r.Reset = rl.Reset.Add(-skew)
		}
		t.observe(ctx, p, Slot{Bucket: BucketID{Provider: t.stateKey(p), Owner: c.BucketOwner(), Resource: rl.Resource}}, &r, now, false)
	}
	return nil
}
