package transport

import "time"

// Clock is the transport's one source of time: what it reads as now and
// the timers its waits sleep on. Options.Clock injects one; package
// testing/synctest's fake time also reaches the system one. New hands it
// to a State that keeps times or timers of its own (Clocked).
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is a Clock's timer: C delivers once when it fires; Stop stops it.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// AfterFuncClock is a Clock whose timers can run a function themselves,
// as the system's do (time.AfterFunc). Code that runs functions on a
// Clock's timers (store/quotastate) uses it when the Clock has it, and
// otherwise waits on NewTimer's channel on a goroutine of its own.
type AfterFuncClock interface {
	Clock
	AfterFunc(d time.Duration, f func()) *time.Timer
}

// SystemClock returns the system's clock: time.Now and the system's
// timers. It is the transport's when Options gives neither Clock nor Now.
func SystemClock() Clock { return systemClock{now: time.Now} }

// systemClock is the system's time (or Options.Now's) and timers.
type systemClock struct{ now func() time.Time }

func (c systemClock) Now() time.Time { return c.now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

func (systemClock) AfterFunc(d time.Duration, f func()) *time.Timer { return time.AfterFunc(d, f) }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }

// afterFunc runs f on a goroutine of its own after d on the transport's
// clock.
func (t *Transport) afterFunc(d time.Duration, f func()) {
	if c, ok := t.opts.Clock.(AfterFuncClock); ok {
		c.AfterFunc(d, f)
		return
	}
	tm := t.opts.Clock.NewTimer(d)
	go func() {
		<-tm.C()
		f()
	}()
}
