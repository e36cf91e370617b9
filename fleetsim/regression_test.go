package fleetsim_test

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/fleetsim"
)

// TestBlinkAtStartKeepsTheClockGoing: the database blinks while three
// processes make their first reservations. The first heartbeat (under a
// sync.Once), the clock's first measurement and Flush (under locks) each
// waited out the outage's backoff while other goroutines queued on their
// locks; a goroutine blocked on a lock is not durably blocked, so the
// simulated clock stopped and the schedule never ended (memory seeds 1
// and 56 hung so). They wait on channels now.
func TestBlinkAtStartKeepsTheClockGoing(t *testing.T) {
	p := fleetsim.Draw(1, fleetsim.Switches{})
	p.Processes, p.Skews = 3, []time.Duration{0, 0, 0}
	p.Events = []fleetsim.Event{{At: 0, Kind: fleetsim.EvBlink, D: 3 * time.Second}}
	for i := range 30 {
		p.Events = append(p.Events, fleetsim.Event{At: time.Duration(i) * 100 * time.Millisecond, Kind: fleetsim.EvRead, Proc: i % 3, N: i + 1})
	}
	done := make(chan struct{})
	watchdog := time.AfterFunc(time.Minute, func() {
		select {
		case <-done:
		default:
			panic("the schedule is stuck: the simulated clock stopped")
		}
	})
	defer watchdog.Stop()
	res := fleetsim.Run(t, p, fleetsim.Options{})
	close(done)
	if res.Failed() {
		t.Fatal(res.Report("go test ./fleetsim -run TestBlinkAtStartKeepsTheClockGoing"))
	}
	if res.Sent < 30 {
		t.Fatalf("%d of 30 requests reached the server", res.Sent)
	}
}

// TestScheduleEndsAfterAHeartbeatInABlink: memory seed 1947 ended while a
// process's heartbeat was waiting out a database blink in the outage's
// backoff; closing the transport did not stop it, and synctest failed the
// schedule ("main bubble goroutine has exited but blocked goroutines
// remain"). Close cancels a beat under way and waits for it now. The
// goroutines' interleaving varies, so the seed runs a few times.
func TestScheduleEndsAfterAHeartbeatInABlink(t *testing.T) {
	for range 5 {
		p := fleetsim.Draw(1947, fleetsim.Switches{})
		if res := fleetsim.Run(t, p, fleetsim.Options{Store: fleetsim.Memory}); res.Failed() {
			t.Fatal(res.Report("go test ./fleetsim -run TestScheduleEndsAfterAHeartbeatInABlink"))
		}
	}
}

// TestRefusalIntoAPauseNotHeardOf: memory seed 4177. A secondary refusal
// naming no time (a minute) came while the database blinked; another
// process, which had not heard of it, sent during that pause, after a
// reservation that had waited out the blink, and was refused too. Its
// answer counted as sent when the reservation was asked for (before the
// pause) and as one of the first refusal's episode, so it lengthened
// nothing, and the fleet went again 2 s before its minute was over. The
// answer counts from its send now, and a refusal of a request sent into
// the pause lengthens it to a minute after itself. It failed about one
// run in ten; since waiting got cheaper (a line of waiters asks again
// once a second, not each of them), about one run in thirty with the
// defect put back: the seed runs a hundred times, which catches it 19
// times in 20.
func TestRefusalIntoAPauseNotHeardOf(t *testing.T) {
	for range 100 {
		p := fleetsim.Draw(4177, fleetsim.Switches{})
		if res := fleetsim.Run(t, p, fleetsim.Options{Store: fleetsim.Memory}); res.Failed() {
			t.Fatal(res.Report("go test ./fleetsim -run TestRefusalIntoAPauseNotHeardOf"))
		}
	}
}

// TestBareRefusalPausesItsScope: memory seed 2 with bare refusals. A
// proxy's bare 429 of GET /items/29 pauses the narrowest scope of the
// request (/items/*) for a minute, as the client does: a search 0.66 s
// later is no early request (the referee took the whole host before).
func TestBareRefusalPausesItsScope(t *testing.T) {
	sw := fleetsim.Switches{Bare: true}
	for range 3 {
		p := fleetsim.Draw(2, sw)
		if res := fleetsim.Run(t, p, fleetsim.Options{Store: fleetsim.Memory, Switches: sw}); res.Failed() {
			t.Fatal(res.Report("go test ./fleetsim -run TestBareRefusalPausesItsScope"))
		}
	}
}

// TestSweepAfterABlink: memory seed 3553, found by CI's bulk (about one
// run in six). p2 was killed at 11 s; the last process left to sweep
// swept just before p2 was gone, and its next sweep came 5 s late, after
// a blink it waited out, so p2's leases were still there at the kill's
// 61 s. The heartbeats' bound moves with an outage; the referee now
// leaves a blink after a kill to the lease's own end.
func TestSweepAfterABlink(t *testing.T) {
	for range 10 {
		p := fleetsim.Draw(3553, fleetsim.Switches{})
		if res := fleetsim.Run(t, p, fleetsim.Options{Store: fleetsim.Memory}); res.Failed() {
			t.Fatal(res.Report("go test ./fleetsim -run TestSweepAfterABlink"))
		}
	}
}
