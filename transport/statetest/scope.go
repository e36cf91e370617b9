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
	// A shared state decides on the database's clock, whose offset from
	// ours it measures to within a few microseconds.
	const clockSlack = time.Millisecond / 2
	if _, w := reserve(t, other, greedy, l.at(at), at, users); w < ra-clockSlack || w > ra+clockSlack {
		t.Errorf("the refused scope waits %v, want the Retry-After's %v", w, ra)
	}
	if _, w := reserve(t, other, greedy, l.at(at), at.Add(ra-2*time.Millisecond), users); w < 2*time.Millisecond-clockSlack {
		t.Errorf("2 ms before the Retry-After the scope waits %v", w)
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
