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
//     owner, before anything reaches the caller;
//   - a credential with one resource owner (a GitHub fine-grained token:
//     creds.Credential.OneResourceOwner) is known to own the owner whose
//     private repository it answered (see sightAnswered for the evidence),
//     and is then not sent about another owner's repositories while any
//     other credential may see them. Until their owners are known, such
//     tokens that answered about no owner probe one request at a time (the
//     first owner costs at most K−1 wrong answers, the next K−2, ...: K·(K−1)/2
//     for K tokens, not K·(K−1)); one that answered about another owner goes
//     only when no fresh one may; none goes about an owner another such
//     token is known to own. That it answered about an owner may mean only
//     that it read a public repository: its 404 there goes again.
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
	// AddBlind records that credential id cannot see owner. An owner
	// written "=O" (no account name begins with "=") records instead that
	// O is the one resource owner of credential id: it sees no other
	// owner's private repositories.
	AddBlind(ctx context.Context, provider, id, owner string) error
}

// ownsMark prefixes, in a SightStore, the one resource owner of a
// credential.
const ownsMark = "="

// sightReload is how often a lane reads what the fleet learnt, at most,
// when a request meets an owner it knows nothing of.
const sightReload = 10 * time.Second

// sight is what a lane knows of which credentials see which owners.
type sight struct {
	mu     sync.Mutex
	sees   map[string]map[string]bool // owner -> credential ID -> answered about it
	blind  map[string]map[string]bool // owner -> credential ID -> cannot see it
	probes map[string]map[string]bool // owner -> credential ID -> a probe in flight
	// owns is the one resource owner of a credential that has one
	// (OneResourceOwner), once known: credential ID -> owner.
	owns map[string]string
	// busy is, for a credential with one resource owner not yet known
	// that has answered about no owner (fresh), the owner it is claimed to
	// probe, until its request ends or learns the owner's credential. One
	// request at a time probes with fresh credentials.
	busy map[string]string
	// answered: credential ID -> it answered 2xx about some owner.
	answered map[string]bool
	// owned counts, by owner, the credentials known to own it (owns).
	owned map[string]int
	// wake is closed (and replaced) when a probe ends.
	wake   chan struct{}
	loaded time.Time
	// firstLoad is closed once the first load from the SightStore is
	// done; nil before it began.
	firstLoad chan struct{}
}

func (s *sight) init() {
	if s.sees == nil {
		s.sees, s.blind, s.probes = map[string]map[string]bool{}, map[string]map[string]bool{}, map[string]map[string]bool{}
		s.owns, s.busy, s.answered, s.owned = map[string]string{}, map[string]string{}, map[string]bool{}, map[string]int{}
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
		if len(ids) == 0 {
			delete(m, owner)
		}
	}
}

// unclaimLocked gives back c's probe slot on owner. Must hold s.mu.
func (s *sight) unclaimLocked(owner, id string) {
	mark(s.probes, owner, id, false)
	s.unbusyLocked(owner, id)
}

// unbusyLocked ends c's claim as the one owner it probes. Must hold s.mu.
func (s *sight) unbusyLocked(owner, id string) {
	if s.busy[id] == owner {
		delete(s.busy, id)
	}
}

// freshLocked reports whether c has one resource owner, not yet known, and
// has answered about no owner: a probe with it may find its owner. Must
// hold s.mu.
func (s *sight) freshLocked(c *creds.Credential) bool {
	_, known := s.owns[c.ID()]
	return c.OneResourceOwner() && !known && !s.answered[c.ID()]
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
	if s.blind[owner][c.ID()] {
		return blindToOwner
	}
	if c.OneResourceOwner() {
		if o, ok := s.owns[c.ID()]; ok {
			if o == owner {
				return seesOwner
			}
			// Its one resource owner is another: it sees only the
			// owner's public repositories, which any credential sees.
			return blindToOwner
		}
		if s.owned[owner] > 0 {
			// Another token owns it: what this one answered about it
			// was most likely public (unless both are that owner's).
			return unknownSight
		}
	}
	if s.sees[owner][c.ID()] {
		return seesOwner
	}
	return unknownSight
}

