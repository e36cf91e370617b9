package quotastate

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/transport"
)

// One clock for shared times. Leases, pacing times, pauses and heartbeats
// are absolute times that other processes compare with their own now: if
// each wrote its machine's clock, a machine 3 s behind would see every
// pause end 3 s early and overspend. So the State writes and compares them
// on the database's clock (store.Clock): it measures this process's
// offset to it — the database's time less the midpoint of the round trip
// that read it, the sample with the shortest round trip of 3 to 10 — and
// adds it to every time the transport gives, before the shared state sees
// it, and takes it off the heartbeats it reads back. Durations (waits)
// need no translation. The offset is measured at the first use and again
// every ClockCheck, in the background; its error is at most half a round
// trip to the database.
//
// On SQLite and the memory store every process shares one machine, whose
// clock is the database's (Options.Now): the offset is the one between
// the transport's clock and that, 0 unless a test injects a clock.
//
// The transport's clock is the State's one clock for the rest too
// (UseClock, transport.Clocked): the age of the rows it saw (view.go) and
// of its blocks, and its timers — the one that writes answers later
// (FlushDelay) and the one that expires blocks — are on it, so a test
// that injects a clock moves them all. Without UseClock it is the
// system's.

// ClockCheck is how often a State measures its offset to the database's
// clock again: often enough to follow a machine clock that NTP slews (at
// most 0.5 ms a second), rarely enough to cost nothing.
const ClockCheck = time.Minute

// A measurement takes at least minClockSamples round trips and goes on,
// up to maxClockSamples, while the shortest is above goodRoundTrip: the
// offset's error is at most half the shortest, and a loaded machine or
// network makes some round trips long.
const (
	minClockSamples = 3
	maxClockSamples = 10
	goodRoundTrip   = 5 * time.Millisecond
)

type clock struct {
	// src is the transport's clock (UseClock); nil: the system's. Read
	// without mu: every decision reads the time.
	src      atomic.Pointer[clockRef]
	mu       sync.Mutex
	offset   time.Duration // database time − transport time
	measured time.Time     // when (transport time); zero: never
	// measuring is held (a value in it) by the one measurement under
	// way. A channel, not a lock: a measurement may wait out a database
	// outage on a timer, and a wait on a channel is one testing/synctest
	// sees blocked, so a simulated clock goes on meanwhile.
	measuring chan struct{}
}

// clockRef holds a transport.Clock for an atomic.Pointer.
type clockRef struct{ c transport.Clock }

var systemClock = transport.SystemClock()

// UseClock implements transport.Clocked: c is the transport's clock. The
// State reads the time on it (its decisions, the age of what it saw, of
// its blocks), sets its timers on it (writing answers later, expiring
// blocks), and measures and applies its offset to the database's clock.
// Without it the State uses the system's clock. Call it before any use:
// timers already set stay on the clock they were set on.
func (st *State) UseClock(c transport.Clock) {
	if c == nil {
		return
	}
	st.clk.mu.Lock()
	defer st.clk.mu.Unlock()
	st.clk.src.Store(&clockRef{c})
	st.clk.measured = time.Time{}
}

// clock is the State's clock: the transport's, else the system's.
func (st *State) clock() transport.Clock {
	if r := st.clk.src.Load(); r != nil {
		return r.c
	}
	return systemClock
}

// now is the time on the State's clock.
func (st *State) now() time.Time { return st.clock().Now() }

// alarm is time.AfterFunc on a transport.Clock: f runs on a goroutine of
// its own once the clock's timer fires. On a clock whose timers run
// functions themselves (transport.AfterFuncClock, the system's) it is
// theirs. On another, a goroutine waits on the timer's channel while the
// alarm is set, and Stop or Reset ends it: a stopped alarm leaves no
// goroutine behind, and f does not start after Stop returns.
type alarm struct {
	sys  *time.Timer // the clock's own AfterFunc
	clk  transport.Clock
	f    func()
	mu   sync.Mutex
	t    transport.Timer // the timer set; nil: none
	stop chan struct{}   // closed to end the wait on t
}

// afterFunc sets an alarm running f after d on c.
func afterFunc(c transport.Clock, d time.Duration, f func()) *alarm {
	if ac, ok := c.(transport.AfterFuncClock); ok {
		return &alarm{sys: ac.AfterFunc(d, f)}
	}
	a := &alarm{clk: c, f: f}
	a.Reset(d)
	return a
}

