package transport

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
)

// acquire picks the credential whose quota lets it go soonest, waits until
// then and reserves the quota. Among credentials that can go equally soon
// they take turns. It returns a *WaitError instead of waiting longer than
// the max wait, and ctx's error as soon as ctx ends.
func (t *Transport) acquire(ctx context.Context, p *provider.Provider, pool *creds.Pool, class provider.Request) (*grant, error) {
	policy, _ := t.policyFor(p)
	sec, cost := secondaryFor(p, class)
	maxWait := t.maxWait(p)
	var waited time.Duration
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		now := t.opts.Now()
		cands := pool.Eligible(now)
		if len(cands) == 0 {
			if next, ok := pool.EarliestEligible(now); ok {
				if w := next.Sub(now); w > maxWait {
					return nil, &WaitError{Provider: p.Name, Resource: class.Resource, Until: next, Wait: w, MaxWait: maxWait}
				}
				if err := t.waitFor(ctx, next.Sub(now), &waited); err != nil {
					return nil, err
				}
				continue
			}
			return nil, t.noCredential(p, pool, now)
		}
		best := time.Duration(-1)
		var tied []*creds.Credential
		for _, c := range cands {
			w, err := t.waitOf(ctx, p, c, class, policy, sec, cost, now)
			if err != nil {
				return nil, err
			}
			switch {
			case best < 0 || w < best:
				best, tied = w, append(tied[:0], c)
			case w == best:
				tied = append(tied, c)
			}
		}
		if best > maxWait {
			return nil, &WaitError{Provider: p.Name, Resource: class.Resource, Credential: tied[0].Masked(),
				Until: now.Add(best), Wait: best, MaxWait: maxWait}
		}
		if best > 0 {
			if err := t.waitFor(ctx, best, &waited); err != nil {
				return nil, err
			}
			continue
		}
		c := pool.Next(tied)
		if !t.opts.SkipValidation && t.validate(ctx, p, c) {
			continue // its owner is now known (or it was rejected): choose again
		}
		g := &grant{cred: c, class: class,
			bucket: BucketID{Provider: p.Name, Owner: c.BucketOwner(), Resource: class.Resource},
			owner:  OwnerID{Provider: p.Name, Owner: c.BucketOwner()}}
		ok, err := t.reserve(ctx, g, policy, sec, cost, now)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // another request took it first
		}
		g.waited = waited
		if g.waited > 0 {
			t.emit(Event{Kind: EventWaited, Provider: p.Name, Resource: class.Resource, Credential: c.Masked(), Wait: g.waited})
			if t.opts.Metrics == nil {
				t.log.Debug("waited for quota", "provider", p.Name, "resource", class.Resource, "credential", c.Masked(), "wait", g.waited)
			}
		}
		return g, nil
	}
}

// waitOf is how long credential c must wait for a request of this class.
func (t *Transport) waitOf(ctx context.Context, p *provider.Provider, c *creds.Credential, class provider.Request,
	policy quota.Policy, sec quota.Secondary, cost quota.Cost, now time.Time) (time.Duration, error) {
	owner := c.BucketOwner()
	var w time.Duration
	err := t.state.UpdateOwner(ctx, OwnerID{Provider: p.Name, Owner: owner}, func(o *quota.Owner) error {
		w = o.Wait(sec, cost, now)
		return nil
	})
	if err != nil {
		return 0, err
	}
	if class.Free {
		return w, nil
	}
	err = t.state.UpdateBucket(ctx, BucketID{Provider: p.Name, Owner: owner, Resource: class.Resource}, func(b *quota.Bucket) error {
		w = max(w, b.Wait(policy, now))
		return nil
	})
	return w, err
}

// reserve takes the owner's permission and the bucket's quota for g. It
// reports false, holding nothing, when either has gone to another request
// since waitOf looked.
func (t *Transport) reserve(ctx context.Context, g *grant, policy quota.Policy, sec quota.Secondary, cost quota.Cost, now time.Time) (bool, error) {
	lease := t.opts.Lease
	ownerOK := false
	err := t.state.UpdateOwner(ctx, g.owner, func(o *quota.Owner) error {
		ownerOK = o.Reserve(sec, cost, now, t.holder, lease) == 0
		return nil
	})
	if err != nil || !ownerOK {
		return false, err
	}
	bucketOK := false
	err = t.state.UpdateBucket(ctx, g.bucket, func(b *quota.Bucket) error {
		if g.class.Free {
			// Free requests (GitHub's /rate_limit) hold a slot only so
			// that the answer's release balances.
			b.Holders = ensureHolder(b.Holders, t.holder, now.Add(lease))
			bucketOK = true
			return nil
		}
		bucketOK = b.Reserve(policy, now, t.holder, lease) == 0
		return nil
	})
	if err == nil && bucketOK {
		return true, nil
	}
	if sec.MaxConcurrent > 0 {
		_ = t.state.UpdateOwner(ctx, g.owner, func(o *quota.Owner) error {
			o.Release(t.holder, 1)
			return nil
		})
	}
	return false, err
}

