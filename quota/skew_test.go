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