// Reset sets a to run f after d, whether or not it ran or was stopped, as
// time.Timer.Reset does; a run under way goes on.
func (a *alarm) Reset(d time.Duration) {
	if a.sys != nil {
		a.sys.Reset(d)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopLocked()
	stop := make(chan struct{})
	a.t, a.stop = a.clk.NewTimer(d), stop
	go a.wait(a.t.C(), stop)
}

// wait runs f when the timer fires (c), unless stop closes first.
func (a *alarm) wait(c <-chan time.Time, stop chan struct{}) {
	select {
	case <-c:
	case <-stop:
		return
	}
	a.mu.Lock()
	current := a.stop == stop // not stopped or set again meanwhile
	if current {
		a.t, a.stop = nil, nil
	}
	a.mu.Unlock()
	if current {
		a.f()
	}
}

// Stop stops a; a run under way goes on.
func (a *alarm) Stop() {
	if a.sys != nil {
		a.sys.Stop()
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopLocked()
}

func (a *alarm) stopLocked() {
	if a.t != nil {
		a.t.Stop()
		close(a.stop)
		a.t, a.stop = nil, nil
	}
}

// clockKnown reports whether the offset was measured: ClockOffset then
// does no I/O in its caller's context.
func (st *State) clockKnown() bool {
	st.clk.mu.Lock()
	defer st.clk.mu.Unlock()
	return !st.clk.measured.IsZero()
}

// ClockOffset returns the offset applied to the transport's times: the
// database's clock less the transport's. The first call measures it, and
// every call until then waits for that measurement. While no measurement
// has succeeded it returns 0; the State's own decisions do not use that
// (see offset).
func (st *State) ClockOffset(ctx context.Context) time.Duration {
	off, _ := st.offset(ctx)
	return off
}

// errClockUnknown is returned for a decision that would need the offset
// to the database's clock while no measurement of it has succeeded.
var errClockUnknown = errors.New("quota state: the offset to the database's clock is not known yet")

// offset is ClockOffset for a decision: until a measurement succeeds it
// fails (with the measurement's error, or errClockUnknown), as a decision
// taken as if the offset were 0 would compare this process's times with
// the others' on two clocks (a pause written 2.5 s short by a process that
// far behind). A measurement that fails is tried again at the next call.
func (st *State) offset(ctx context.Context) (time.Duration, error) {
	for {
		now := st.now()
		st.clk.mu.Lock()
		if st.clk.measuring == nil {
			st.clk.measuring = make(chan struct{}, 1)
		}
		sem := st.clk.measuring
		if !st.clk.measured.IsZero() {
			off := st.clk.offset
			if now.Sub(st.clk.measured) >= ClockCheck {
				select {
				case sem <- struct{}{}:
					go st.remeasure()
				default: // a measurement is under way
				}
			}
			st.clk.mu.Unlock()
			return off, nil
		}
		st.clk.mu.Unlock()
		// The first decision waits for the measurement: until then no
		// time of this process can be compared with the others'.
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return 0, errors.Join(errClockUnknown, ctx.Err())
		}
		var err error
		if !st.clockKnown() {
			err = st.measure(ctx)
		}
		<-sem
		if err != nil {
			return 0, errors.Join(errClockUnknown, err)
		}
	}
}

// knownOffset is the offset last measured, without measuring.
func (st *State) knownOffset() time.Duration {
	st.clk.mu.Lock()
	defer st.clk.mu.Unlock()
	return st.clk.offset
}

// remeasure measures again in the background; the caller took measuring.
func (st *State) remeasure() {
	defer func() { <-st.clk.measuring }()
	ctx, cancel := context.WithTimeout(context.Background(), st.txTimeout(settleTimeout))
	defer cancel()
	st.measure(ctx)
}

// measure measures the offset, holding measuring. On failure it keeps the
// last one and tries again at the next ClockCheck; a first measurement
// that fails leaves the offset unknown, measured again at the next call.
func (st *State) measure(ctx context.Context) error {
	now := st.clock().Now
	at := now()
	c, ok := st.s.(store.Clock)
	if !ok {
		st.clk.mu.Lock()
		st.clk.measured = at
		st.clk.mu.Unlock()
		return nil
	}
	best := time.Duration(-1)
	var offset time.Duration
	for i := 0; i < maxClockSamples && (i < minClockSamples || best > goodRoundTrip); i++ {
		t0 := now()
		db, err := c.DatabaseNow(ctx)
		t1 := now()
		if err != nil {
			st.clk.mu.Lock()
			defer st.clk.mu.Unlock()
			if !st.clk.measured.IsZero() {
				st.clk.measured = at // the last offset holds until the next check
				st.log.Warn("quota state: reading the database's clock failed; keeping the last offset", "err", err)
			}
			return err
		}
		if rtt := t1.Sub(t0); best < 0 || rtt < best {
			best = rtt
			offset = db.Sub(t0.Add(rtt / 2))
		}
	}
	st.clk.mu.Lock()
	st.clk.offset, st.clk.measured = offset, at
	st.clk.mu.Unlock()
	return nil
}

// shift moves t by d, leaving a zero time (unknown) zero.
func shift(t time.Time, d time.Duration) time.Time {
	if d == 0 || t.IsZero() {
		return t
	}
	return t.Add(d)
}

// settleOnDBClock returns a copy of p with its times on the database's
// clock; p, which the caller keeps, is not changed.
func settleOnDBClock(p *transport.SettleParams, off time.Duration) *transport.SettleParams {
	c := *p
	c.Now = shift(p.Now, off)
	c.Answer.Sent = shift(p.Answer.Sent, off)
	if r := p.Answer.Reading; r != nil {
		rc := *r
		rc.Reset = shift(r.Reset, off)
		c.Answer.Reading = &rc
	}
	if count := p.Answer.Succeeded; count != nil {
		// The count is kept on the transport's clock.
		c.Answer.Succeeded = func(since time.Time) int64 { return count(shift(since, -off)) }
	}
	return &c
}

// reserveOnDBClock moves p's times to the database's clock and returns
// what puts them back, and fresh, which moves them on by the time passed
// since p.Now on p.Clock (nothing without one). A reservation is decided
// at the time its decision is taken, not at the time it was asked for:
// one that waited out a database outage, or its turn behind other
// transactions, would otherwise commit a decision of the past — a write
// that asked before an outage and went after it spaced the next write
// from when it asked, not from when it went, and two writes that waited
// out a blink went closer than the write spacing.
func reserveOnDBClock(p *transport.ReserveParams, off time.Duration) (restore, fresh func()) {
	now, until := p.Now, p.Lease.Until
	p.Now, p.Lease.Until = shift(now, off), shift(until, off)
	at, end, clock := p.Now, p.Lease.Until, p.Clock
	return func() { p.Now, p.Lease.Until = now, until },
		func() {
			if clock == nil {
				return
			}
			if d := clock().Sub(now); d > 0 {
				p.Now = at.Add(d)
				if !end.IsZero() {
					p.Lease.Until = end.Add(d)
				}
			}
		}
}

// bucketOnLocalClock returns b with its times moved by −off, from the
// database's clock back to the transport's, for status displays.
func bucketOnLocalClock(b quota.Bucket, off time.Duration) quota.Bucket {
	b.Reset, b.BlockedUntil = shift(b.Reset, -off), shift(b.BlockedUntil, -off)
	b.TAT, b.Observed = shift(b.TAT, -off), shift(b.Observed, -off)
	b.EpisodeAt, b.RefusedAt = shift(b.EpisodeAt, -off), shift(b.RefusedAt, -off)
	b.NamedEnd = shift(b.NamedEnd, -off)
	b.Leases = leasesOnLocalClock(b.Leases, off)
	if len(b.Unstated) > 0 {
		unstated := make([]time.Time, len(b.Unstated))
		for i, at := range b.Unstated {
			unstated[i] = shift(at, -off)
		}
		b.Unstated = unstated
	}
	return b
}

// ownerOnLocalClock is bucketOnLocalClock for an owner.
func ownerOnLocalClock(o quota.Owner, off time.Duration) quota.Owner {
	o.PenaltyUntil, o.CapAt, o.NextWrite = shift(o.PenaltyUntil, -off), shift(o.CapAt, -off), shift(o.NextWrite, -off)
	o.PenaltyAt = shift(o.PenaltyAt, -off)
	o.ContentMinute, o.ContentHour = o.ContentMinute.Shifted(-off), o.ContentHour.Shifted(-off)
	for k, sp := range o.Points {
		o.Points[k] = sp.Shifted(-off)
	}
	o.Leases = leasesOnLocalClock(o.Leases, off)
	return o
}

func leasesOnLocalClock(ls quota.Leases, off time.Duration) quota.Leases {
	for i := range ls {
		ls[i].Until, ls[i].PointsAt = shift(ls[i].Until, -off), shift(ls[i].PointsAt, -off)
	}
	return ls
}
