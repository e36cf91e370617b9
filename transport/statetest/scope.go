package statetest

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/transport"
)

// scoped is slot with a scope: the part of the API a refusal that the
// announced bucket cannot explain pauses (here GitLab's Users API).
func scoped(owner, resource, scope string) transport.Slot {
	s := slot(owner, resource)
	s.Scope = transport.BucketID{Provider: providerKey, Owner: owner, Resource: scope}
	return s
}

// testScopeRefusal: a refusal of a limit the server never announced (a
// 429 stating another throttle's limit, with Retry-After) pauses its scope
// until the Retry-After, exactly, and nothing else: the same owner's
// bucket and its other scopes go on. A second State on the same storage (a
// second process, for a shared state) sees the pause and the learnt limit.
func testScopeRefusal(t *testing.T, b Backend) {
	s, other := b.New(t), transport.State(nil)
	if b.NewDSN != nil && b.Open != nil {
		dsn := b.NewDSN(t)
		var c1, c2 func() error
		var err error
		if s, c1, err = b.Open(t.Context(), dsn); err != nil {
			t.Fatal(err)
		}
		defer c1()
		if other, c2, err = b.Open(t.Context(), dsn); err != nil {
			t.Fatal(err)
		}
		defer c2()
	} else {
		other = s
	}
	var l leases
	users, projects := scoped("alice", "api", "/api/v4/users/*"), scoped("alice", "api", "/api/v4/projects/*")
	reset := t0.Add(time.Minute)
	// Both scopes go while nothing is known of them.
	for _, sl := range []transport.Slot{users, projects} {
		lz := l.at(t0)
		if _, w := reserve(t, s, greedy, lz, t0, sl); w != 0 {
			t.Fatalf("%s waits %v before any refusal", sl.Scope.Resource, w)
		}
		settle(t, s, sl, lz.ID, ok(2000, 1990, reset), t0)
	}
	lz := l.at(t0)
	reserve(t, s, greedy, lz, t0, users)
	at := t0.Add(time.Second)
	ra := 20 * time.Second
	r := &headers.Reading{Status: http.StatusTooManyRequests, Limit: 40, Remaining: 0, Used: quota.UnknownCount, Reset: at.Add(ra),
		RetryAfter: ra, HasRetryAfter: true, Resource: "throttle_authenticated_users_api", Limited: headers.Primary}
	err := s.Settle(t.Context(), &transport.SettleParams{Slot: users, Lease: lz.ID, Now: at, Answer: quota.Answer{Reading: r, Counted: true, Sent: t0}})
	if err != nil {
		t.Fatal(err)
	}
	if _, w := reserve(t, other, greedy, l.at(at), at, users); w < ra-clockSlack || w > ra+clockSlack {
		t.Errorf("the refused scope waits %v, want the Retry-After's %v", w, ra)
	}
	if _, w := reserve(t, other, greedy, l.at(at), at.Add(ra-2*clockSlack), users); w < clockSlack {
		t.Errorf("%v before the Retry-After the scope waits %v", 2*clockSlack, w)
	}
	if _, w := reserve(t, other, greedy, l.at(at), at, projects); w != 0 {
		t.Errorf("another scope of the same owner waits %v behind the refusal", w)
	}
	if _, w := reserve(t, other, greedy, l.at(at), at, slot("alice", "api")); w != 0 {
		t.Errorf("the owner's bucket waits %v behind a scope's refusal", w)
	}
	bs, err := other.Buckets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := bs[users.Scope]
	if !got.Learnt || got.Limit != 40 || got.Name != "throttle_authenticated_users_api" {
		t.Errorf("the scope as stored: learnt %v limit %d name %q, want learnt 40 throttle_authenticated_users_api", got.Learnt, got.Limit, got.Name)
	}
	if main := bs[users.Bucket]; main.Remaining == 0 || !main.BlockedUntil.IsZero() {
		t.Errorf("the owner's bucket took the scope's refusal: remaining %d, blocked until %v", main.Remaining, main.BlockedUntil)
	}
}

// fleetWindow, fleetLimit and fleetSize describe the fleet a scope's
// limit is learnt in (testScopeFleet): 8 processes share a limit of 50
// requests per aligned 10 s that the server never announces.
const (
	fleetWindow = 10 * time.Second
	fleetLimit  = 50
	fleetSize   = 8
)

// fleetProcess is one process of the fleet: its State (the fleet's, or
// its own on a shared database) and what it saw succeed in the scope, as
// a transport keeps it (quota.Answer.Succeeded).
type fleetProcess struct {
	s         transport.State
	succeeded []time.Time
}

func (p *fleetProcess) count(since time.Time) int64 {
	var n int64
	for _, at := range p.succeeded {
		if !at.Before(since) {
			n++
		}
	}
	return n
}

