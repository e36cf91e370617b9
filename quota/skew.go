package quota

import (
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// Skew estimates how far a server's clock runs ahead of ours from the Date
// of its responses. A Date has one-second resolution and is stamped before
// the response travels, so each sample (Date − arrival) falls short of the
// true skew by up to a second plus the latency; the estimate is the
// largest of the recent samples. Many are kept: answers often arrive in
// bursts at the same fraction of a second, and a few of them alone would
// make the estimate up to a second too low (resets would then be waited
// for a second too long). The zero value is ready to use; it is not safe
// for concurrent use.
type Skew struct {
	samples [128]time.Duration
	n, next int
}

// maxSkew bounds believable skew: a Date further off is a stale cached
// response, not a clock.
const maxSkew = 24 * time.Hour

// Add records a response's Date, received at now.
func (s *Skew) Add(serverTime, now time.Time) {
	d := serverTime.Sub(now)
	if serverTime.IsZero() || d > maxSkew || d < -maxSkew {
		return
	}
	s.samples[s.next] = d
	s.next = (s.next + 1) % len(s.samples)
	if s.n < len(s.samples) {
		s.n++
	}
}

// Estimate is the current estimate, 0 before any sample.
func (s *Skew) Estimate() time.Duration {
	if s.n == 0 {
		return 0
	}
	est := s.samples[0]
	for _, d := range s.samples[1:s.n] {
		est = max(est, d)
	}
	return est
}

// Read parses a response received at now (local clock) from a server whose
// clock runs skew ahead of ours, and returns a reading whose times are all
// on the local clock: absolute resets are moved by the skew, relative ones
// are measured from now. This is the one place clock skew is corrected.
func Read(status int, h http.Header, body []byte, now time.Time, skew time.Duration) headers.Reading {
	r := headers.Parse(status, h, body, now.Add(skew))
	if skew != 0 && r.HasReset() {
		r.Reset = r.Reset.Add(-skew)
	}
	return r
}
