package quota

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// A 502 that states nothing is counted by the bucket itself (remaining −
// 1); a reading of a request sent before it, arriving after, cannot have
// counted it, so it does not undo the count (the fleet simulation's memory
// seed 22 with -sim.bare5xx: the within-window minimum took that reading
// as it was and the fleet sent one more than the server allowed). A
// reading of a request sent after the 502 counts it, and is taken as it
// is.
func TestUnstatedChargeOutlivesAnEarlierReading(t *testing.T) {
	reset := t0.Add(time.Minute)
	p := Policy{Kind: Greedy}
	b := NewBucket()
	Settle(nil, &b, 0, &Answer{Reading: reading(20, 5, reset), Counted: true, Sent: t0}, t0)
	sentA, sentB := t0.Add(time.Second), t0.Add(2*time.Second)
	if w := b.Reserve(p, Lease{ID: 1, Until: reset}, sentA); w != 0 {
		t.Fatalf("A waits %v", w)
	}
	if w := b.Reserve(p, Lease{ID: 2, Until: reset}, sentB); w != 0 {
		t.Fatalf("B waits %v", w)
	}
	// The server counts A (4 left), then B (3 left). B's answer comes
	// first: a proxy's 502 stating nothing.
	bad := headers.Parse(http.StatusBadGateway, http.Header{"Content-Type": {"text/html"}}, []byte("<html>502 Bad Gateway</html>"), sentB)
	Settle(nil, &b, 2, &Answer{Reading: &bad, Counted: true, Sent: sentB}, sentB.Add(100*time.Millisecond))
	if b.Remaining != 4 {
		t.Fatalf("after the 502 remaining is %d, want 4", b.Remaining)
	}
	// A's answer, stating the 4 left after A, arrives after.
	at := sentB.Add(time.Second)
	Settle(nil, &b, 1, &Answer{Reading: reading(20, 4, reset), Counted: true, Sent: sentA}, at)
	if got, _ := b.Budget(0, at); got != 3 {
		t.Fatalf("after A's reading the budget is %d, want the server's 3 (the 502's count undone)", got)
	}
	// A request sent after the 502 states a count that includes it.
	sentC := at.Add(time.Second)
	Settle(nil, &b, 0, &Answer{Reading: reading(20, 2, reset), Counted: true, Sent: sentC}, sentC.Add(time.Second))
	if b.Remaining != 2 || len(b.Unstated) != 0 {
		t.Fatalf("after C's reading remaining %d (want 2), unstated %v (want none)", b.Remaining, b.Unstated)
	}
	// So does a new window's reading of a request sent before the 502 of
	// that window.
	next := reset.Add(time.Minute)
	sentD, sentE := reset.Add(time.Second), reset.Add(2*time.Second)
	bad = headers.Parse(http.StatusBadGateway, http.Header{"Content-Type": {"text/html"}}, nil, sentE)
	Settle(nil, &b, 0, &Answer{Reading: &bad, Counted: true, Sent: sentE}, sentE.Add(time.Millisecond))
	Settle(nil, &b, 0, &Answer{Reading: reading(20, 19, next), Counted: true, Sent: sentD}, sentE.Add(time.Second))
	if b.Remaining != 18 {
		t.Fatalf("the new window's first reading, of a request sent before a 502: remaining %d, want 18", b.Remaining)
	}
	// Of two requests sent at one instant, either may have reached the
	// server first: a reading of one does not undo the other's count.
	b = NewBucket()
	Settle(nil, &b, 0, &Answer{Reading: reading(20, 5, reset), Counted: true, Sent: t0}, t0)
	bad = headers.Parse(http.StatusBadGateway, http.Header{"Content-Type": {"text/html"}}, nil, sentA)
	Settle(nil, &b, 0, &Answer{Reading: &bad, Counted: true, Sent: sentA}, sentA.Add(time.Millisecond))
	Settle(nil, &b, 0, &Answer{Reading: reading(20, 4, reset), Counted: true, Sent: sentA}, sentA.Add(time.Second))
	if b.Remaining != 3 {
		t.Fatalf("a reading of a request sent with a 502: remaining %d, want 3", b.Remaining)
	}
}