// testScopeFleet: a fleet of 8 processes learns the limit of a scope the
// server never announces (50 per aligned 10 s; its 429 states no limit)
// from the whole fleet's count, not from one process's. Each process
// sends as often as the scope lets it, 4 requests a second, more than 6
// times what the server allows. With a Retry-After (which says where the
// server's window ends), after 3 windows without a refusal the learnt
// limit is within a tenth of the server's, and stays there. A bare 429
// says nothing of where the server's window begins: a backoff finds it
// only to within its last step, so a count may miss the requests the
// server counted before the scope's window began; the limit is then
// never above the server's by more than a tenth and never below half of
// it. Before the fleet's successes were counted in the scope's state, the
// first refusal set the limit to one process's count (6 or 7) and it rose
// by a tenth per clean window: 8 after 3 of them.
func testScopeFleet(t *testing.T, b Backend) {
	for _, style := range []string{"retry-after", "bare"} {
		t.Run(style, func(t *testing.T) { scopeFleet(t, b, style) })
	}
}

func scopeFleet(t *testing.T, b Backend, style string) {
	fleet := make([]*fleetProcess, fleetSize)
	if b.NewDSN != nil && b.Open != nil {
		dsn := b.NewDSN(t)
		for i := range fleet {
			s, closeState, err := b.Open(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { closeState() })
			fleet[i] = &fleetProcess{s: s}
		}
	} else {
		s := b.New(t) // one process's transports sharing its State
		for i := range fleet {
			fleet[i] = &fleetProcess{s: s}
		}
	}
	users := scoped("alice", "api", "GET /api/v4/users/*")
	var l leases
	// The server: its main throttle announced and generous, the users
	// scope counted per aligned window (t0 is aligned).
	var admitted, mainUsed int64
	windowOf := func(at time.Time) int { return int(at.Sub(t0) / fleetWindow) }
	serverWindow := -1
	answer := func(at time.Time) *headers.Reading {
		if w := windowOf(at); w != serverWindow {
			serverWindow, admitted = w, 0
		}
		if admitted >= fleetLimit {
			r := &headers.Reading{Status: http.StatusTooManyRequests, Limit: quota.UnknownCount, Remaining: quota.UnknownCount,
				Used: quota.UnknownCount, Limited: headers.Primary}
			if style == "retry-after" {
				end := t0.Add(time.Duration(serverWindow+1) * fleetWindow)
				r.RetryAfter, r.HasRetryAfter = end.Sub(at).Truncate(time.Second)+time.Second, true
			}
			return r
		}
		admitted++
		mainUsed++
		return ok(100_000, 100_000-mainUsed, t0.Add(time.Hour))
	}
	const (
		tick    = 250 * time.Millisecond // each process sends at most once a tick
		latency = 20 * time.Millisecond
		windows = 12
	)
	refusedIn := map[int]int{}
	clean, checked := 0, 0
	for step := 0; ; step++ {
		now := t0.Add(time.Duration(step) * tick)
		if w := windowOf(now); w > 0 && now.Equal(t0.Add(time.Duration(w)*fleetWindow)) {
			// Window w-1 has ended: once 3 windows went by without a
			// refusal, the learnt limit is within a tenth of the
			// server's.
			if refusedIn[w-1] == 0 {
				clean++
			}
			got := bucketOf(t, fleet[0].s, transport.Slot{Bucket: users.Scope})
			t.Logf("window %d: %d refused; learnt %d (provisional %v), counted %d from %v, reset %v, refused at %v", w-1, refusedIn[w-1], got.Limit, got.Provisional, got.Counted, got.CountedFrom.Sub(t0), got.Reset.Sub(t0), got.RefusedAt.Sub(t0))
			if clean >= 3 {
				checked++
				low := int64(fleetLimit - fleetLimit/10)
				if style == "bare" {
					low = fleetLimit / 2
				}
				if got.Limit < low || got.Limit > fleetLimit+fleetLimit/10 {
					t.Errorf("after window %d (%d without a refusal) the learnt limit is %d, want %d to %d", w-1, clean, got.Limit, low, fleetLimit+fleetLimit/10)
				}
			}
			if w == windows {
				break
			}
		}
		for k := range fleet {
			p := fleet[(k+step)%len(fleet)] // each goes first in turn
			lz := l.at(now)
			if _, w := reserve(t, p.s, greedy, lz, now, users); w != 0 {
				continue
			}
			r := answer(now.Add(latency / 2))
			at := now.Add(latency)
			if r.Limited == headers.NotLimited {
				p.succeeded = append(p.succeeded, at)
			} else {
				refusedIn[windowOf(now)]++
			}
			err := p.s.Settle(t.Context(), &transport.SettleParams{Slot: users, Lease: lz.ID, Now: at,
				Answer: quota.Answer{Reading: r, Counted: true, Sent: now, Succeeded: p.count}})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if checked < 3 {
		t.Errorf("only %d windows were checked after 3 without a refusal; refusals per window: %v", checked, refusedIn)
	}
}