func ensureHolder(h map[string]quota.Holder, holder string, until time.Time) map[string]quota.Holder {
	if h == nil {
		h = make(map[string]quota.Holder, 1)
	}
	x := h[holder]
	x.N++
	x.Until = until
	h[holder] = x
	return h
}

// waitFor sleeps d, or less when some request's answer changes the state,
// or until ctx ends; it adds the time slept to *waited.
func (t *Transport) waitFor(ctx context.Context, d time.Duration, waited *time.Duration) error {
	changed := t.changed()
	start := t.opts.Now()
	timer := time.NewTimer(d)
	defer timer.Stop()
	defer func() { *waited += t.opts.Now().Sub(start) }()
	select {
	case <-timer.C:
	case <-changed:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// validate learns the owner of credential c before its first use, so
// tokens of one account share one bucket: one request per credential,
// ever; concurrent callers wait for the same answer. It reports whether it
// sent that request (the caller then chooses again, with the owner known
// or the credential rejected).
func (t *Transport) validate(ctx context.Context, p *provider.Provider, c *creds.Credential) bool {
	if c.Kind() != creds.Static || c.Owner().Key() != "" {
		return false
	}
	if _, ok := p.ValidationURL(); !ok {
		return false
	}
	v, loaded := t.validating.LoadOrStore(c, &validation{done: make(chan struct{})})
	val := v.(*validation)
	if loaded {
		select {
		case <-val.done:
			return false // already tried; a failure leaves a per-token bucket
		case <-ctx.Done():
			return false
		}
	}
	obs := &observingTransport{t: t, p: p}
	_, err := creds.Validate(ctx, obs, p, c)
	if err != nil {
		if errors.Is(err, creds.ErrInvalid) {
			t.emit(Event{Kind: EventCredentialInvalid, Provider: p.Name, Credential: c.Masked(), Status: http.StatusUnauthorized})
			t.log.Warn("credential rejected", "provider", p.Name, "credential", c.Masked())
		} else {
			t.log.Debug("credential validation failed", "provider", p.Name, "credential", c.Masked(), "err", err)
		}
	}
	if obs.seen {
		// The answer also told the quota of the bucket it spent
		// from, now filed under the owner it named.
		id := BucketID{Provider: p.Name, Owner: c.BucketOwner(), Resource: obs.resource}
		_ = t.state.UpdateBucket(ctx, id, func(b *quota.Bucket) error {
			b.Observe(&obs.reading, obs.at, "", 0, true, defaultsFor(p))
			return nil
		})
	}
	close(val.done)
	t.wake()
	return true
}

type validation struct{ done chan struct{} }

// observingTransport sends a validation request and keeps its rate-limit
// reading: the first answer for a credential also tells its quota.
type observingTransport struct {
	t        *Transport
	p        *provider.Provider
	seen     bool
	reading  headers.Reading
	at       time.Time
	resource string
}

func (o *observingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := o.t.base.RoundTrip(req)
	if err != nil || resp.StatusCode == http.StatusUnauthorized {
		return resp, err
	}
	o.at = o.t.opts.Now()
	o.reading = quota.Read(resp.StatusCode, resp.Header, nil, o.at, o.t.skew(o.p, resp.Header, o.at))
	o.resource = o.p.Classify(req.Method, req.URL).Resource
	o.seen = true
	return resp, nil
}

func (t *Transport) noCredential(p *provider.Provider, pool *creds.Pool, now time.Time) error {
	e := &NoCredentialError{Provider: p.Name}
	for _, c := range pool.Credentials() {
		st := c.Status(now)
		e.Invalid = append(e.Invalid, c.Masked()+": "+st.Reason)
	}
	return e
}
