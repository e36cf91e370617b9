package transport

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
)

// Routing by owner. A credential may see only some of a provider's
// accounts: a GitHub App installation its own account's repositories, a
// fine-grained token one organisation's, a GitLab group token one
// group's. A request about a repository (provider.RepoOwner) goes to a
// credential that sees its owner:
//
//   - an App installation sees exactly its account, learnt from the App's
//     GET /app/installations (or GET /repos/O/R/installation for an owner
//     not among them: creds.App.For);
//   - any other credential sees an owner once it answered a request about
//     it (2xx, 304), and is blind to it once it answered 404 or 403 to a
//     request another credential then answered: never routed there again,
//     and the fleet is told (SightStore);
//   - a credential not known either way goes as a probe, one at a time per
//     owner and credential, so it costs at most one wrong answer; a 404 or
//     403 from it goes again, at once, with a credential that may see the
//     owner, before anything reaches the caller.
//
// Among the credentials that see the owner the pool picks, as always, the
// one that can go soonest. A request about no owner, a caller's own
// credential and a pool of one credential are not routed.

// SightStore keeps what the fleet learnt of which credentials cannot see
// which owners, per provider. A CredentialStore that is one too (the
// shared state over --db) shares it.
type SightStore interface {
	// LoadBlind returns, by credential ID, the owners each credential
	// cannot see.
	LoadBlind(ctx context.Context, provider string) (map[string][]string, error)
	// AddBlind records that credential id cannot see owner.
	AddBlind(ctx context.Context, provider, id, owner string) error
}

// sightReload is how often a lane reads what the fleet learnt, at most,
// when a request meets an owner it knows nothing of.
const sightReload = 10 * time.Second

// sight is what a lane knows of which credentials see which owners.
type sight struct {
	mu     sync.Mutex
	sees   map[string]map[string]bool // owner -> credential ID -> answered about it
	blind  map[string]map[string]bool // owner -> credential ID -> cannot see it
	probes map[string]map[string]bool // owner -> credential ID -> a probe in flight
	// wake is closed (and replaced) when a probe ends.
	wake   chan struct{}
	loaded time.Time
}

func (s *sight) init() {
	if s.sees == nil {
		s.sees, s.blind, s.probes = map[string]map[string]bool{}, map[string]map[string]bool{}, map[string]map[string]bool{}
		s.wake = make(chan struct{})
	}
}

func mark(m map[string]map[string]bool, owner, id string, v bool) {
	ids := m[owner]
	if ids == nil {
		if !v {
			return
		}
		ids = map[string]bool{}
		m[owner] = ids
	}
	if v {
		ids[id] = true
	} else {
		delete(ids, id)
	}
}

// seeing is what is known of one credential and one owner.
type seeing int

const (
	unknownSight seeing = iota
	seesOwner
	blindToOwner
)

// ofLocked says what is known of c and owner. Must hold s.mu.
func (s *sight) ofLocked(c *creds.Credential, owner string) seeing {
	if c.Kind() == creds.AppInstallation {
		if acc := c.Account(); acc != "" {
			if strings.EqualFold(acc, owner) {
				return seesOwner
			}
			return blindToOwner
		}
	}
	switch {
	case s.blind[owner][c.ID()]:
		return blindToOwner
	case s.sees[owner][c.ID()]:
		return seesOwner
	}
	return unknownSight
}

// ownerRoute is one exchange's routing by owner.
type ownerRoute struct {
	on          bool   // the request is routed by owner
	owner, repo string // lower-case owner, repository name
	looked      bool   // the App was asked for the owner's installation
	// claimed are the credentials not known to see the owner that this
	// request may probe it with (a probe slot each); once it goes, only
	// the one it goes with keeps its slot, until the answer.
	claimed []*creds.Credential
	// tried are the credentials that answered 404 or 403 in this
	// exchange; they are not asked again, and are blind to the owner if
	// another answers.
	tried []*creds.Credential
	// allowed are this attempt's credentials: those that see the owner,
	// and the claimed probe; nil: any.
	allowed []*creds.Credential
	// sent is the credential of the attempt in flight.
	sent *creds.Credential
	// triedHeld: the probe slots tried credentials kept are given back.
	triedHeld bool
}

