package transport

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
)

// spend is what one request needs from the quota state: its owner's
// secondary limits and its bucket's quota.
type spend struct {
	owner  OwnerID
	bucket BucketID
	sec    quota.Secondary
	cost   quota.Cost
	policy quota.Policy
	free   bool // the server does not charge it (GitHub's /rate_limit)
}

// acquire picks the credential whose quota lets it go soonest, waits until
// then and reserves the quota. Among credentials that can go equally soon
// they take turns. It returns a *WaitError instead of waiting longer than
// the max wait, and ctx's error as soon as ctx ends.
func (t *Transport) acquire(ctx context.Context, req *http.Request, p *provider.Provider, pool *creds.Pool, class provider.Request, g *grant) error {
	policy, _ := t.policyFor(p)
	sec, cost := secondaryFor(p, class)
	maxWait := t.maxWait(p)
	sp := spend{sec: sec, cost: cost, policy: policy, free: class.Free}
	var waited time.Duration
	var buf [8]*creds.Credential
	var validated *creds.Credential // just validated: use it rather than validating the next one
	t.restore(ctx, p, pool)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		now := t.opts.Now()
		cands := pool.AppendEligible(buf[:0], now)
		if len(cands) == 0 {
			if next, ok := pool.EarliestEligible(now); ok {
				if w := next.Sub(now); w > maxWait {
					return &WaitError{Provider: p.Name, Resource: class.Resource, Until: next, Wait: w, MaxWait: maxWait}
				}
				if err := t.waitFor(ctx, next.Sub(now), &waited); err != nil {
					return err
				}
				continue
			}
			return t.noCredential(p, pool, now)
		}
		c := cands[0]
		if len(cands) > 1 {
			// Choose the credential that can go soonest; ties take
			// turns. (With one credential, reserving tells the wait.)
			best := time.Duration(-1)
			var tiedBuf [8]*creds.Credential
			tied := tiedBuf[:0]
			for _, cand := range cands {
				t.setCredential(&sp, p, cand, class)
				w, err := t.wait(ctx, &sp, now)
				if err != nil {
					return err
				}
				switch {
				case best < 0 || w < best:
					best, tied = w, append(tied[:0], cand)
				case w == best:
					tied = append(tied, cand)
				}
			}
			if best > maxWait {
				return &WaitError{Provider: p.Name, Resource: class.Resource, Credential: tied[0].Masked(),
					Until: now.Add(best), Wait: best, MaxWait: maxWait}
			}
			if best > 0 {
				if err := t.waitFor(ctx, best, &waited); err != nil {
					return err
				}
				continue
			}
			c = t.pickTied(req, pool, tied, validated)
		}
		if !t.opts.SkipValidation && t.validate(ctx, p, c) {
			validated = c
			continue // its owner is now known (or it was rejected): choose again
		}
		t.setCredential(&sp, p, c, class)
		w, err := t.reserve(ctx, &sp, now)
		if err != nil {
			return err
		}
		if w > 0 {
			if w > maxWait {
				return &WaitError{Provider: p.Name, Resource: class.Resource, Credential: c.Masked(),
					Until: now.Add(w), Wait: w, MaxWait: maxWait}
			}
			if err := t.waitFor(ctx, w, &waited); err != nil {
				return err
			}
			continue
		}
		*g = grant{cred: c, class: class, bucket: sp.bucket, owner: sp.owner, waited: waited}
		if waited > 0 {
			t.emit(Event{Kind: EventWaited, Provider: p.Name, Resource: class.Resource, Credential: c.Masked(), Wait: waited})
			t.log.Debug("waited for quota", "provider", p.Name, "resource", class.Resource, "credential", c.Masked(), "wait", waited)
		}
		return nil
	}
}

// pickTied takes turns among equally good credentials, except that one
// just validated is used at once (choosing again would otherwise validate
// every credential before the first request goes), and that a credential
// whose owner has the answer cached is preferred: its repeat is a free
// conditional request, another owner's a charged one.
func (t *Transport) pickTied(req *http.Request, pool *creds.Pool, tied []*creds.Credential, validated *creds.Credential) *creds.Credential {
	for _, c := range tied {
		if c == validated {
			return c
		}
	}
	if t.cache != nil && req.Method == http.MethodGet && len(tied) > 1 {
		seen := ""
		for _, c := range tied {
			owner := c.BucketOwner()
			if owner == seen {
				continue
			}
			seen = owner
			if t.cache.Has(req, owner) {
				return c
			}
		}
	}
	return pool.Next(tied)
}

func (t *Transport) setCredential(sp *spend, p *provider.Provider, c *creds.Credential, class provider.Request) {
	owner := c.BucketOwner()
	sp.owner = OwnerID{Provider: t.stateKey(p), Owner: owner}
	sp.bucket = BucketID{Provider: t.stateKey(p), Owner: owner, Resource: class.Resource}
}