// weakLocked reports whether c is a one-owner credential whose owner is
// not known: that it answered about an owner may mean only that it read a
// public repository. Must hold s.mu.
func (s *sight) weakLocked(c *creds.Credential) bool {
	_, known := s.owns[c.ID()]
	return c.OneResourceOwner() && !known
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
	// notFound: a tried credential answered 404 (not 403).
	notFound bool
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
		var sees, free, later, unknown []*creds.Credential
		// Fresh one-owner tokens look for their owners one request at a
		// time: while one is out (or answered 404 and its request goes
		// again), the others wait for what it finds, which may say
		// whose they are. This request's own 404s do not hold it.
		exploring := false
		for id := range s.busy {
			exploring = exploring || !slices.ContainsFunc(r.tried, func(c *creds.Credential) bool { return c.ID() == id })
		}
		freshWaits := false
		for _, c := range eligible {
			if slices.Contains(r.tried, c) {
				continue
			}
			switch s.ofLocked(c, r.owner) {
			case seesOwner:
				sees = append(sees, c)
			case unknownSight:
				unknown = append(unknown, c)
				switch {
				case s.probes[r.owner][c.ID()]:
				case c.OneResourceOwner() && s.answered[c.ID()]:
					// It answered about another owner, likely its
					// own: asked only when no other may go.
					later = append(later, c)
				case exploring && s.freshLocked(c):
					freshWaits = true
				default:
					free = append(free, c)
				}
			}
		}
		if len(free) == 0 && len(sees) == 0 && !freshWaits {
			free = later
		}
		if slices.ContainsFunc(sees, func(c *creds.Credential) bool { return s.owns[c.ID()] == r.owner }) {
			// A token is known to own the owner: another one-owner
			// token is likely another's (a second one on the same
			// account is found on an owner not known yet).
			free = slices.DeleteFunc(free, (*creds.Credential).OneResourceOwner)
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
				if s.freshLocked(c) {
					s.busy[c.ID()] = r.owner
				}
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
			s.unclaimLocked(r.owner, c.ID())
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
		r.notFound = r.notFound || status == http.StatusNotFound
		x.o.hidden = x.anotherMaySee()
		return
	}
	x.releaseClaim()
	switch {
	case status == 0:
	case status < 400:
		var learnt []*creds.Credential
		owns := false
		s.mu.Lock()
		s.init()
		mark(s.sees, r.owner, c.ID(), true)
		s.answered[c.ID()] = true
		if _, known := s.owns[c.ID()]; !known && c.OneResourceOwner() && r.notFound {
			// What counts as evidence of a one-owner token's owner: it
			// answered about a repository another credential of the
			// pool was just answered 404 about. A public repository is
			// seen by every token (GitHub lets a fine-grained token read
			// any public repository), so a 2xx alone says nothing of
			// whose private repositories it sees; a 404 from another
			// token then a 2xx says the repository exists and is
			// private, so its owner is the token's one resource owner.
			// A 403 is not evidence: it may be an organisation's SAML or
			// IP policy, or a limit, about a public repository too.
			s.owns[c.ID()] = r.owner
			s.owned[r.owner]++
			owns = true
		}
		for _, b := range r.tried {
			// b answered 404 about a repository c answered: b does not
			// see the owner's private repositories, whatever it answered
			// about the owner before (a one-owner token may have read a
			// public one).
			if st := s.ofLocked(b, r.owner); st == unknownSight || st == seesOwner && s.weakLocked(b) {
				mark(s.sees, r.owner, b.ID(), false)
				mark(s.blind, r.owner, b.ID(), true)
				learnt = append(learnt, b)
			}
		}
		s.mu.Unlock()
		x.releaseTried()
		if owns {
			x.t.log.Info("credential's one resource owner", "provider", x.l.p.Name, "credential", c.Masked(), "owner", r.owner)
			if ss, ok := x.t.opts.Credentials.(SightStore); ok {
				if err := ss.AddBlind(context.WithoutCancel(x.ctx), x.t.stateKey(x.l.p), c.ID(), ownsMark+r.owner); err != nil {
					x.t.log.Warn("saving what a credential sees", "provider", x.l.p.Name, "err", err)
				}
			}
		}
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
		// A 404 from a credential known to see the owner is the answer
		// (the repository does not exist); from a one-owner token that
		// may have read only the owner's public repositories it goes
		// again with another.
		known := s.ofLocked(c, r.owner) == seesOwner && !s.weakLocked(c)
		if !known && s.weakLocked(c) {
			// Not sent about the owner again but as a probe, until
			// another's answer says whether it sees it.
			mark(s.sees, r.owner, c.ID(), false)
		}
		s.mu.Unlock()
		if known || !x.o.replayable || slices.Contains(r.tried, c) {
			return
		}
		r.tried = append(r.tried, c)
		r.notFound = r.notFound || status == http.StatusNotFound
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
		s.unclaimLocked(r.owner, c.ID())
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
		s.unclaimLocked(r.owner, c.ID())
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
	first := s.firstLoad
	if due {
		s.loaded = now
		if first == nil {
			s.firstLoad = make(chan struct{})
			defer close(s.firstLoad)
		}
	}
	s.mu.Unlock()
	if !due {
		// What the fleet learnt is loaded before this process's first
		// requests choose: a request that came while the first load was
		// under way waits for it. A process's first requests come
		// together, and those that went uninformed sent tokens about
		// accounts the fleet knew they cannot see.
		if first != nil {
			select {
			case <-first:
			case <-x.ctx.Done():
			}
		}
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
			if own, ok := strings.CutPrefix(o, ownsMark); ok {
				if _, known := s.owns[id]; !known {
					s.owns[id] = own
					s.owned[own]++
					mark(s.sees, own, id, true)
				}
				continue
			}
			mark(s.blind, o, id, true)
		}
	}
	s.mu.Unlock()
}
