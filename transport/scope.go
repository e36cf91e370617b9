package transport

import (
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// scopeTally keeps, per scope of one owner, when this process saw its
// requests succeed over the last hour: what a first refusal of a scope
// nothing was known of guesses its limit from when the refusal does not
// state it (see quota.Answer.Succeeded), a lower bound in a fleet. Once
// the scope is known the State counts the whole fleet's successes
// (quota.Bucket.Counted). Only scoped requests of the APIs that have
// scopes (GitLab, generic hosts) are counted here, in memory.
type scopeTally struct {
	mu sync.Mutex
	at map[BucketID][]time.Time
}

// scopeMemory is how far back successes are kept: the longest common
// window a learnt limit's is rounded to.
const scopeMemory = time.Hour

// answered records an answer of scope id at now (one the server charged
// that is no refusal is counted, a server error too: the server may have
// processed and counted it, as the State does) and returns the count of the scope's successes
// since a time, for the scope to learn its limit from (see
// quota.Answer.Succeeded).
func (s *scopeTally) answered(id BucketID, r *headers.Reading, counted bool, now time.Time) func(since time.Time) int64 {
	if r.Limited == headers.NotLimited && counted {
		s.mu.Lock()
		if s.at == nil {
			s.at = map[BucketID][]time.Time{}
		}
		ts := s.at[id]
		drop := 0
		for drop < len(ts) && now.Sub(ts[drop]) > scopeMemory {
			drop++
		}
		s.at[id] = append(ts[drop:], now)
		s.mu.Unlock()
	}
	return func(since time.Time) int64 { return s.since(id, since) }
}

// since counts the successes of scope id at or after t.
func (s *scopeTally) since(id BucketID, t time.Time) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	ts := s.at[id]
	for i := len(ts) - 1; i >= 0 && !ts[i].Before(t); i-- {
		n++
	}
	return n
}
