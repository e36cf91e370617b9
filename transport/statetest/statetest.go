// Package statetest is the one test suite every transport.State must pass:
// this process's memory (transport.NewMemoryState) and the shared states
// over SQLite and PostgreSQL (package store/quotastate). The cases decide with an
// injected time, never a real sleep; those that run a transport use
// in-process servers and wait only on events.
//
// States shared between processes also give the suite a way to open their
// database by DSN, which enables the multi-process case. It re-executes the
// test binary as worker processes, so the package running the suite routes
// its TestMain through Main:
//
//	func TestMain(m *testing.M) { statetest.Main(m, open) }
//
// Layer 3 of docs/architecture.md: it owns the one suite every
// transport.State passes.
package statetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/transport"
)

// Backend describes the State under test.
type Backend struct {
	// New returns a new State over fresh, empty storage for one test.
	New func(t *testing.T) transport.State
	// NewDSN and Open are for shared states: NewDSN returns the DSN of a
	// fresh, empty database that lives until the test ends, and Open opens
	// a State on it (with its closer). Leave both nil for a State that
	// lives in one process.
	NewDSN func(t testing.TB) string
	Open   OpenFunc
}

// OpenFunc opens a State on the database named by dsn.
type OpenFunc func(ctx context.Context, dsn string) (transport.State, func() error, error)

// Run runs the suite against b.
// clockSlack is how far a shared State's times may stray from the
// test's: such a State moves times to the database's clock and back by an
// offset measured within half a round trip to the database, which a
// loaded machine stretches to milliseconds. It is far below every wait
// these cases tell apart (a minute from 50 minutes, 20 s from 0).
const clockSlack = 10 * time.Millisecond

