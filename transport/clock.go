package transport

import "time"

// Clock is the transport's one source of time: what it reads as now and
// the timers its waits sleep on. Options.Clock injects one; package
// testing/synctest's fake time also reaches the system one.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is a Clock's timer: C delivers once when it fires; Stop stops it.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// systemClock is the system's time (or Options.Now's) and timers.
type systemClock struct{ now func() time.Time }

func (c systemClock) Now() time.Time { return c.now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }
