package transport

import (
	"cmp"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/cache"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
)

// lane is everything that is fixed per provider, worked out once: the key
// of its state, its policy, secondary limits, waits and pauses, the
// default of a bucket that states nothing, the cache as its entity tags
// need it, and what its answers teach over time (the server's clock skew
// and its typical round trip). A request's exchange reads its lane; it
// never recomputes these.
type lane struct {
	p   *provider.Provider
	key string // the provider's part of bucket and owner keys
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

// laneFor returns p's lane, making it on first use.
func (t *Transport) laneFor(p *provider.Provider) *lane {
	if v, ok := t.lanes.Load(p); ok { // keyed by pointer: no allocation
		return v.(*lane)
	}
	v, _ := t.lanes.LoadOrStore(p, t.newLane(p))
	return v.(*lane)
}

func (t *Transport) newLane(p *provider.Provider) *lane {
	l := &lane{p: p, key: p.Name + " " + p.BaseURL().String(),
		maxWait:  cmp.Or(p.Limits.MaxWait, t.opts.MaxWait),
		maxPause: cmp.Or(p.Limits.MaxPause, t.opts.MaxPause),
		def:      quota.Default{Limit: int64(p.Limits.DefaultLimit), Window: p.Limits.DefaultWindow},
		cache:    t.cache.WithTagRule(p),
	}
	l.policy, l.policyErr = policyFor(t.opts.Policy, p)
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
		Cost: quota.Cost{Write: class.Write, Points: int64(class.Points), Endpoint: class.Endpoint, CreatesContent: class.CreatesContent}}
}

// answer is what reading r (nil: none) of a request sent at sent tells the
// quota state; jitter picks the point of an exponential penalty.
func (l *lane) answer(r *headers.Reading, counted bool, sent time.Time, jitter float64) quota.Answer {
	return quota.Answer{Reading: r, Counted: counted, Default: l.def, Jitter: jitter, Sent: sent,
		Secondary: l.secondary, MaxPause: l.maxPause}
}

// read takes an answer received at now for a request sent at sent: the
// round trip and the server's Date feed the lane's estimates, and the
// reading comes back on our clock (quota.Read, the one reader of headers).
func (l *lane) read(status int, h http.Header, prefix []byte, sent, now time.Time) headers.Reading {
	st, ok := headers.ServerTime(h)
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
