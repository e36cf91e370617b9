package statetest

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/transport"
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

// testDraws: a request that spends from several buckets at once (a
// language model's output tokens, requests and input tokens) goes only
// when every one allows it, and then takes its own units from each in the
// same decision; a bucket short of its units holds the request back and
// nothing is taken from the others. Each bucket is then settled on its
// own, as a slot with no owner.
func testDraws(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	out := slot("org", "output-tokens")
	reqs, in := slot("org", "requests"), slot("org", "input-tokens")
	reset := t0.Add(time.Minute)
	for _, k := range []struct {
		sl               transport.Slot
		limit, remaining int64
	}{{out, 8000, 8000}, {reqs, 50, 50}, {in, 4000, 300}} {
		settleAnswer(t, s, k.sl, 0, quota.Answer{Reading: ok(k.limit, k.remaining, reset), Counted: true, Continuous: true}, t0)
	}
	drawing := out
	drawing.Draws = []transport.Draw{{Bucket: reqs.Bucket, Units: 1}, {Bucket: in.Bucket, Units: 500}}
	ask := greedy
	ask.Units = 1024
	before := []string{snapshot(t, s, out), snapshot(t, s, reqs), snapshot(t, s, in)}
	if _, w := reserve(t, s, ask, l.at(t0), t0, drawing); w == 0 {
		t.Fatal("500 input tokens went with 300 left")
	}
	for i, sl := range []transport.Slot{out, reqs, in} {
		if got := snapshot(t, s, sl); got != before[i] {
			t.Fatalf("a request that waits took from %s:\n%s\nwant\n%s", sl.Bucket.Resource, got, before[i])
		}
	}
	drawing.Draws[1].Units = 200
	lz := l.at(t0)
	if _, w := reserve(t, s, ask, lz, t0, drawing); w != 0 {
		t.Fatalf("200 input tokens with 300 left wait %v", w)
	}
	for _, k := range []struct {
		sl   transport.Slot
		want int64
	}{{out, 1024}, {reqs, 1}, {in, 200}} {
		if b := bucketOf(t, s, k.sl); b.InFlight(t0) != k.want {
			got := b.InFlight(t0)
			t.Fatalf("%s holds %d in flight, want %d", k.sl.Bucket.Resource, got, k.want)
		}
	}
	// The answer: output tokens 8,000 − 60 used, requests 49, input 100.
	for _, k := range []struct {
		sl               transport.Slot
		limit, remaining int64
	}{{out, 8000, 7940}, {reqs, 50, 49}, {in, 4000, 100}} {
		bare := transport.Slot{Bucket: k.sl.Bucket}
		if k.sl.Bucket == out.Bucket {
			bare = out
		}
		settleAnswer(t, s, bare, lz.ID, quota.Answer{Reading: ok(k.limit, k.remaining, reset), Counted: true, Continuous: true}, t0)
		got := bucketOf(t, s, k.sl)
		if got.InFlight(t0) != 0 || got.Remaining != k.remaining {
			t.Fatalf("%s after its settle: %d in flight, %d left; want 0 and %d", k.sl.Bucket.Resource, got.InFlight(t0), got.Remaining, k.remaining)
		}
	}
}
