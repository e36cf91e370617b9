package creds

import (
	"slices"
	"sync"
	"time"
)

// Pool is the set of credentials of one provider. It is safe for concurrent
// use.
type Pool struct {
	provider string
	creds    []*Credential // by index

	mu   sync.Mutex
	last int // index of the credential Next returned last; 0 before the first
}

// NewPool returns a pool of the given credentials, ordered by index.
func NewPool(providerName string, creds ...*Credential) *Pool {
	cs := slices.Clone(creds)
	slices.SortStableFunc(cs, func(a, b *Credential) int { return a.index - b.index })
	return &Pool{provider: providerName, creds: cs}
}

// Provider returns the name of the pool's provider.
func (p *Pool) Provider() string { return p.provider }

// Len returns the number of credentials.
func (p *Pool) Len() int { return len(p.creds) }

// Credentials returns every credential, in index order.
func (p *Pool) Credentials() []*Credential { return slices.Clone(p.creds) }

// ByIndex returns the credential with the given index, or nil.
func (p *Pool) ByIndex(index int) *Credential {
	for _, c := range p.creds {
		if c.index == index {
			return c
		}
	}
	return nil
}

// Eligible returns the credentials that may be used at now (not invalid, not
// exhausted past now), in index order. Among them the transport picks the one
// its quota state lets go soonest.
func (p *Pool) Eligible(now time.Time) []*Credential {
	return p.AppendEligible(make([]*Credential, 0, len(p.creds)), now)
}

// AppendEligible appends the credentials Eligible returns to dst and
// returns the extended slice, so a hot path can reuse a buffer.
func (p *Pool) AppendEligible(dst []*Credential, now time.Time) []*Credential {
	for _, c := range p.creds {
		if c.Eligible(now) {
			dst = append(dst, c)
		}
	}
	return dst
}

// EarliestEligible returns the earliest time at or after now when some
// credential is eligible: now when one already is, else the soonest end of an
// exhaustion. ok is false when every credential is invalid (or the pool is
// empty): no amount of waiting helps.
func (p *Pool) EarliestEligible(now time.Time) (t time.Time, ok bool) {
	for _, c := range p.creds {
		st := c.Status(now)
		switch st.State {
		case Invalid:
			continue
		case Exhausted:
			if !ok || st.Until.Before(t) {
				t, ok = st.Until, true
			}
		default:
			return now, true
		}
	}
	return t, ok
}

// Next breaks a tie: among candidates that can all go equally soon it returns
// the first one after the credential Next returned last, in index order,
// wrapping around, so equal credentials take turns. It returns nil for no
// candidates.
func (p *Pool) Next(candidates []*Credential) *Credential {
	if len(candidates) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var after, lowest *Credential
	for _, c := range candidates {
		if c.index > p.last && (after == nil || c.index < after.index) {
			after = c
		}
		if lowest == nil || c.index < lowest.index {
			lowest = c
		}
	}
	pick := after
	if pick == nil {
		pick = lowest
	}
	p.last = pick.index
	return pick
}

// Buckets groups the credentials by [Credential.BucketOwner], in index order
// of each group's first credential. Credentials in one group spend one
// server-side bucket: pooling them adds no quota.
func (p *Pool) Buckets() [][]*Credential {
	var groups [][]*Credential
	pos := map[string]int{}
	for _, c := range p.creds {
		key := c.BucketOwner()
		i, ok := pos[key]
		if !ok {
			i = len(groups)
			pos[key] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], c)
	}
	return groups
}
