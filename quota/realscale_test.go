package quota

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// These tests pin what the engine does at the time scales real servers
// use (GitHub's hour and minute, a 60 s secondary penalty) and when other
// clients spend the same bucket.

// A known budget of exactly −1 is not "unknown": with remaining 99 and a
// reserve of 100, nothing may go until the reset.
func TestBudgetMinusOneIsKnown(t *testing.T) {
	reset := t0.Add(40 * time.Minute)
	b := NewBucket()
	b.Observe(reading(5000, 99, reset), t0, true, Default{})
	p := Policy{Kind: Greedy, Reserve: 100}
	if w := b.Wait(p, t0); w < 40*time.Minute {
		t.Fatalf("remaining 99 with a reserve of 100 waits %v, want until the reset (40m)", w)
	}
	// Remaining 1 with two in flight (another client's spending shows up
	// when they answer): wait for the reset, not a 20 ms poll.
	b = NewBucket()
	b.Observe(reading(5000, 3, reset), t0, true, Default{})
	for range 2 {
		if w := b.Reserve(Policy{Kind: Greedy}, lz(t0), t0); w != 0 {
			t.Fatalf("reserve waited %v", w)
		}
	}
	b.Observe(reading(5000, 1, reset), t0.Add(time.Second), true, Default{})
	if w := b.Wait(Policy{Kind: Greedy}, t0.Add(time.Second)); w != 0 {
		// budget 1 − 2 in flight = −1: spent until an answer or the reset
		if w < time.Minute {
			t.Fatalf("budget −1 waits %v: a poll, not the reset or an answer", w)
		}
	} else {
		t.Fatal("budget −1 let a request go")
	}
}

// A primary refusal sent before a reset that arrives after an answer of
// the new window belongs to the old window: it must not empty the new one.
func TestLateRefusalFromOldWindowChangesNothing(t *testing.T) {
	old := t0.Add(time.Second)
	next := old.Add(time.Hour)
	b := NewBucket()
	b.Observe(reading(5000, 0, old), t0, true, Default{})
	now := old.Add(2 * time.Second)
	b.Observe(reading(5000, 4999, next), now, true, Default{}) // the new window
	late := &headers.Reading{Status: http.StatusForbidden, Limit: 5000, Remaining: 0, Used: 5000, Reset: old, Limited: headers.Primary}
	b.Observe(late, now.Add(100*time.Millisecond), true, Default{})
	if b.Remaining != 4999 || !b.BlockedUntil.Before(now) {
		t.Fatalf("a late refusal of the old window emptied the new one: remaining %d, blocked until %v", b.Remaining, b.BlockedUntil)
	}
	if w := b.Wait(Policy{Kind: Greedy}, now.Add(time.Second)); w != 0 {
		t.Fatalf("the token idles %v into the new window", w)
	}
}

// A 304 gives back what its reservation took of the pacing and of the
// owner's points, with the quota: under spread, free repeats are not paced
// as if spent.
func TestFreeAnswerGivesBackPacingAndPoints(t *testing.T) {
	reset := t0.Add(time.Hour)
	b := NewBucket()
	b.Observe(reading(5000, 100, reset), t0, true, Default{})
	var o Owner
	ask := Ask{Policy: Policy{Kind: Spread, Velocity: 1}, Secondary: Secondary{PointsPerMinute: 10},
		Cost: Cost{Points: 5, Endpoint: "GET /repos"}}
	notModified := &headers.Reading{Status: http.StatusNotModified, Limit: 5000, Remaining: 100, Used: 4900, Reset: reset}
	for i := range 10 {
		l := lz(t0)
		if _, w, err := Reserve([]Option{{Owner: &o, Bucket: &b}}, &ask, l, t0); w != 0 || err != nil {
			t.Fatalf("repeat %d waited %v (%v): a 304 was paced as if spent", i, w, err)
		}
		Settle(&o, &b, l.ID, &Answer{Reading: notModified, Counted: false}, t0)
	}
	// A charged answer keeps its pacing: the next waits.
	l := lz(t0)
	Reserve([]Option{{Owner: &o, Bucket: &b}}, &ask, l, t0)
	Settle(&o, &b, l.ID, &Answer{Reading: reading(5000, 99, reset), Counted: true}, t0)
	if _, w, _ := Reserve([]Option{{Owner: &o, Bucket: &b}}, &ask, lz(t0), t0); w == 0 {
		t.Fatal("a charged answer's pacing was given back")
	}
}

// A bucket nothing is known about holds its requests to one probe; once
// its server has answered without stating anything (and no default
// applies), another probe would tell no more, so nothing holds them. A
// server error proves nothing, and a later count makes it known again.
func TestSilentBucketNotHeldToOneProbe(t *testing.T) {
	p := Policy{Kind: Greedy}
	silent := &headers.Reading{Status: 200, Limit: UnknownCount, Remaining: UnknownCount, Used: UnknownCount}
	b := NewBucket()
	b.Reserve(p, lz(t0), t0)
	if w := b.Wait(p, t0); w == 0 {
		t.Fatal("a second request went beside the first probe of an unknown bucket")
	}
	failed := *silent
	failed.Status = 502
	settleOne(&b, &failed, t0.Add(time.Second), true, Default{})
	b.Reserve(p, lz(t0), t0.Add(time.Second))
	if w := b.Wait(p, t0.Add(time.Second)); w == 0 {
		t.Fatal("a 502 that stated nothing ended the probing")
	}
	settleOne(&b, silent, t0.Add(2*time.Second), true, Default{})
	for i := range 5 {
		if w := b.Reserve(p, lz(t0), t0.Add(2*time.Second)); w != 0 {
			t.Fatalf("request %d to a server that states nothing waited %v", i, w)
		}
	}
	b.Observe(reading(10, 0, t0.Add(time.Hour)), t0.Add(3*time.Second), true, Default{})
	if b.Silent || b.Wait(p, t0.Add(3*time.Second)) < time.Minute {
		t.Fatal("a stated count did not make the bucket known and spent")
	}
}
