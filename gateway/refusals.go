package gateway

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// refusalLogEvery is the most often one reason of refusal is logged: a
// flood of slow connections or bad requests makes a line every ten
// seconds with its count, not a line each.
const refusalLogEvery = 10 * time.Second

// refusalLog logs refusals at most once per reason every refusalLogEvery.
// The first refusal after a quiet period is logged at once; those that
// follow within the period are counted and logged together when it ends.
type refusalLog struct {
	log   *slog.Logger
	every time.Duration
	why   func(reason string) string // what a reason means, for the reader of the log

	mu      sync.Mutex
	reasons map[string]*refusals
	closed  bool
}

// refusals are the unlogged refusals of one reason.
type refusals struct {
	count  int
	last   string    // the latest client address, when known
	logged time.Time // when the reason was last logged
	timer  *time.Timer
}

func newRefusalLog(log *slog.Logger, why func(string) string) *refusalLog {
	return &refusalLog{log: log, every: refusalLogEvery, why: why, reasons: map[string]*refusals{}}
}

// add records one refusal for reason, from address when it is known.
func (l *refusalLog) add(reason, address string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.reasons[reason]
	if r == nil {
		r = &refusals{}
		l.reasons[reason] = r
	}
	r.count++
	r.last = address
	switch {
	case r.timer != nil || l.closed:
	case now.Sub(r.logged) >= l.every:
		l.writeLocked(reason, r, now)
	default:
		r.timer = time.AfterFunc(r.logged.Add(l.every).Sub(now), func() { l.flush(reason) })
	}
}

// flush logs what reason gathered since it was last logged.
func (l *refusalLog) flush(reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.reasons[reason]; r != nil {
		r.timer = nil
		l.writeLocked(reason, r, time.Now())
	}
}

func (l *refusalLog) writeLocked(reason string, r *refusals, now time.Time) {
	if r.count == 0 {
		return
	}
	l.log.Warn("refused", "reason", reason, "count", r.count, "last_client", r.last, "why", l.why(reason))
	r.count, r.logged = 0, now
}

// close logs what is pending and stops the timers.
func (l *refusalLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	now := time.Now()
	for reason, r := range l.reasons {
		if r.timer != nil {
			r.timer.Stop()
			r.timer = nil
		}
		l.writeLocked(reason, r, now)
	}
}

// refusalWhy says in the log what a reason of refusal means.
func (g *Gateway) refusalWhy(reason string) string {
	switch reason {
	case reasonUnauthenticated:
		return fmt.Sprintf("new connections answered 503: %d connections had not presented a client key (--max-unauthenticated)", g.conns.max)
	case reasonAddress:
		return fmt.Sprintf("connections closed to make room for newer ones from their address: it held %d or more that had sent no request for %s (--max-pending-per-address)", g.conns.perAddress, slowHeader)
	case reasonHeaderTimeout:
		return fmt.Sprintf("connections closed: no request header within %s", shortDuration(min(headerTimeout, g.readTimeout)))
	}
	return "requests the gateway answered itself with an error (the answer says why)"
}
