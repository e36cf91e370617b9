package quota

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// Two processes estimate the server's clock each from its Dates (whole
// seconds), one right, one 1.9 s short; their readings of one window
// (GitHub's absolute reset) state resets 1.9 s apart on their clocks,
// beyond sameWindowTolerance. The bucket took the later for the window's
// and dropped the other process's readings as from an older window, so
// remaining stayed high and the fleet overspent (the fleet simulation's
// memory seeds 10 and 94, -sim.skew). Compared on the server's clock, they
// are one window, in either order; a reading of the next window is still
// a new window.
func TestReadingsOfOneWindowAgreeOnTheServersClock(t *testing.T) {
	skew := 3 * time.Second // the server's clock runs ahead of ours
	window := 7 * time.Second
	srvReset := t0.Add(skew + 5*time.Second)
	answer := func(remaining int, reset, at time.Time) http.Header {
		h := http.Header{}
		h.Set("Date", at.Add(skew).UTC().Format(http.TimeFormat))
		h.Set("X-Ratelimit-Limit", "8")
		h.Set("X-Ratelimit-Remaining", strconv.Itoa(remaining))
		h.Set("X-Ratelimit-Reset", strconv.FormatInt(reset.Unix(), 10))
		return h
	}
	right, short := skew, skew-1900*time.Millisecond
	at := t0.Add(500 * time.Millisecond)
	early := Read(http.StatusOK, answer(5, srvReset, at), nil, at, short) // reset 1.9 s late on our clock
	later := Read(http.StatusOK, answer(3, srvReset, at), nil, at, right) // the true reset
	if d := early.Reset.Sub(later.Reset); d < 1800*time.Millisecond {
		t.Fatalf("the two estimates' resets are %v apart, want 1.9 s (the test's premise)", d)
	}
	for _, order := range [][2]int{{0, 1}, {1, 0}} {
		b := NewBucket()
		b.Window = window
		for _, i := range order {
			r := early
			if i == 1 {
				r = later
			}
			b.Observe(&r, at, true, Default{})
		}
		if b.Remaining != 3 {
			t.Errorf("order %v: remaining %d, want 3: a reading of the window was dropped as from another", order, b.Remaining)
		}
		if !b.Reset.Equal(early.Reset) {
			t.Errorf("order %v: reset %v, want the later of the two (%v), the safe side", order, b.Reset, early.Reset)
		}
		next := Read(http.StatusOK, answer(7, srvReset.Add(window), at.Add(6*time.Second)), nil, at.Add(6*time.Second), right)
		b.Observe(&next, at.Add(6*time.Second), true, Default{})
		if b.Remaining != 7 {
			t.Errorf("order %v: the next window's reading left remaining %d, want 7", order, b.Remaining)
		}
	}
}

// skewSample is the Date of an answer to a request sent at sent (our
// clock), stamped up after it by a server whose clock runs skew ahead of
// ours and received down after that.
func skewSample(s *Skew, sent time.Time, skew, up, down time.Duration) {
	s.Add(sent.Add(up+skew).Truncate(time.Second), sent, sent.Add(up+down))
}

// A server 0.24 s behind us, whose answers are stamped at 0.3, 0.5 and
// 0.7 s into our seconds: the bounds on its clock, [−0.34 s, 0.3 s],
// contain 0, and taking the clocks to agree put the reset of a window,
// a whole second on the server's clock, 0.24 s early on ours: the fleet
// went before the server's reset (the fleet simulation's memory seed
// 1186, -sim.skew). The estimate is the lower bound: the reset comes at
// most the bounds' width late, never early. A burst of answers at one
// fraction after them (requests that went out together at the reset) does
// not forget the tightest bound, and a clock stepped beyond the bounds
// widens them to hold the new skew.
func TestResetOfAServerBehindUsIsNeverEarly(t *testing.T) {
	skew := -240 * time.Millisecond
	up, down := 10*time.Millisecond, 30*time.Millisecond
	var s Skew
	for i, frac := range []time.Duration{300, 500, 700} {
		skewSample(&s, t0.Add(time.Duration(i)*time.Second+frac*time.Millisecond-up), skew, up, down)
	}
	if lo, hi := s.Bounds(); lo > skew || hi < skew || lo > 0 || hi < 0 {
		t.Fatalf("bounds [%v, %v], want them to hold %v and 0 (the test's premise)", lo, hi, skew)
	}
	srvReset := t0.Add(10 * time.Second) // whole seconds, on the server's clock
	h := http.Header{}
	h.Set("X-RateLimit-Limit", "7")
	h.Set("X-RateLimit-Remaining", "0")
	h.Set("X-RateLimit-Reset", strconv.FormatInt(srvReset.Unix(), 10))
	now := t0.Add(3 * time.Second)
	h.Set("Date", now.Add(skew).UTC().Format(http.TimeFormat))
	trueReset := srvReset.Add(-skew) // on our clock
	check := func(when string) {
		t.Helper()
		r := Read(http.StatusForbidden, h, nil, now, s.Estimate())
		if r.Reset.Before(trueReset) {
			t.Fatalf("%s: reset %v before the server's (%v on our clock): early by %v",
				when, r.Reset.Format("15:04:05.000"), trueReset.Format("15:04:05.000"), trueReset.Sub(r.Reset))
		}
		if late := r.Reset.Sub(trueReset); late > 150*time.Millisecond {
			t.Fatalf("%s: reset %v late, want at most the bounds' width", when, late)
		}
	}
	check("three answers")
	for i := range 300 {
		skewSample(&s, t0.Add(time.Duration(3+i)*time.Second+900*time.Millisecond-up), skew, up, down)
	}
	now = t0.Add(303 * time.Second)
	check("300 answers at 0.9 s after them")

	// Our clock steps 1.5 s ahead (the server is then 1.74 s behind):
	// one answer beyond the bounds widens them to hold it.
	skew -= 1500 * time.Millisecond
	skewSample(&s, t0.Add(304*time.Second+400*time.Millisecond), skew, up, down)
	if lo, hi := s.Bounds(); lo > skew || hi < skew {
		t.Fatalf("bounds [%v, %v] after a step, want them to hold %v", lo, hi, skew)
	}
}
