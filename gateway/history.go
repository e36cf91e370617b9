package gateway

import (
	"sync"
	"time"
)

// HistoryMinutes is how many minutes the dashboard's chart covers.
const HistoryMinutes = 60

// Minute holds what the gateway did in one minute.
type Minute struct {
	// Start is the minute's first instant (UTC, whole minute).
	Start time.Time `json:"start"`
	// Requests counts the requests answered on proxy routes, whatever
	// their status.
	Requests int64 `json:"requests"`
	// Waits counts the requests that waited for quota before going
	// upstream; WaitSeconds is how long they waited in total.
	Waits       int64   `json:"waits"`
	WaitSeconds float64 `json:"wait_seconds"`
	// Refused counts the requests answered 429 because quota returns
	// later than the max wait.
	Refused int64 `json:"refused"`
	// Coalesced counts the requests answered with another request's
	// upstream response.
	Coalesced int64 `json:"coalesced"`
	// Cached counts the requests answered from the cache without going
	// upstream: a stored answer still fresh for its s-maxage (or one a
	// client's max-stale accepted rather than wait).
	Cached int64 `json:"cached"`
}

// History is a ring of per-minute counts over the last HistoryMinutes
// minutes, in memory: O(1) to add to, a fixed 60 slots whatever the
// traffic. Time is passed in. It is safe for concurrent use.
type History struct {
	mu    sync.Mutex
	slots [HistoryMinutes]Minute
}

// minuteOf truncates t to its minute, in UTC.
func minuteOf(t time.Time) time.Time { return t.UTC().Truncate(time.Minute) }

// slot returns the slot of now's minute, emptied first if it held an older
// minute. Callers hold h.mu.
func (h *History) slot(now time.Time) *Minute {
	start := minuteOf(now)
	m := &h.slots[slotIndex(start)]
	if !m.Start.Equal(start) {
		*m = Minute{Start: start}
	}
	return m
}

// Add applies fn to the counts of now's minute.
func (h *History) Add(now time.Time, fn func(*Minute)) {
	h.mu.Lock()
	fn(h.slot(now))
	h.mu.Unlock()
}

// Last returns the HistoryMinutes minutes ending with now's, oldest first;
// minutes without traffic are present with zero counts.
func (h *History) Last(now time.Time) []Minute {
	end := minuteOf(now)
	out := make([]Minute, HistoryMinutes)
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range out {
		start := end.Add(time.Duration(i-HistoryMinutes+1) * time.Minute)
		m := h.slots[slotIndex(start)]
		if !m.Start.Equal(start) {
			m = Minute{Start: start}
		}
		out[i] = m
	}
	return out
}

// slotIndex is the ring position of a minute, also for minutes before 1970.
func slotIndex(start time.Time) int {
	i := (start.Unix() / 60) % HistoryMinutes
	if i < 0 {
		i += HistoryMinutes
	}
	return int(i)
}