// wait is how long the request must wait at now for the owner's secondary
// limits and the bucket's quota, without reserving.
func (t *Transport) wait(ctx context.Context, sp *spend, now time.Time) (time.Duration, error) {
	if m, ok := t.state.(*memoryState); ok {
		return m.wait(sp, now), nil
	}
	return t.waitShared(ctx, *sp, now)
}

// waitShared is wait for a shared State; sp is a copy so the memory fast
// path's spend never escapes to the heap.
func (t *Transport) waitShared(ctx context.Context, sp spend, now time.Time) (time.Duration, error) {
	var w time.Duration
	err := t.state.UpdateOwner(ctx, sp.owner, func(o *quota.Owner) error {
		w = o.Wait(sp.sec, sp.cost, now)
		return nil
	})
	if err != nil || sp.free {
		return w, err
	}
	err = t.state.UpdateBucket(ctx, sp.bucket, func(b *quota.Bucket) error {
		w = max(w, b.Wait(sp.policy, now))
		return nil
	})
	return w, err
}

// reserve takes the owner's permission and the bucket's quota at now, or
// returns how long to wait (holding nothing) when either says no.
func (t *Transport) reserve(ctx context.Context, sp *spend, now time.Time) (time.Duration, error) {
	if m, ok := t.state.(*memoryState); ok {
		return m.reserve(sp, now, t.holder, t.opts.Lease), nil
	}
	return t.reserveShared(ctx, *sp, now)
}

// reserveShared is reserve for a shared State.
func (t *Transport) reserveShared(ctx context.Context, sp spend, now time.Time) (time.Duration, error) {
	lease := t.opts.Lease
	var w time.Duration
	err := t.state.UpdateOwner(ctx, sp.owner, func(o *quota.Owner) error {
		w = o.Reserve(sp.sec, sp.cost, now, t.holder, lease)
		return nil
	})
	if err != nil || w > 0 {
		return w, err
	}
	err = t.state.UpdateBucket(ctx, sp.bucket, func(b *quota.Bucket) error {
		if sp.free {
			// A free request holds a slot only so that its answer's
			// release balances.
			b.Holders = ensureHolder(b.Holders, t.holder, now.Add(lease))
			return nil
		}
		w = b.Reserve(sp.policy, now, t.holder, lease)
		return nil
	})
	if err == nil && w == 0 {
		return 0, nil
	}
	if sp.sec.MaxConcurrent > 0 {
		_ = t.state.UpdateOwner(ctx, sp.owner, func(o *quota.Owner) error {
			o.Release(t.holder, 1)
			return nil
		})
	}
	return w, err
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
		default:
		}
		// Another request is validating it: wait for the answer, then
		// choose again (it may have been rejected).
		select {
		case <-val.done:
			return true
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
	t.remember(ctx, p, c, t.opts.Now())
	if obs.seen {
		// The answer also told the quota of the bucket it spent
		// from, now filed under the owner it named.
		id := BucketID{Provider: t.stateKey(p), Owner: c.BucketOwner(), Resource: obs.resource}
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

// restore applies, once per pool, what the credential store remembers:
// rejected tokens stay rejected and known owners need no new validation.
func (t *Transport) restore(ctx context.Context, p *provider.Provider, pool *creds.Pool) {
	if t.opts.Credentials == nil {
		return
	}
	v, _ := t.restored.LoadOrStore(pool, &sync.Once{})
	v.(*sync.Once).Do(func() {
		now := t.opts.Now()
		for _, c := range pool.Credentials() {
			if c.Kind() == creds.Anonymous {
				continue
			}
			rec, ok, err := t.opts.Credentials.LoadCredential(ctx, t.stateKey(p), c.ID())
			if err != nil {
				t.log.Warn("reading remembered credential state", "provider", p.Name, "credential", c.Masked(), "err", err)
				continue
			}
			switch {
			case !ok:
			case rec.Invalid:
				c.MarkInvalid(rec.Reason, now)
			case rec.OwnerID != "" || rec.OwnerName != "":
				c.SetOwner(provider.Owner{ID: rec.OwnerID, Name: rec.OwnerName})
				c.MarkValidated(now)
			}
		}
	})
}

// remember saves what is known of c for other processes and restarts.
func (t *Transport) remember(ctx context.Context, p *provider.Provider, c *creds.Credential, now time.Time) {
	if t.opts.Credentials == nil || c.Kind() == creds.Anonymous {
		return
	}
	st := c.Status(now)
	rec := CredentialRecord{ValidatedAt: now}
	if st.State == creds.Invalid {
		rec.Invalid, rec.Reason = true, st.Reason
	} else if o := c.Owner(); o.Key() != "" {
		rec.OwnerID, rec.OwnerName = o.ID, o.Name
	} else {
		return
	}
	if err := t.opts.Credentials.SaveCredential(ctx, t.stateKey(p), c.ID(), rec); err != nil {
		t.log.Warn("saving credential state", "provider", p.Name, "credential", c.Masked(), "err", err)
	}
}
