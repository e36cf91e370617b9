package demo

import (
	"sort"
	"time"
)

// QuotaETA is the least time the rest of the batch can take given the
// quota: every job left may cost one request, each owner's bucket holds
// what it has left now and refills to its limit at its reset, then every
// s.Window after that. ok is false when some owner's quota is not known.
// It assumes no repeat is free, and sending takes no time.
func QuotaETA(s Snapshot) (time.Duration, bool) {
	left := int64(s.Total - s.Done - s.Failed)
	if left <= 0 {
		return 0, true
	}
	type bucket struct {
		remaining, limit int64
		reset            time.Duration
	}
	var buckets []bucket
	seen := map[string]bool{}
	for _, t := range s.Tokens {
		if t.Owner == "" || seen[t.Owner] {
			continue
		}
		seen[t.Owner] = true
		if t.Remaining < 0 || t.Limit <= 0 {
			return 0, false
		}
		buckets = append(buckets, bucket{t.Remaining, t.Limit, t.ResetsIn})
	}
	if len(buckets) == 0 || s.Window <= 0 {
		return 0, false
	}
	for _, b := range buckets {
		left -= b.remaining
	}
	if left <= 0 {
		return 0, true
	}
	// Refills in time order: each bucket at its reset, then every window.
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].reset < buckets[j].reset })
	for round := time.Duration(0); ; round++ {
		for _, b := range buckets {
			left -= b.limit
			if left <= 0 {
				return b.reset + round*s.Window, true
			}
		}
	}
}

// BatchETA estimates the time left: the larger of the pace so far
// projected to the end, and the least time the quota allows.
func BatchETA(s Snapshot) (time.Duration, bool) {
	avg, ok := ETA(s.Elapsed, s.Done+s.Failed, s.Total)
	q, qok := QuotaETA(s)
	switch {
	case ok && qok:
		return max(avg, q), true
	case qok:
		return q, true
	}
	return avg, ok
}