func Run(t *testing.T, b Backend) {
	tests := []struct {
		name string
		fn   func(*testing.T, Backend)
	}{
		{"ReserveUnknownBucketProbesOneAtATime", testProbe},
		{"RefusedReserveChangesNothing", testRefusalChangesNothing},
		{"SettleReturnsTheLease", testSettleReturnsLease},
		{"LeasesLapseOneByOne", testLeasesLapse},
		{"EarliestCredentialIsChosen", testEarliest},
		{"TiesGoToTheFirstSlot", testTies},
		{"ExhaustedResourceLeavesAnotherUsable", testResources},
		{"LateAnswerFromOldWindowDoesNotRefill", testLateAnswer},
		{"RefillAndWaitAgree", testRefillAgrees},
		{"RefusalWithPastResetWaitsTheGrace", testPastReset},
		{"FreeRequestNeedsNoBudget", testFree},
		{"SettleWithoutOwner", testSettleWithoutOwner},
		{"UnknownOwnerSpendsAgainstKnownBuckets", testAlso},
		{"ConcurrentHoldersNeverExceed", testConcurrentHolders},
		{"TransportCancelledRequestsGiveBack", testTransportCancelled},
		{"AIMDLowersAndRecovers", testAIMD},
		{"EpisodeGivesOneStrike", testEpisode},
		{"NoResetReadingRefills", testNoResetRefills},
		{"PauseCapped", testPauseCapped},
		{"PercentageReserveAndReserveError", testReserve},
		{"FreeHolders", testFreeHolders},
		{"TransportFreesDeadHolders", testTransportFreesDeadHolders},
		{"RemoteHolderFreedWhenSilent", testRemoteHolderSilent},
		{"ReservationsHoldTheirUnits", testUnits},
		{"ScopeRefusalPausesOnlyItsScope", testScopeRefusal},
		{"ReadingReachesBlock", testReadingReachesBlock},
		{"WriteSpacingAfterRead", testWriteSpacingAfterRead},
		{"MinIntervalOnGreedy", testMinIntervalOnGreedy},
		{"PeakCountsRequestsSent", testPeakCountsRequestsSent},
		{"BareRefusalPausesNotEmpties", testBareRefusal},
		{"FleetLearnsAScopesLimit", testScopeFleet},
		{"ContinuousBucketWaitsForWhatItNeeds", testContinuousRefill},
		{"DecisionSaysWhatEndsAWait", testDecisionSaysWhatEndsAWait},
		{"ARequestDrawsFromSeveralBucketsOrNone", testDraws},
	}
	if b.NewDSN != nil && b.Open != nil {
		tests = append(tests, struct {
			name string
			fn   func(*testing.T, Backend)
		}{"ProcessesNeverExceed", testProcesses})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

const providerKey = "github http://api.test"

func slot(owner, resource string) transport.Slot {
	return transport.Slot{
		Owner:  transport.OwnerID{Provider: providerKey, Owner: owner},
		Bucket: transport.BucketID{Provider: providerKey, Owner: owner, Resource: resource},
	}
}

var greedy = quota.Ask{Policy: quota.Policy{Kind: quota.Greedy}}

// capped asks with a concurrency cap on the owner.
func capped(n int64) quota.Ask {
	a := greedy
	a.Secondary.MaxConcurrent = n
	return a
}

// leases hands out lease IDs for one test.
type leases struct{ next uint64 }

func (l *leases) at(now time.Time) quota.Lease {
	l.next++
	return quota.Lease{ID: l.next, Until: now.Add(time.Minute)}
}

func reserve(t *testing.T, s transport.State, ask quota.Ask, l quota.Lease, now time.Time, slots ...transport.Slot) (int, time.Duration) {
	t.Helper()
	d, err := s.Reserve(t.Context(), &transport.ReserveParams{Slots: slots, Ask: ask, Lease: l, Now: now})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	return d.Index, d.Wait
}

func settle(t *testing.T, s transport.State, sl transport.Slot, lease uint64, r *headers.Reading, now time.Time) {
	t.Helper()
	err := s.Settle(t.Context(), &transport.SettleParams{Slot: sl, Lease: lease, Now: now,
		Answer: quota.Answer{Reading: r, Counted: true}})
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
}

// ok is a 200's reading.
func ok(limit, remaining int64, reset time.Time) *headers.Reading {
	return &headers.Reading{Status: 200, Limit: limit, Remaining: remaining, Used: quota.UnknownCount, Reset: reset}
}

// refused is a primary refusal's reading (remaining 0, no Retry-After).
func refused(limit int64, reset, now time.Time) *headers.Reading {
	r := ok(limit, 0, reset)
	r.Status, r.Limited, r.Wait = 403, headers.Primary, max(reset.Sub(now), 0)
	return r
}

// known makes sl's bucket known: limit and remaining with a reset.
func known(t *testing.T, s transport.State, sl transport.Slot, limit, remaining int64, reset, now time.Time) {
	t.Helper()
	settle(t, s, sl, 0, ok(limit, remaining, reset), now)
}

func bucketOf(t *testing.T, s transport.State, sl transport.Slot) quota.Bucket {
	t.Helper()
	all, err := s.Buckets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return all[sl.Bucket]
}

func ownerOf(t *testing.T, s transport.State, sl transport.Slot) quota.Owner {
	t.Helper()
	all, err := s.Owners(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return all[sl.Owner]
}

// snapshot is the JSON of everything a State holds about sl.
func snapshot(t *testing.T, s transport.State, sl transport.Slot) string {
	t.Helper()
	b, err := json.Marshal(struct {
		B quota.Bucket
		O quota.Owner
	}{bucketOf(t, s, sl), ownerOf(t, s, sl)})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func testProbe(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	if i, w := reserve(t, s, greedy, l.at(t0), t0, a); i != 0 || w != 0 {
		t.Fatalf("first request to an unknown bucket: slot %d wait %v; want 0, 0", i, w)
	}
	if _, w := reserve(t, s, greedy, l.at(t0), t0, a); w == 0 {
		t.Fatal("a second request went while the first answer, which tells the limits, was out")
	}
	settle(t, s, a, 1, ok(10, 9, t0.Add(time.Hour)), t0)
	for n := range 9 {
		if _, w := reserve(t, s, greedy, l.at(t0), t0, a); w != 0 {
			t.Fatalf("request %d of 9 left: wait %v", n+1, w)
		}
	}
	if _, w := reserve(t, s, greedy, l.at(t0), t0, a); w < time.Hour {
		t.Fatalf("tenth request with 9 in flight of 9 left: wait %v, want the reset", w)
	}
}

func testRefusalChangesNothing(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	ask := greedy
	ask.Secondary = quota.Secondary{MaxConcurrent: 5, WriteSpacing: time.Second, PointsPerMinute: 900}
	ask.Cost = quota.Cost{Write: true, Points: 5, Endpoint: "POST /repos/o/r/issues"}
	known(t, s, a, 10, 1, t0.Add(time.Hour), t0)
	if _, w := reserve(t, s, ask, l.at(t0), t0, a); w != 0 {
		t.Fatalf("wait %v", w)
	}
	before := snapshot(t, s, a)
	// The bucket is spent (one in flight of one left): the owner would
	// allow it after its write spacing, but nothing may be taken from it.
	if _, w := reserve(t, s, ask, l.at(t0.Add(2*time.Second)), t0.Add(2*time.Second), a); w < time.Hour-2*time.Second {
		t.Fatalf("wait %v, want the reset", w)
	}
	if after := snapshot(t, s, a); after != before {
		t.Fatalf("a refused reservation changed the state:\nbefore %s\nafter  %s", before, after)
	}
}

func testSettleReturnsLease(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	known(t, s, a, 100, 100, t0.Add(time.Hour), t0)
	ask := capped(2)
	l1, l2 := l.at(t0), l.at(t0)
	reserve(t, s, ask, l1, t0, a)
	reserve(t, s, ask, l2, t0, a)
	if _, w := reserve(t, s, ask, l.at(t0), t0, a); w == 0 {
		t.Fatal("a third request went with the owner's two slots taken")
	}
	settle(t, s, a, l1.ID, ok(100, 98, t0.Add(time.Hour)), t0)
	settle(t, s, a, l2.ID, nil, t0) // released without an answer
	settle(t, s, a, l2.ID, nil, t0) // twice is harmless
	if n := len(ownerOf(t, s, a).Leases) + len(bucketOf(t, s, a).Leases); n != 0 {
		t.Fatalf("%d leases held after both settled", n)
	}
	if got := bucketOf(t, s, a).Remaining; got != 98 {
		t.Fatalf("remaining %d, want 98 from the answer", got)
	}
}

func testLeasesLapse(t *testing.T, b Backend) {
	s := b.New(t)
	a := slot("alice", "core")
	known(t, s, a, 100, 100, t0.Add(time.Hour), t0)
	ask := capped(2)
	first := quota.Lease{ID: 1, Until: t0.Add(time.Minute)}
	second := quota.Lease{ID: 2, Until: t0.Add(40*time.Second + time.Minute)}
	reserve(t, s, ask, first, t0, a)
	reserve(t, s, ask, second, t0.Add(40*time.Second), a)
	// At 70 s the first lease has lapsed and the second has not: one
	// slot is free, not two, and taking it renews nothing.
	at := t0.Add(70 * time.Second)
	if _, w := reserve(t, s, ask, quota.Lease{ID: 3, Until: at.Add(time.Minute)}, at, a); w != 0 {
		t.Fatalf("wait %v: the lapsed lease still counts", w)
	}
	if _, w := reserve(t, s, ask, quota.Lease{ID: 4, Until: at.Add(time.Minute)}, at, a); w == 0 {
		t.Fatal("a lease lapsed before its time")
	}
	at = t0.Add(101 * time.Second)
	if _, w := reserve(t, s, ask, quota.Lease{ID: 5, Until: at.Add(time.Minute)}, at, a); w != 0 {
		t.Fatalf("wait %v: the second lease did not lapse at its own time", w)
	}
	settle(t, s, a, first.ID, nil, at) // a settle after the lease lapsed is harmless
}

func testEarliest(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	fast, slow := slot("alice", "core"), slot("bob", "core")
	settle(t, s, fast, 0, refused(5000, t0.Add(2*time.Minute), t0), t0)
	settle(t, s, slow, 0, refused(5000, t0.Add(50*time.Minute), t0), t0)
	i, w := reserve(t, s, greedy, l.at(t0), t0, slow, fast)
	if i != 1 || w < 2*time.Minute || w > 2*time.Minute+2*time.Second {
		t.Fatalf("chose slot %d waiting %v; want slot 1 (back in 2 minutes)", i, w)
	}
	at := t0.Add(w)
	if i, w := reserve(t, s, greedy, l.at(at), at, slow, fast); i != 1 || w != 0 {
		t.Fatalf("at its time: slot %d wait %v", i, w)
	}
}

func testTies(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a, c := slot("alice", "core"), slot("carol", "core")
	known(t, s, a, 100, 50, t0.Add(time.Hour), t0)
	known(t, s, c, 100, 50, t0.Add(time.Hour), t0)
	if i, _ := reserve(t, s, greedy, l.at(t0), t0, c, a); i != 0 {
		t.Fatalf("chose %d; the first of equals is 0", i)
	}
	if i, _ := reserve(t, s, greedy, l.at(t0), t0, a, c); i != 0 {
		t.Fatalf("chose %d; the first of equals is 0", i)
	}
}

func testResources(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	search, core := slot("alice", "search"), slot("alice", "core")
	known(t, s, core, 5000, 4000, t0.Add(time.Hour), t0)
	settle(t, s, search, 0, refused(30, t0.Add(time.Minute), t0), t0)
	if _, w := reserve(t, s, greedy, l.at(t0), t0, search); w < time.Minute {
		t.Fatalf("search: wait %v, want its reset", w)
	}
	if _, w := reserve(t, s, greedy, l.at(t0), t0, core); w != 0 {
		t.Fatalf("core waits %v after a refusal on search", w)
	}
}

func testLateAnswer(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	reset := t0.Add(10 * time.Minute)
	settle(t, s, a, 0, refused(100, reset, t0), t0)
	// A request sent in the previous window answers late, saying 40
	// were left then: it must not make the spent window look refilled.
	settle(t, s, a, 0, ok(100, 40, reset.Add(-time.Hour)), t0.Add(time.Second))
	if _, w := reserve(t, s, greedy, l.at(t0.Add(2*time.Second)), t0.Add(2*time.Second), a); w < reset.Sub(t0)-2*time.Second {
		t.Fatalf("wait %v after a late answer from the old window; want the reset", w)
	}
}

func testRefillAgrees(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	reset := t0.Add(10 * time.Second)
	known(t, s, a, 10, 0, reset, t0)
	_, w := reserve(t, s, greedy, l.at(t0), t0, a)
	if w <= 10*time.Second {
		t.Fatalf("wait %v; want the reset plus a grace", w)
	}
	end := t0.Add(w)
	// Between the reset and the end of the wait the bucket is not yet
	// refilled: a request woken early would go into the old window.
	mid := reset.Add(end.Sub(reset) / 2)
	if _, w2 := reserve(t, s, greedy, l.at(mid), mid, a); w2 != end.Sub(mid) {
		t.Fatalf("inside the grace: wait %v, want %v (the same end)", w2, end.Sub(mid))
	}
	if got := bucketOf(t, s, a).Remaining; got != 0 {
		t.Fatalf("refilled to %d inside the grace", got)
	}
	if _, w3 := reserve(t, s, greedy, l.at(end), end, a); w3 != 0 {
		t.Fatalf("at the end of the wait: wait %v", w3)
	}
}

func testPastReset(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	known(t, s, a, 10, 5, t0.Add(10*time.Second), t0)
	// The server refuses with a reset already behind us (it rounds down,
	// or its clock is behind): retry once after the grace, not at once.
	now := t0.Add(10*time.Second + 10*time.Millisecond)
	settle(t, s, a, 0, refused(10, t0.Add(10*time.Second), now), now)
	_, w := reserve(t, s, greedy, l.at(now), now, a)
	if w <= 0 || w > 2*time.Second {
		t.Fatalf("wait %v after a refusal with a past reset; want the grace (0 < wait ≤ 2 s)", w)
	}
	at := now.Add(w)
	if _, w := reserve(t, s, greedy, l.at(at), at, a); w != 0 {
		t.Fatalf("after the grace: wait %v", w)
	}
}

func testFree(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	settle(t, s, a, 0, refused(10, t0.Add(time.Hour), t0), t0)
	free := capped(1)
	free.Free = true
	lease := l.at(t0)
	if _, w := reserve(t, s, free, lease, t0, a); w != 0 {
		t.Fatalf("a free request waits %v on a spent bucket", w)
	}
	if _, w := reserve(t, s, free, l.at(t0), t0, a); w == 0 {
		t.Fatal("a free request ignored the owner's concurrency cap")
	}
	settle(t, s, a, lease.ID, ok(10, 0, t0.Add(time.Hour)), t0)
	if n := len(ownerOf(t, s, a).Leases) + len(bucketOf(t, s, a).Leases); n != 0 {
		t.Fatalf("%d leases held after the free request settled", n)
	}
}

func testSettleWithoutOwner(t *testing.T, b Backend) {
	s := b.New(t)
	a := slot("alice", "core")
	settle(t, s, transport.Slot{Bucket: a.Bucket}, 0, ok(5000, 4321, t0.Add(time.Hour)), t0)
	if got := bucketOf(t, s, a).Remaining; got != 4321 {
		t.Fatalf("remaining %d", got)
	}
	if _, ok := func() (quota.Owner, bool) {
		all, err := s.Owners(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		o, ok := all[a.Owner]
		return o, ok
	}(); ok {
		t.Fatal("a settle without an owner created one")
	}
}

// A credential whose owner is unknown may share any known bucket: its
// request waits until every one of them allows it, holds a lease in each
// while in flight, and gives them all back.
func testAlso(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	known, unknown := slot("alice", "core"), slot("token:0123", "core")
	settle(t, s, known, 0, refused(100, t0.Add(time.Minute), t0), t0)
	probe := unknown
	probe.Also = []transport.BucketID{known.Bucket}
	if _, w := reserve(t, s, greedy, l.at(t0), t0, probe); w < time.Minute {
		t.Fatalf("an unknown credential's request waits %v while a bucket it may share is spent", w)
	}
	at := t0.Add(2 * time.Minute)
	lease := l.at(at)
	if _, w := reserve(t, s, greedy, lease, at, probe); w != 0 {
		t.Fatalf("after the reset: wait %v", w)
	}
	if n := len(bucketOf(t, s, known).Leases); n != 1 {
		t.Fatalf("the known bucket holds %d leases, want the probe's", n)
	}
	// The known bucket's window rolled at its reset: full again.
	settle(t, s, known, 0, ok(100, 100, at.Add(time.Hour)), at)
	settle(t, s, probe, lease.ID, ok(100, 99, at.Add(time.Hour)), at)
	if n := len(bucketOf(t, s, known).Leases) + len(bucketOf(t, s, unknown).Leases); n != 0 {
		t.Fatalf("%d leases held after the probe settled", n)
	}
	if got := bucketOf(t, s, known).Remaining; got != 99 {
		t.Fatalf("the known bucket has %d left; the probe may have been counted there: want 99", got)
	}
}