// routeOwner decides, before each attempt, which credentials the request
// may go with. It asks the App for the owner's installation when none is
// known, and waits (within the max wait) while every credential that may
// see the owner is probing it for another request.
func (x *exchange) routeOwner() error {
	r := &x.sr
	if x.n == 1 && x.rt.only == nil && x.pool == x.l.pool && x.pool.Len() == 0 {
		// An App whose installations are to be found has none yet.
		for _, app := range x.pool.Apps() {
			app.For(x.ctx, "", "")
		}
	}
	if x.n == 1 {
		if x.rt.only != nil || x.pool != x.l.pool || (x.pool.Len() < 2 && len(x.pool.Apps()) == 0) {
			return nil
		}
		r.owner, r.repo = x.l.p.RepoOwner(x.req.URL)
		r.on = r.owner != ""
	}
	if !r.on {
		return nil
	}
	x.releaseClaim()
	s := &x.l.sight
	x.loadSight()
	var timer Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	start := x.t.opts.Now()
	for {
		now := x.t.opts.Now()
		eligible := x.pool.Eligible(now)
		s.mu.Lock()
		s.init()
		var sees, free, unknown []*creds.Credential
		for _, c := range eligible {
			if slices.Contains(r.tried, c) {
				continue
			}
			switch s.ofLocked(c, r.owner) {
			case seesOwner:
				sees = append(sees, c)
			case unknownSight:
				unknown = append(unknown, c)
				if !s.probes[r.owner][c.ID()] {
					free = append(free, c)
				}
			}
		}
		if len(sees) == 0 && !r.looked && len(x.pool.Apps()) > 0 {
			// No installation known on the owner's account: ask the
			// App (at most every few minutes per owner), then decide
			// again.
			s.mu.Unlock()
			r.looked = true
			for _, app := range x.pool.Apps() {
				app.For(x.ctx, r.owner, r.repo)
			}
			continue
		}
		wake := s.wake
		switch {
		case len(r.tried) > 0 && len(sees) > 0:
			// Going again after a 404: with one that sees the owner.
			r.allowed = sees
		case len(free) > 0:
			// A probe, with whichever of them can go soonest: the
			// others' slots come back when it goes.
			r.claimed = free
			for _, c := range free {
				mark(s.probes, r.owner, c.ID(), true)
			}
			r.allowed = append(sees, free...)
		case len(sees) > 0:
			r.allowed = sees
		case len(unknown) == 0:
			// Nobody may see the owner: whatever goes, its answer is
			// the answer (a 404 for a repository that does not exist
			// or is seen by none).
			r.allowed = nil
			if len(r.tried) > 0 {
				r.allowed = r.tried[len(r.tried)-1:]
			}
		}
		s.mu.Unlock()
		if len(free) > 0 || len(sees) > 0 || len(unknown) == 0 {
			if timer != nil {
				// It waited for a probe: the max wait bounds this wait
				// too. (A request that did not wait stays one that has
				// not: the shared State decides those on its view.)
				x.waited += x.t.opts.Now().Sub(start)
			}
			return nil
		}
		// Every credential that may see the owner is probing it: its
		// answer comes in about a round trip.
		left := x.maxWait() - x.waited - x.t.opts.Now().Sub(start)
		if left <= 0 {
			rtt := x.l.roundTrip()
			return &WaitError{Provider: x.l.p.Name, Resource: x.class.Resource, Until: now.Add(rtt), Wait: rtt, MaxWait: x.maxWait(), t: x.t}
		}
		if timer == nil {
			timer = x.t.opts.Clock.NewTimer(left)
		}
		select {
		case <-wake:
		case <-timer.C():
		case <-x.ctx.Done():
			return x.ctx.Err()
		}
	}
}

// filter keeps, of the candidates, those the route allows. When none of
// them is (the allowed ones became invalid since routeOwner), it keeps
// them all: a wrong answer is better than no credential at all.
func (r *ownerRoute) filter(dst []*creds.Credential) []*creds.Credential {
	if !r.on || r.allowed == nil {
		return dst
	}
	k := 0
	for i, c := range dst {
		if slices.Contains(r.allowed, c) {
			dst[k], dst[i] = dst[i], dst[k]
			k++
		}
	}
	if k == 0 {
		return dst
	}
	return dst[:k]
}

// sightSent notes the credential the attempt goes with: a claimed probe
// that was not chosen is given back.
func (x *exchange) sightSent() {
	r := &x.sr
	if !r.on {
		return
	}
	r.sent = x.grant.cred
	if len(r.claimed) == 0 {
		return
	}
	s := &x.l.sight
	s.mu.Lock()
	kept := r.claimed[:0]
	for _, c := range r.claimed {
		if c == r.sent {
			kept = append(kept, c)
		} else {
			mark(s.probes, r.owner, c.ID(), false)
		}
	}
	r.claimed = kept
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
}

