package poll

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// Offset returns a stable offset in [0, span) for the poller named
// workerID: the same ID always gets the same share of span, on every
// machine and in every version, and different IDs spread uniformly over
// it. A fleet of pollers started together with distinct IDs thus polls at
// different moments without hand-written offsets. An empty ID gets 0.
func Offset(workerID string, span time.Duration) time.Duration {
	return spread(Fraction(workerID), span)
}

// Fraction is Offset's share of the span: the first 53 bits of the ID's
// SHA-256 as a number in [0, 1); 0 for an empty ID.
func Fraction(workerID string) float64 {
	if workerID == "" {
		return 0
	}
	sum := sha256.Sum256([]byte(workerID))
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
}

// targetOffset is the first-poll offset of URL i of n polled by one
// poller: its worker's fraction, shifted by i/n, so that a poller's own
// URLs spread over span too.
func targetOffset(workerID string, i, n int, span time.Duration) time.Duration {
	f := Fraction(workerID)
	if n > 1 {
		f += float64(i) / float64(n)
		if f >= 1 {
			f--
		}
	}
	return spread(f, span)
}

func spread(f float64, span time.Duration) time.Duration {
	if span <= 0 {
		return 0
	}
	d := time.Duration(f * float64(span))
	if d >= span { // rounding at the very top
		d = span - 1
	}
	return d
}
