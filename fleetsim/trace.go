package fleetsim

import (
	"fmt"
	"sync"
	"time"
)

// trace keeps the last steps of a schedule, for a failure's report.
type trace struct {
	start time.Time
	mu    sync.Mutex
	ring  []string
	next  int
	full  bool
}

func newTrace(n int) *trace { return &trace{ring: make([]string, n)} }

func (t *trace) add(now time.Time, format string, args ...any) {
	line := fmt.Sprintf("t=%-12v ", now.Sub(t.start).Round(time.Microsecond)) + fmt.Sprintf(format, args...)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ring[t.next] = line
	t.next = (t.next + 1) % len(t.ring)
	if t.next == 0 {
		t.full = true
	}
}

// lines returns the steps kept, oldest first.
func (t *trace) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.full {
		return append([]string(nil), t.ring[:t.next]...)
	}
	return append(append([]string(nil), t.ring[t.next:]...), t.ring[:t.next]...)
}
