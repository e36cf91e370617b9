package quota

import (
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// Skew estimates how far a server's clock runs ahead of ours from the Date
// of its responses. A Date has one-second resolution and is stamped between
// the request's sending and the response's arrival, so each response
// bounds the skew s from both sides: Date − arrival ≤ s < Date + 1 s −
// sending.
//
// The estimate is the lower bound, whatever the upper: every time it
// converts is one the server named (a reset, a Retry-After date), a time
// to wait for, and only the lower bound never brings it early. Taking the
// clocks to agree whenever the bounds contain 0 saved up to a second at a
// reset while they were wide, and broke the promise by as much as the
// server's clock ran behind ours (the fleet simulation's memory seed
// 1186: 0.24 s). What the lower bound costs is the bounds'
// width, so Skew keeps the tightest it has seen rather than the last few:
// answers come in bursts at one fraction of a second (requests go out
// together at a reset), and a bound from another fraction, once
// forgotten, may not come again for a long while. One answer stamped just
// after the server's second turned and received quickly is enough.
//
// Clocks drift and get stepped: the bounds loosen by maxDrift with the
// time since they were last tightened, and a sample that contradicts them
// (a clock stepped further than they allow) widens them to the span of
// both, which holds the new skew whichever way the step went; the samples
// after it tighten them again. The zero value is ready to use; it is not
// safe for concurrent use.
type Skew struct {
	lo, hi time.Duration
	at     time.Time // local time the bounds were last aged to
	known  bool
}

// maxSkew bounds believable skew: a Date further off is a stale cached
// response, not a clock.
const maxSkew = 24 * time.Hour

// maxDrift is how fast two clocks are taken to drift apart, in parts per
// million: 100, twice a common crystal's tolerance (NTP slews a clock at
// up to 500, but only to undo an offset it found).
const maxDrift = 100

// Add records a response's Date, for a request sent at sent and answered
// at arrived (local clock). A zero sent means unknown: only the lower
// bound is learnt.
func (s *Skew) Add(serverTime, sent, arrived time.Time) {
	lo := serverTime.Sub(arrived)
	if serverTime.IsZero() || lo > maxSkew || lo < -maxSkew {
		return
	}
	hi := maxSkew
	if !sent.IsZero() && !sent.After(arrived) {
		hi = serverTime.Add(time.Second).Sub(sent)
	}
	if !s.known {
		s.lo, s.hi, s.at, s.known = lo, hi, arrived, true
		return
	}
	if d := arrived.Sub(s.at); d > 0 {
		loosen := time.Duration(int64(min(d, maxSkew)) / 1e6 * maxDrift)
		s.lo, s.hi, s.at = max(s.lo-loosen, -maxSkew), min(s.hi+loosen, maxSkew), arrived
	}
	if lo > s.hi || hi < s.lo {
		// A clock stepped (or this Date is stale): the span of both
		// holds the skew either way.
		s.lo, s.hi = min(s.lo, lo), max(s.hi, hi)
		return
	}
	s.lo, s.hi = max(s.lo, lo), min(s.hi, hi)
}

// Estimate is the current estimate: the lower bound, the safe side for a
// time the server named; 0 before any sample.
func (s *Skew) Estimate() time.Duration {
	if !s.known {
		return 0
	}
	return s.lo
}

// Bounds are the current bounds on the skew, both 0 before any sample.
func (s *Skew) Bounds() (lo, hi time.Duration) {
	if !s.known {
		return 0, 0
	}
	return s.lo, s.hi
}

// Read parses a response received at now (local clock) from a server whose
// clock runs skew ahead of ours, and returns a reading whose times are all
// on the local clock: absolute resets are moved by the skew, relative ones
// are measured from now. This is the one place clock skew is corrected.
//
// The reset stays on the server's clock too (Reading.ServerReset): skew is
// an estimate, good to a second and an answer's latency, and processes
// estimating it each from their own answers disagree on a window's reset
// by as much; the bucket tells windows apart by ServerReset.
func Read(status int, h http.Header, body []byte, now time.Time, skew time.Duration) headers.Reading {
	r := headers.Parse(status, h, body, now.Add(skew))
	if skew != 0 && r.HasReset() {
		r.Reset = r.Reset.Add(-skew)
	}
	return r
}
