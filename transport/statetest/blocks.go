package statetest

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/transport"
)

// These cases hold on a bucket with plenty to spare, where a shared State
// may hand out units of a block taken ahead (store/quotastate): every
// unit is the engine's decision on the same facts, so each State,
// memory's included, lets exactly the same requests go.

// plentiful makes sl's bucket known with 4,000 of 5,000 left: a block may
// be taken on it.
func plentiful(t *testing.T, s transport.State, sl transport.Slot) {
	t.Helper()
	known(t, s, sl, 5000, 4000, t0.Add(time.Hour), t0)
}

// went counts how many of n reservations asking ask go at now.
func went(t *testing.T, s transport.State, ask quota.Ask, l *leases, n int, now time.Time, sl transport.Slot) []quota.Lease {
	t.Helper()
	var held []quota.Lease
	for range n {
		lease := l.at(now)
		if _, w := reserve(t, s, ask, lease, now, sl); w == 0 {
			held = append(held, lease)
		}
	}
	return held
}

// After a 200 saying 5 remain, only 5 more go: the reading reaches the
// next decision, whether in the store or of a block.
func testReadingReachesBlock(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	plentiful(t, s, a)
	first := went(t, s, greedy, &l, 1, t0, a)
	if len(first) != 1 {
		t.Fatal("the first request did not go")
	}
	settle(t, s, a, first[0].ID, ok(5000, 5, t0.Add(time.Hour)), t0)
	if n := len(went(t, s, greedy, &l, 39, t0, a)); n != 5 {
		t.Fatalf("after a 200 saying 5 remain, %d of 39 went, want 5", n)
	}
}

// Writes are spaced by write_spacing with no cap on requests in flight,
// after a read: one goes at one instant, and the owner's next write is
// written down for every process.
func testWriteSpacingAfterRead(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	plentiful(t, s, a)
	read := greedy
	read.Secondary.WriteSpacing = time.Second
	write := read
	write.Cost.Write = true
	if len(went(t, s, read, &l, 1, t0, a)) != 1 {
		t.Fatal("the read did not go")
	}
	if n := len(went(t, s, write, &l, 5, t0, a)); n != 1 {
		t.Fatalf("%d of 5 writes went at one instant with write_spacing 1s, want 1", n)
	}
	if next := ownerOf(t, s, a).NextWrite; next.Sub(t0.Add(time.Second)).Abs() > 10*time.Millisecond {
		t.Fatalf("the owner's next write is at %v, want 1s after the write (%v)", next, t0.Add(time.Second))
	}
}

// A greedy policy with min_interval = 100ms and burst = 1 lets 2 requests
// go at one instant; those that end unsent give their pacing back.
func testMinIntervalOnGreedy(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	plentiful(t, s, a)
	ask := greedy
	ask.Policy.MinDelay, ask.Policy.Burst = 100*time.Millisecond, 1
	held := went(t, s, ask, &l, 33, t0, a)
	if len(held) != 2 {
		t.Fatalf("%d of 33 went at one instant with min_interval 100ms and burst 1, want 2", len(held))
	}
	for _, h := range held {
		settle(t, s, a, h.ID, nil, t0)
	}
	if tat := bucketOf(t, s, a).TAT; tat.After(t0.Add(200*time.Millisecond + 10*time.Millisecond)) {
		t.Fatalf("the pacing schedule is at %v after 2 requests, want at most 200ms after %v", tat, t0)
	}
}

// One request in flight refused by a secondary limit teaches a cap of 1:
// the owner's peak counts requests sent, whatever a State took ahead.
func testPeakCountsRequestsSent(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	plentiful(t, s, a)
	held := went(t, s, greedy, &l, 1, t0, a)
	if len(held) != 1 {
		t.Fatal("the request did not go")
	}
	settleAnswer(t, s, a, held[0].ID, quota.Answer{Reading: secondary(time.Minute), Counted: true, Sent: t0}, t0)
	if o := ownerOf(t, s, a); o.Cap != 1 || o.Peak != 0 {
		t.Fatalf("after one request's secondary refusal: learnt cap %d (peak %d), want 1", o.Cap, o.Peak)
	}
}
