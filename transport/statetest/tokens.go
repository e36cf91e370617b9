package statetest

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/quota"
)

// testContinuousRefill: a bucket settled as continuous (a language
// model's tokens) keeps its refill rate in every State, so a request
// short of tokens waits until enough have dripped back, not for the
// reset (when the bucket is full again).
func testContinuousRefill(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("org", "tokens")
	// 2,000 of 20,000 left, full in 54 s: 333.3 a second.
	settleAnswer(t, s, a, 0, quota.Answer{Reading: ok(20000, 2000, t0.Add(54*time.Second)), Counted: true, Continuous: true}, t0)
	ask := greedy
	ask.Units = 3000
	_, w := reserve(t, s, ask, l.at(t0), t0, a)
	if w < 3*time.Second || w > 3*time.Second+5*time.Millisecond {
		t.Fatalf("3,000 tokens with 2,000 left wait %v, want the 3 s 1,000 take to drip back", w)
	}
	at := t0.Add(w)
	if _, w := reserve(t, s, ask, l.at(at), at, a); w != 0 {
		t.Fatalf("after the wait: %v more", w)
	}
}
