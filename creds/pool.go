package creds

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Pool is the set of credentials of one provider. It is safe for concurrent
// use.
type Pool struct {
	provider string
	// creds are by index; replaced whole when an App finds an
	// installation, so readers need no lock.
	creds atomic.Pointer[[]*Credential]
	apps  []*App

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
	sortByIndex(cs)
	p := &Pool{provider: providerName}
	p.creds.Store(&cs)
	if len(cs) > 0 {
		p.last = cs[rand.IntN(len(cs))].index
	}
	return p
}

func sortByIndex(cs []*Credential) {
	slices.SortStableFunc(cs, func(a, b *Credential) int { return a.index - b.index })
}

// NewAppPool returns a pool of the given credentials and of the Apps'
// installations: those the Apps know now, and those they find later,
// which join the pool as they are found.
func NewAppPool(providerName string, creds []*Credential, apps ...*App) *Pool {
	all := slices.Clone(creds)
	for _, a := range apps {
		all = append(all, a.Credentials()...)
	}
	p := NewPool(providerName, all...)
	p.apps = apps
	for _, a := range apps {
		a.mu.Lock()
		a.pool = p
		a.mu.Unlock()
	}
	return p
}

// Apps returns the GitHub Apps whose installations are in the pool.
func (p *Pool) Apps() []*App { return p.apps }

// add puts an App's newly found installation in the pool.
func (p *Pool) add(c *Credential) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := append(slices.Clone(p.list()), c)
	sortByIndex(cs)
	p.creds.Store(&cs)
}

func (p *Pool) list() []*Credential { return *p.creds.Load() }

// Provider returns the name of the pool's provider.
func (p *Pool) Provider() string { return p.provider }

// Len returns the number of credentials.
func (p *Pool) Len() int { return len(p.list()) }

// Credentials returns every credential, in index order.
func (p *Pool) Credentials() []*Credential { return slices.Clone(p.list()) }

// ByIndex returns the credential with the given index, or nil.
func (p *Pool) ByIndex(index int) *Credential {
	for _, c := range p.list() {
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
	cs := p.list()
	dst := make([]*Credential, 0, len(cs))
	for _, c := range cs {
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
	cs := p.list()
	last := p.last
	start := 0
	for i, c := range cs {
		if c.index > last {
			start = i
			break
		}
	}
	p.last = 0
	n := len(cs)
	for k := range n {
		c := cs[(start+k)%n]
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
	for _, c := range p.list() {
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
	for _, c := range p.list() {
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
