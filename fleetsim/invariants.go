package fleetsim

import (
	"fmt"
	"time"
)

// Invariant names, as a failure prints them.
const (
	// InvAdmitted: after an answer states R remaining in a window, the
	// fleet sends at most R more requests in that window, counting from
	// Reach after the answer left (those in flight then are not counted).
	InvAdmitted = "admitted"
	// InvRefusedScope: after a refusal names a time (Retry-After, the
	// reset of an empty bucket, a minute for a secondary refusal without
	// one or a refusal stating nothing), nothing is sent to the refused
	// scope before it, counting from Reach after the refusal left.
	InvRefusedScope = "refused-scope"
	// InvWriteSpacing: two writes of the fleet arrive at least the
	// configured write spacing apart.
	InvWriteSpacing = "write-spacing"
	// InvLeases: a killed process's leases (units and concurrency slots)
	// are back within their bound: LeaseBoundSwept while another process
	// lives to prove it gone by its heartbeats, else the lease's length
	// (a block's: the length and quota.BlockMaxAge).
	InvLeases = "leases"
	// InvLearnt: a learnt endpoint limit is within 10 % of the server's
	// true limit after 3 clean windows.
	InvLearnt = "learnt-limit"
	// InvOnce: no request lost (every job of a live process ends with an
	// answer or an error) and no write processed twice.
	InvOnce = "once"
)

// Reach is the bound within which a reading or a refusal one process
// received reaches every process's next decision: the quota state writes
// an answer that pauses nothing at most DefaultFlushDelay (2 ms) after it
// came, and a refusal at once. The simulation's database takes no time
// on the simulated clock, so this is the whole delay.
const Reach = 2 * time.Millisecond

// AfterBlink is how long after the database comes back a process may
// still be waiting to try again (store's outage backoff: full jitter
// below a bound that doubles up to 2 s). A fact a process received while
// the database was away, or just before, reaches the others only when it
// writes it, so its bound is the blink's end plus AfterBlink plus Reach.
const AfterBlink = 2 * time.Second

// SecondaryWait and GitHubBareWait are the times a refusal names when it
// names none: GitHub's "at least a minute" for a secondary refusal
// without Retry-After, and for a refusal stating nothing (GitHub's rule
// for a client refused; issue 36, item 2).
const (
	SecondaryWait  = time.Minute
	GitHubBareWait = time.Minute
)

// LeaseBoundSwept is how long after a kill its holder's leases may stay
// while another process lives: its last heartbeat was at most
// HeartbeatEvery before the kill, it is gone HolderTimeout (30 s) after
// that beat, and every process sweeps every HolderTimeout.
const LeaseBoundSwept = 61 * time.Second

type refusalKind string

const (
	refusedNone      refusalKind = ""
	refusedPrimary   refusalKind = "primary"
	refusedSecondary refusalKind = "secondary"
	refusedEndpoint  refusalKind = "endpoint"
	refusedBare      refusalKind = "bare"
)

// Scopes a refusal pauses: the whole host (the owner's bucket, a
// secondary penalty) or the refused request's own scope: /search for the
// endpoint limit, and for a proxy's bare refusal, which names nothing,
// the narrowest scope the request belongs to (the client pauses the
// refused request's scope, as issue 36 asks: reads of /items/N, writes
// to /items, or searches; the other scopes go on, and are refused in
// their turn while the proxy refuses).
const (
	scopeHost   = "host"
	scopeSearch = "/search"
	scopeItems  = "/items/*"
	scopeWrites = "/items"
)

// scopeOf is the narrowest scope of req.
func scopeOf(req request) string {
	switch {
	case req.search:
		return scopeSearch
	case req.write:
		return scopeWrites
	}
	return scopeItems
}

// reading is the primary bucket as an answer stated it.
type reading struct {
	window    int64
	windowEnd time.Time
	remaining int
}

// Violation is one broken invariant.
type Violation struct {
	At        time.Duration // since the schedule's start
	Invariant string
	What      string
}

func (v Violation) String() string {
	return fmt.Sprintf("t=%v invariant %s: %s", v.At.Round(time.Microsecond), v.Invariant, v.What)
}

// referee judges what the server sees (under the server's lock).
type referee struct {
	start time.Time
	trace *trace
	// before is the trace as it stood at the first violation.
	before   []string
	faults   []Violation
	answers  []stated // readings of the primary bucket, in the current windows
	pauses   []pause
	blinks   []blink
	lastSend time.Time // the last write's arrival
}

type stated struct {
	reading
	proc   int       // the process it reached
	left   time.Time // when the answer left
	after  int       // fleet requests arrived since left+Reach in its window
	answer string
}

type blink struct{ from, to time.Time }

