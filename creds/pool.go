package creds

import (
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Pool is the set of credentials of one provider. It is safe for concurrent
// use.
type Pool struct {
	provider string
	creds    []*Credential // by index

	mu sync.Mutex
	// last is the index of the credential AppendTurn put first last
	// time; before the first call, that of a credential drawn at random
	// (0, the first turn starting at the first credential, in tests that
	// need the order known).
	last int
}

// NewPool returns a pool of the given credentials, ordered by index. Its
// turns (AppendTurn) start at a credential drawn at random: processes
// given the same credentials then prefer different ones at the same
// moments instead of all queueing on the same bucket.
func NewPool(providerName string, creds ...*Credential) *Pool {
	cs := slices.Clone(creds)
	slices.SortStableFunc(cs, func(a, b *Credential) int { return a.index - b.index })
	p := &Pool{provider: providerName, creds: cs}
	if len(cs) > 0 {
		p.last = cs[rand.IntN(len(cs))].index
	}
	return p
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

// Eligible returns the credentials that may be used at now (not invalid),
// in index order. Among them the transport picks the one its quota state
// lets go soonest.
func (p *Pool) Eligible(now time.Time) []*Credential {
	dst := make([]*Credential, 0, len(p.creds))
	for _, c := range p.creds {
		if c.Eligible(now) {
			dst = append(dst, c)
		}
	}
	return dst
}

// AppendTurn appends the credentials that may be used at now to dst, in
// the order that makes equal credentials take turns: starting after the
// one the previous call started with (the first call, after one drawn at
// random by NewPool), in index order, wrapping around. The
// transport offers them to the quota state in this order, which picks the
// first of those that can go soonest. It returns the extended slice, so a
// hot path can reuse a buffer.
func (p *Pool) AppendTurn(dst []*Credential, now time.Time) []*Credential {
	p.mu.Lock()
	last := p.last
	start := 0
	for i, c := range p.creds {
		if c.index > last {
			start = i
			break
		}
	}
	p.last = 0
	n := len(p.creds)
	for k := range n {
		c := p.creds[(start+k)%n]
		if !c.Eligible(now) {
			continue
		}
		if p.last == 0 {
			p.last = c.index
		}
		dst = append(dst, c)
	}
	if p.last == 0 {
		p.last = last
	}
	p.mu.Unlock()
	return dst
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

// AppendBuckets appends to dst the bucket owner (see
// [Credential.BucketOwner]) of each credential that may be used at now,
// each once, in index order, and returns the extended slice: the distinct
// buckets the pool can spend, allocation-free with a buffer of the
// caller's.
func (p *Pool) AppendBuckets(dst []string, now time.Time) []string {
	for _, c := range p.creds {
		c.st.mu.Lock()
		st := c.st.statusAt(now).State
		owner := c.st.ownerKey
		c.st.mu.Unlock()
		if st == Invalid {
			continue
		}
		if owner == "" {
			owner = c.identity
		}
		if !slices.Contains(dst, owner) {
			dst = append(dst, owner)
		}
	}
	return dst
}
