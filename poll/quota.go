package poll

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/transport"
)

// TransportQuota is the QuotaSource of a rate-keeping transport: a URL's
// bucket is its provider and resource (GitHub core, search…), and its quota
// is the most any usable credential of the provider has left of that
// resource, from the transport's state (transport.Status). When the state
// knows nothing yet, it reads the provider's free status endpoint once
// (transport.ReadQuota: GitHub's /rate_limit), spending nothing; a provider
// without one has an unknown quota until its first answer.
// A URL no provider owns has no bucket and an unknown quota.
func TransportQuota(t *transport.Transport) QuotaSource {
	return &transportQuota{t: t, refreshed: map[string]bool{}}
}

type transportQuota struct {
	t         *transport.Transport
	mu        sync.Mutex
	refreshed map[string]bool
}

func (q *transportQuota) Bucket(u *url.URL) string {
	p := q.t.Registry().Match(u)
	if p == nil {
		return ""
	}
	return p.Name + "/" + p.Resource(http.MethodGet, u)
}

func (q *transportQuota) Quota(ctx context.Context, u *url.URL, now time.Time) (Quota, error) {
	p := q.t.Registry().Match(u)
	if p == nil {
		return Quota{}, nil
	}
	resource := p.Resource(http.MethodGet, u)
	best, err := q.best(ctx, p.Name, resource, now)
	if err != nil || best.Known {
		return best, err
	}
	q.mu.Lock()
	done := q.refreshed[p.Name]
	q.refreshed[p.Name] = true
	q.mu.Unlock()
	if done {
		return best, nil
	}
	// Read where it is free: asking who owns each token would spend a
	// request of the quota it guards.
	if err := q.t.ReadQuota(ctx, p.Name); err != nil {
		return Quota{}, err
	}
	return q.best(ctx, p.Name, resource, now)
}

// best returns the largest remaining quota of resource among the
// provider's usable credentials.
func (q *transportQuota) best(ctx context.Context, providerName, resource string, now time.Time) (Quota, error) {
	st, err := q.t.Status(ctx, now, providerName)
	if err != nil {
		return Quota{}, err
	}
	var best Quota
	for _, c := range st {
		if c.State == creds.Invalid.String() {
			continue
		}
		for _, r := range c.Resources {
			if r.Resource != resource || r.Remaining == nil || r.Assumed {
				continue
			}
			cand := Quota{Known: true, Remaining: *r.Remaining, Limit: -1, Resource: resource}
			if r.Limit != nil {
				cand.Limit = *r.Limit
			}
			if r.Reset != nil {
				cand.Reset = *r.Reset
				if !cand.Reset.After(now) && cand.Limit > 0 {
					cand.Remaining = cand.Limit // the window has turned
				}
			}
			if !best.Known || cand.Remaining > best.Remaining {
				best = cand
			}
		}
	}
	return best, nil
}
