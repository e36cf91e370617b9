package quota

import (
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// Skew estimates how far a server's clock runs ahead of ours from the Date
// of its responses. A Date has one-second resolution and is stamped between
// the request's sending and the response's arrival, so each response
// bounds the skew s from both sides: Date − arrival < s ≤ Date + 1 s −
// sending. The estimate keeps the tightest bounds of the recent samples:
//
//   - when they contain 0, the clocks agree as far as a Date can tell, and
//     the estimate is 0 (servers keep their clocks by NTP; taking the
//     lower bound instead would wait up to a second too long at every
//     reset whenever answers arrive at the same fraction of a second, as
//     they do when requests go out together at a reset);
//   - otherwise the lower bound, the safe side: an absolute reset moved by
//     it is never early.
//
// Many samples are kept: answers often arrive in bursts at the same
// fraction of a second, and bounds from varied fractions are tighter. The
// zero value is ready to use; it is not safe for concurrent use.
type Skew struct {
	lower, upper [128]time.Duration
	n, next      int
}

// maxSkew bounds believable skew: a Date further off is a stale cached
// response, not a clock.
const maxSkew = 24 * time.Hour

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
	s.lower[s.next], s.upper[s.next] = lo, hi
	s.next = (s.next + 1) % len(s.lower)
	if s.n < len(s.lower) {
		s.n++
	}
}

// Estimate is the current estimate, 0 before any sample.
func (s *Skew) Estimate() time.Duration {
	if s.n == 0 {
		return 0
	}
	lo, hi := s.lower[0], s.upper[0]
	for i := 1; i < s.n; i++ {
		lo, hi = max(lo, s.lower[i]), min(hi, s.upper[i])
	}
	if lo <= 0 && 0 <= hi {
		return 0
	}
	return lo
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