// reached returns when a fact that left at d has reached every process.
func (r *referee) reached(d time.Time) time.Time {
	at := d.Add(Reach)
	for _, b := range r.blinks {
		if !b.from.After(at) && !b.to.Add(AfterBlink).Before(d) {
			at = later(at, b.to.Add(AfterBlink+Reach))
		}
	}
	return at
}

// blinkedBetween reports whether the database was away, or processes may
// still have been waiting to try again (AfterBlink), between from and to.
func (r *referee) blinkedBetween(from, to time.Time) bool {
	for _, b := range r.blinks {
		if !b.from.After(to) && !b.to.Add(AfterBlink).Before(from) {
			return true
		}
	}
	return false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

type pause struct {
	proc       int // the process the refusal reached
	scope      string
	left, till time.Time
	kind       refusalKind
	what       string
}

func (r *referee) violate(now time.Time, inv, what string) {
	if len(r.faults) == 0 && r.trace != nil {
		r.trace.add(now, "VIOLATION of %s", inv)
		r.before = r.trace.lines()
	}
	r.faults = append(r.faults, Violation{At: now.Sub(r.start), Invariant: inv, What: what})
}

// spends judges a request of the fleet that reached the primary limit at
// now (one a secondary or endpoint limit refused first spends nothing).
func (r *referee) spends(now time.Time, req request) {
	kept := r.answers[:0]
	for i := range r.answers {
		a := &r.answers[i]
		if !now.Before(a.windowEnd) {
			continue // a later window: the answer no longer binds
		}
		kept = append(kept, *a)
		if now.After(r.reached(a.left)) {
			kept[len(kept)-1].after++
			if n := kept[len(kept)-1].after; n > a.remaining {
				r.violate(now, InvAdmitted, fmt.Sprintf("%v is the %d. request sent after the answer to %s left at t=%v stating %d remaining until t=%v",
					req, n, a.answer, a.left.Sub(r.start), a.remaining, a.windowEnd.Sub(r.start)))
			}
		}
	}
	r.answers = kept
}

// arrived judges a request of the fleet arriving at now.
func (r *referee) arrived(now time.Time, req request) {
	live := r.pauses[:0]
	for _, p := range r.pauses {
		if !now.Before(p.till) {
			continue
		}
		live = append(live, p)
		if (p.scope == scopeHost || p.scope == scopeOf(req)) && now.After(r.reached(p.left)) {
			r.violate(now, InvRefusedScope, fmt.Sprintf("%v arrived %v after the %s refusal of %s left (t=%v), which named t=%v",
				req, now.Sub(p.left), p.kind, p.what, p.left.Sub(r.start), p.till.Sub(r.start)))
		}
	}
	r.pauses = live
}

// judgeWrite checks the spacing of a write arriving at now, across a
// database blink too: a reservation that waited one out is decided when
// it is decided, and spaces the next write from then (memory seed 1050;
// see docs/simulation.md).
func (r *referee) judgeWrite(now time.Time, req request, spacing time.Duration) {
	if spacing > 0 && !r.lastSend.IsZero() && now.Sub(r.lastSend) < spacing {
		r.violate(now, InvWriteSpacing, fmt.Sprintf("%v arrived %v after the previous write; the spacing is %v", req, now.Sub(r.lastSend), spacing))
	}
	r.lastSend = now
}

// delivered records an answer that reached its client at now.
func (r *referee) delivered(now time.Time, req request, a answer) {
	if a.primary != nil {
		r.answers = append(r.answers, stated{reading: *a.primary, proc: req.proc, left: now, answer: req.String()})
	}
	if a.until != nil {
		till := a.until(now)
		if !a.named {
			// A refusal naming no time, of a request sent before an
			// earlier refusal of the scope left, is of the same
			// episode: the pause counts from the first.
			for _, p := range r.pauses {
				if p.scope == a.scope && p.kind == a.kind && p.left.After(req.arrived) {
					return
				}
			}
		}
		r.pauses = append(r.pauses, pause{proc: req.proc, scope: a.scope, left: now, till: till, kind: a.kind, what: req.String()})
	}
}

// forget drops the readings and refusals that reached process proc, killed
// at now, before they could reach the others (reached: Reach after they
// left, or, across a database blink, AfterBlink after it): no process
// can keep what nobody told it. A refusal that reached a process during a
// blink is written when the database comes back; killed before that, the
// process takes it along, and the fleet learns it only from the server
// (memory seed 7889: killed 0.3 s after the blink it had received a
// search's refusal in).
func (r *referee) forget(now time.Time, proc int) {
	answers := r.answers[:0]
	for _, a := range r.answers {
		if a.proc != proc || !r.reached(a.left).After(now) {
			answers = append(answers, a)
		}
	}
	r.answers = answers
	pauses := r.pauses[:0]
	for _, p := range r.pauses {
		if p.proc != proc || !r.reached(p.left).After(now) {
			pauses = append(pauses, p)
		}
	}
	r.pauses = pauses
}