// sightAnswered learns from the attempt's answer (answered: an answer
// came) and says whether the request goes again with another credential:
// a 404 or 403 from a credential not known to see the owner, when one
// that may is left.
func (x *exchange) sightAnswered(answered bool) {
	r := &x.sr
	if !r.on || r.sent == nil {
		return
	}
	c := r.sent
	r.sent = nil
	status := 0
	if answered && !x.o.limited {
		status = x.s.resp.StatusCode
	}
	s := &x.l.sight
	if status == http.StatusUnauthorized && !x.o.rejected && !x.l.p.MayRejectCredential(status, x.s.resp.Header, x.s.prefix) {
		// Hugging Face answers a repository the token cannot see with a
		// 401 that is not about the token: a 404 like GitHub's.
		status = http.StatusNotFound
	}
	if (status == http.StatusNotFound || status == http.StatusForbidden) && x.o.replayable && slices.Contains(r.claimed, c) {
		// A probe answered 404 or 403: it keeps its slot until another
		// credential's answer tells whether it cannot see the owner or
		// the resource is missing, so no other request probes with it
		// meanwhile.
		r.claimed = slices.DeleteFunc(r.claimed, func(k *creds.Credential) bool { return k == c })
		r.tried = append(r.tried, c)
		x.o.hidden = x.anotherMaySee()
		return
	}
	x.releaseClaim()
	switch {
	case status == 0:
	case status < 400:
		var learnt []*creds.Credential
		s.mu.Lock()
		s.init()
		mark(s.sees, r.owner, c.ID(), true)
		for _, b := range r.tried {
			if s.ofLocked(b, r.owner) == unknownSight {
				mark(s.blind, r.owner, b.ID(), true)
				learnt = append(learnt, b)
			}
		}
		s.mu.Unlock()
		x.releaseTried()
		for _, b := range learnt {
			x.t.log.Info("credential cannot see owner", "provider", x.l.p.Name, "credential", b.Masked(), "owner", r.owner)
			if ss, ok := x.t.opts.Credentials.(SightStore); ok {
				if err := ss.AddBlind(context.WithoutCancel(x.ctx), x.t.stateKey(x.l.p), b.ID(), r.owner); err != nil {
					x.t.log.Warn("saving what a credential cannot see", "provider", x.l.p.Name, "err", err)
				}
			}
		}
	case status == http.StatusNotFound || status == http.StatusForbidden:
		s.mu.Lock()
		known := s.ofLocked(c, r.owner) == seesOwner
		s.mu.Unlock()
		if known || !x.o.replayable || slices.Contains(r.tried, c) {
			return
		}
		r.tried = append(r.tried, c)
		x.o.hidden = x.anotherMaySee()
	}
}

// releaseTried gives back the probe slots the request's credentials that
// answered 404 or 403 kept (see sightAnswered).
func (x *exchange) releaseTried() {
	r := &x.sr
	if r.triedHeld {
		return
	}
	r.triedHeld = true
	s := &x.l.sight
	s.mu.Lock()
	for _, c := range r.tried {
		mark(s.probes, r.owner, c.ID(), false)
	}
	if s.wake != nil {
		close(s.wake)
		s.wake = make(chan struct{})
	}
	s.mu.Unlock()
}

// anotherMaySee reports whether a credential not yet tried may see the
// owner.
func (x *exchange) anotherMaySee() bool {
	r, s := &x.sr, &x.l.sight
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range x.pool.Eligible(x.t.opts.Now()) {
		if !slices.Contains(r.tried, c) && s.ofLocked(c, r.owner) != blindToOwner {
			return true
		}
	}
	return false
}

// releaseClaim gives back the probe slots the request holds, waking the
// requests waiting for one.
func (x *exchange) releaseClaim() {
	r := &x.sr
	if len(r.claimed) == 0 {
		return
	}
	s := &x.l.sight
	s.mu.Lock()
	for _, c := range r.claimed {
		mark(s.probes, r.owner, c.ID(), false)
	}
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
	r.claimed = r.claimed[:0]
}

// loadSight reads what the fleet learnt, at most every sightReload.
func (x *exchange) loadSight() {
	ss, ok := x.t.opts.Credentials.(SightStore)
	if !ok {
		return
	}
	s, now := &x.l.sight, x.t.opts.Now()
	s.mu.Lock()
	due := s.loaded.IsZero() || now.Sub(s.loaded) >= sightReload
	if due {
		s.loaded = now
	}
	s.mu.Unlock()
	if !due {
		return
	}
	blind, err := ss.LoadBlind(x.ctx, x.t.stateKey(x.l.p))
	if err != nil {
		x.t.log.Warn("reading what credentials cannot see", "provider", x.l.p.Name, "err", err)
		return
	}
	s.mu.Lock()
	s.init()
	for id, owners := range blind {
		for _, o := range owners {
			mark(s.blind, o, id, true)
		}
	}
	s.mu.Unlock()
}
