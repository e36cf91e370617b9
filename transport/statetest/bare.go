package statetest

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/transport"
)

// testBareRefusal: a refusal that states nothing (a proxy's 429 page in
// front of GitHub) pauses the refused bucket for GitHub's minute, not until
// its reset 50 minutes away; the owner's other buckets go on; after the
// minute the bucket goes, and the next answer's stated remaining is its
// own again. A second State on the same storage (a second process, for a
// shared state) sees all of it.
func testBareRefusal(t *testing.T, b Backend) {
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
	core, search := slot("alice", "core"), slot("alice", "search")
	reset := t0.Add(50 * time.Minute)
	lz := l.at(t0)
	reserve(t, s, greedy, lz, t0, core)
	settle(t, s, core, lz.ID, ok(5000, 4000, reset), t0)
	lz = l.at(t0)
	reserve(t, s, greedy, lz, t0, search)
	settle(t, s, search, lz.ID, ok(30, 29, t0.Add(time.Minute)), t0)

	lz = l.at(t0)
	reserve(t, s, greedy, lz, t0, core)
	at := t0.Add(time.Second)
	page := headers.Parse(http.StatusTooManyRequests, http.Header{"Content-Type": {"text/html"}},
		[]byte("<html><body>Too Many Requests</body></html>"), at)
	if page.Limited != headers.Bare {
		t.Fatalf("a proxy's 429 page reads as %v, want bare", page.Limited)
	}
	err := s.Settle(t.Context(), &transport.SettleParams{Slot: core, Lease: lz.ID, Now: at,
		Answer: quota.Answer{Reading: &page, Counted: true, Sent: t0, BareWait: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if _, w := reserve(t, other, greedy, l.at(at), at, core); w < time.Minute-clockSlack || w > time.Minute+clockSlack {
		t.Errorf("the refused bucket waits %v, want GitHub's minute", w)
	}
	if _, w := reserve(t, other, greedy, l.at(at), at.Add(time.Minute-2*clockSlack), core); w < clockSlack {
		t.Errorf("%v before the minute the bucket waits %v", 2*clockSlack, w)
	}
	if _, w := reserve(t, other, greedy, l.at(at), at, search); w != 0 {
		t.Errorf("another bucket of the same owner waits %v behind a bare refusal", w)
	}
	after := at.Add(time.Minute + clockSlack)
	lz = l.at(after)
	if _, w := reserve(t, other, greedy, lz, after, core); w != 0 {
		t.Fatalf("a minute after the bare refusal the bucket still waits %v (its reset is %v away)", w, reset.Sub(after))
	}
	settle(t, other, core, lz.ID, ok(5000, 3990, reset), after)
	bs, err := other.Buckets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := bs[core.Bucket]; got.Remaining != 3990 {
		t.Errorf("after a 200 stating 3990 left the bucket has %d", got.Remaining)
	}
}
