package fleetsim_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/fleetsim"
	"github.com/ratekeeper/ratekeeper/provider"
)

// TestBlinkAtStartKeepsTheClockGoing: the database blinks while three
// processes make their first reservations. The first heartbeat (under a
// sync.Once), the clock's first measurement and Flush (under locks) each
// waited out the outage's backoff while other goroutines queued on their
// locks; a goroutine blocked on a lock is not durably blocked, so the
// simulated clock stopped and the schedule never ended (memory seeds 1
// and 56 hung so). They wait on channels now.
func TestBlinkAtStartKeepsTheClockGoing(t *testing.T) {
	p := fleetsim.Draw(1, fleetsim.Switches{OneClock: true, NoBare: true})
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
	repeatSeed(t, 1947, fleetsim.Switches{OneClock: true, NoBare: true}, 5, "go test ./fleetsim -run TestScheduleEndsAfterAHeartbeatInABlink")
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
	repeatSeed(t, 4177, fleetsim.Switches{OneClock: true, NoBare: true}, 100, "go test ./fleetsim -run TestRefusalIntoAPauseNotHeardOf")
}

// TestBareRefusalPausesItsScope: memory seed 2 with bare refusals. A
// proxy's bare 429 of GET /items/29 pauses the narrowest scope of the
// request (/items/*) for a minute, as the client does: a search 0.66 s
// later is no early request (the referee took the whole host before).
func TestBareRefusalPausesItsScope(t *testing.T) {
	sw := fleetsim.Switches{Bare: true, OneClock: true}
	repeatSeed(t, 2, sw, 3, "go test ./fleetsim -run TestBareRefusalPausesItsScope")
}

// TestSweepAfterABlink: memory seed 3553, found by CI's bulk (about one
// run in six). p2 was killed at 11 s; the last process left to sweep
// swept just before p2 was gone, and its next sweep came 5 s late, after
// a blink it waited out, so p2's leases were still there at the kill's
// 61 s. The heartbeats' bound moves with an outage; the referee now
// leaves a blink after a kill to the lease's own end.
func TestSweepAfterABlink(t *testing.T) {
	repeatSeed(t, 3553, fleetsim.Switches{OneClock: true, NoBare: true}, 10, "go test ./fleetsim -run TestSweepAfterABlink")
}

// TestBare502CountOutlivesAnEarlierReading: memory seed 22 with every 502
// stating nothing. The client counts such a 502 itself (remaining − 1);
// a reading of a request sent before it, arriving after, took the
// within-window minimum and undid that count, and the fleet sent more
// than the server's last reading allowed (admitted). A reading now counts
// off the requests counted so that were sent after it (quota.Bucket's
// Unstated). It failed about one run in ten, so the seed runs thirty
// times.
func TestBare502CountOutlivesAnEarlierReading(t *testing.T) {
	sw := fleetsim.Switches{Bare5xx: true, OneClock: true, NoBare: true}
	repeatSeed(t, 22, sw, 30, "go test ./fleetsim -run TestBare502CountOutlivesAnEarlierReading")
}

// TestWriteSpacingOnSQLite: SQLite seed 20, with write spacing judged on
// the SQL stores as on memory (it was judged on memory alone). Two writes
// of the fleet went 50 ms short of the spacing (1.74 s of 1.79 s), and in
// another run two at one instant, after the whole fleet had sent nothing
// for 7 s. The processes' listeners held the connections the snapshot
// reads share, so decisions waited behind them (store/sqlite, commit
// b06a636: listeners poll on connections of their own). The seed failed 6
// runs in 6 on that commit's parent and passes since.
func TestWriteSpacingOnSQLite(t *testing.T) {
	for range 3 {
		p := fleetsim.Draw(20, fleetsim.Switches{OneClock: true, NoBare: true})
		opts := fleetsim.Options{Store: fleetsim.SQLite, DSN: filepath.Join(t.TempDir(), "fleet.db")}
		if res := fleetsim.Run(t, p, opts); res.Failed() {
			t.Fatal(res.Report("go test ./fleetsim -run TestWriteSpacingOnSQLite"))
		}
	}
}

// TestPrimaryRefusalFirstPausesTheBucket: memory seed 3 with other
// spenders emptying the bucket (once -sim.spendall). Another spender took the
// whole window before the fleet's first request; its refusal (403,
// remaining 0, a reset) was the first answer of the bucket, and the
// client gave it to the refused request's scope (/items/*): a search of
// another process then went to the empty bucket. A primary refusal that
// states a remaining count and a reset names the bucket: nothing goes
// before the reset. The schedule is seed 3's, with the spend moved to the
// start and the requests placed to show it.
func TestPrimaryRefusalFirstPausesTheBucket(t *testing.T) {
	sw := fleetsim.Switches{OneClock: true, NoBare: true}
	p := fleetsim.Draw(3, sw)
	p.Processes, p.Skews, p.ServerSkew = 2, []time.Duration{0, 0}, 0
	p.Limit, p.Window, p.MaxConcurrent, p.WriteSpacing, p.FaultRate = 10, 20*time.Second, 0, 0, 0
	p.EndpointLimit, p.EndpointWindow = 100, 10*time.Second
	p.MinLatency, p.MaxLatency = 10*time.Millisecond, 10*time.Millisecond
	p.Events = []fleetsim.Event{
		{At: 0, Kind: fleetsim.EvSpend, N: 10},
		{At: 100 * time.Millisecond, Kind: fleetsim.EvRead, Proc: 0, N: 1},
		{At: 200 * time.Millisecond, Kind: fleetsim.EvSearch, Proc: 1, N: 2},
		{At: 300 * time.Millisecond, Kind: fleetsim.EvWrite, Proc: 1, N: 3},
	}
	p.Length = time.Second
	if res := fleetsim.Run(t, p, fleetsim.Options{Store: fleetsim.Memory, Switches: sw}); res.Failed() {
		t.Fatal(res.Report("go test ./fleetsim -run TestPrimaryRefusalFirstPausesTheBucket"))
	}
}

// TestSkewedProcessesAgreeOnAWindow: memory seeds 10 and 94 with a clock
// for each process and the server (then -sim.skew, the default since). Processes that estimate
// the server's clock each from its Dates (whole seconds) put one window's
// reset up to a second and an answer's latency apart on their clocks;
// beyond sameWindowTolerance (1.1 s) the state kept the later reset and
// dropped the other processes' readings as from an older window, so
// remaining stayed high and the fleet overspent (admitted). Readings are
// compared by their reset on the server's clock now.
func TestSkewedProcessesAgreeOnAWindow(t *testing.T) {
	sw := fleetsim.Switches{NoBare: true}
	for _, seed := range []uint64{10, 94} {
		repeatSeed(t, seed, sw, 3, "go test ./fleetsim -run TestSkewedProcessesAgreeOnAWindow")
	}
}

// TestResetOfAServerBehindIsNotEarly: memory seed 1186 with a clock for
// each process and the server (the default since). A process 0.24 s ahead of the
// server had bounds on its clock that contained 0 and took the clocks to
// agree; it put a 2 s window's reset 0.24 s early on its clock and the
// fleet went 0.19 s before the server's reset (refused-scope, admitted).
// The estimate of the server's clock is its lower bound now, the safe
// side for the times a server names (quota.TestResetOfAServerBehindUsIsNeverEarly).
// It failed in every run without the fix.
func TestResetOfAServerBehindIsNotEarly(t *testing.T) {
	repeatSeed(t, 1186, fleetsim.Switches{NoBare: true}, 3, "go test ./fleetsim -run TestResetOfAServerBehindIsNotEarly")
}

// TestSecondaryRefusalStatingNoneLeftWaitsItsMinute: memory seed 2172
// (11 runs in 200 failed). Two writes that had waited out a database blink
// went closer than the write spacing (the open finding of writes across a
// blink), and the second was refused by the secondary limit; another
// spender had emptied the primary bucket meanwhile, so the refusal (no
// Retry-After) stated remaining 0 and the reset, 3.5 s away. The client
// paused the owner until that reset alone, and the whole fleet went at it,
// 56 s before the minute a secondary refusal naming no end of its own
// asks, into the server's penalty (24 s). No process went unaware of the
// refusal: every one waited for the reset it was told. The blink is
// needed (it spaced the writes wrong: no failure in 200 runs without
// it), the kill is not (12 in 200 without it). A secondary refusal stating none left now pauses the owner
// until the reset and at least the secondary wait
// (quota.TestSecondaryNoneLeftPausesAtLeastTheWait). The seed runs a
// hundred times; the plan after it shows the same without a blink, and
// failed in every run without the fix.
func TestSecondaryRefusalStatingNoneLeftWaitsItsMinute(t *testing.T) {
	runs := 100
	if raceEnabled {
		runs = 10 // the plan below fails in every run without the fix
	}
	repeatSeed(t, 2172, fleetsim.Switches{OneClock: true, NoBare: true}, runs, "go test ./fleetsim -run TestSecondaryRefusalStatingNoneLeftWaitsItsMinute")
	// One process, one unit left in a 4 s window (another spender took
	// the rest): the first of two reads in flight at once takes it, the
	// second trips a server allowing one in flight, a limit the client is
	// not told of, and is refused stating remaining 0 and the reset. The
	// retry and a read 2 s later must wait the minute, not the reset.
	sw := fleetsim.Switches{OneClock: true, NoBare: true}
	p := fleetsim.Draw(2172, sw)
	p.Processes, p.Skews, p.ServerSkew = 1, []time.Duration{0}, 0
	p.Limit, p.Window, p.MaxConcurrent, p.WriteSpacing, p.FaultRate = 30, 4*time.Second, 1, 0, 0
	p.Penalty, p.SecondaryRetryAfter, p.SecondaryHeaders = 20*time.Second, false, true
	p.EndpointLimit, p.EndpointWindow = 100, 10*time.Second
	p.MinLatency, p.MaxLatency = 100*time.Millisecond, 100*time.Millisecond
	p.Events = []fleetsim.Event{
		{At: 100 * time.Millisecond, Kind: fleetsim.EvRead, Proc: 0, N: 1},
		{At: 300 * time.Millisecond, Kind: fleetsim.EvSpend, N: 28},
		{At: 400 * time.Millisecond, Kind: fleetsim.EvRead, Proc: 0, N: 2},
		{At: 401 * time.Millisecond, Kind: fleetsim.EvRead, Proc: 0, N: 3},
		{At: 2 * time.Second, Kind: fleetsim.EvRead, Proc: 0, N: 4},
	}
	p.Length = 10 * time.Second
	unannounced := func(pr *provider.Provider) { pr.Secondary.MaxConcurrency = 0 }
	res := fleetsim.Run(t, p, fleetsim.Options{Store: fleetsim.Memory, Switches: sw, Provider: unannounced})
	if res.Failed() {
		t.Fatal(res.Report("go test ./fleetsim -run TestSecondaryRefusalStatingNoneLeftWaitsItsMinute"))
	}
}

// TestPrimaryRefusalAfterBare502sPausesTheBucket: memory seed 3902 (even:
// its 502s state nothing). Two 502s had the bucket count against the
// provider's default limit (60, assumed); then another spender emptied the
// server's window of 24, and the primary refusal (403, limit 24, remaining
// 0, a reset) was given to the refused request's scope (/items/*), its
// stated limit taken to contradict the assumed 60: a write of another
// process went to the empty bucket 6 ms later (refused-scope, admitted).
// An assumed count is known no better than none: such a refusal is the
// bucket's (quota.TestPrimaryRefusalAfterAssumedCountsPausesTheBucket). It
// failed one run in ten here, and in both runs of the CI bulk on a loaded
// machine, so the seed runs forty times (eight under -race, ten times
// slower).
func TestPrimaryRefusalAfterBare502sPausesTheBucket(t *testing.T) {
	runs := 40
	if raceEnabled {
		runs = 8
	}
	repeatSeed(t, 3902, fleetsim.Switches{OneClock: true, NoBare: true}, runs, "go test ./fleetsim -run TestPrimaryRefusalAfterBare502sPausesTheBucket")
}

// TestWritesThatWaitedOutABlinkAreSpaced: memory seed 1050 (every run
// before the fix). Two processes' writes waited out a database blink of
// 4 s; each reservation was decided at the time it was asked for, not
// when its transaction ran after the blink, so the first spaced the next
// write from before the blink, and the second went 0.86 s after it for a
// spacing of 1.26 s. (Memory seed 2172 showed the same: writes asked at
// 2.62 s and 2.86 s during a blink of 0.80–3.02 s went closer than
// 0.84 s, and the second was refused by the secondary limit.) A
// reservation is decided at the time it is decided now, and the referee
// judges write spacing across blinks. The plan after the seed is that of
// seed 2172: three processes, writes asked during the blink.
func TestWritesThatWaitedOutABlinkAreSpaced(t *testing.T) {
	repeatSeed(t, 1050, fleetsim.Switches{OneClock: true, NoBare: true}, 3, "go test ./fleetsim -run TestWritesThatWaitedOutABlinkAreSpaced")
	p := fleetsim.Draw(2172, fleetsim.Switches{OneClock: true, NoBare: true})
	p.Processes, p.Skews, p.ServerSkew = 3, []time.Duration{0, 0, 0}, 0
	p.Limit, p.Window, p.MaxConcurrent, p.WriteSpacing, p.FaultRate = 100, time.Minute, 10, 840*time.Millisecond, 0
	p.MinLatency, p.MaxLatency = 50*time.Millisecond, 50*time.Millisecond
	p.Events = []fleetsim.Event{
		{At: 100 * time.Millisecond, Kind: fleetsim.EvRead, Proc: 0, N: 1},
		{At: 200 * time.Millisecond, Kind: fleetsim.EvRead, Proc: 2, N: 2},
		{At: 800 * time.Millisecond, Kind: fleetsim.EvBlink, D: 2220 * time.Millisecond},
		{At: 2620 * time.Millisecond, Kind: fleetsim.EvWrite, Proc: 0, N: 3},
		{At: 2860 * time.Millisecond, Kind: fleetsim.EvWrite, Proc: 2, N: 4},
	}
	p.Length = 10 * time.Second
	for range 5 {
		if res := fleetsim.Run(t, p, fleetsim.Options{Store: fleetsim.Memory}); res.Failed() {
			t.Fatal(res.Report("go test ./fleetsim -run TestWritesThatWaitedOutABlinkAreSpaced"))
		}
	}
}

// TestRefusalLostWithItsProcess: memory seed 7889's shape, built by hand.
// A process received a search's refusal (Retry-After) while the database
// was away, and was killed just after the database came back, before it
// could write the refusal; another process's search then went into the
// server's pause. Nobody could have told it: the referee forgets the facts
// a killed process took along before they could reach the others, and
// judges what was shared. (The seed failed so on the tree before decisions
// were taken past an outage; it passes there since, whatever the referee.)
func TestRefusalLostWithItsProcess(t *testing.T) {
	p := fleetsim.Draw(7889, fleetsim.Switches{OneClock: true, NoBare: true})
	p.Processes, p.Skews, p.ServerSkew = 2, []time.Duration{0, 0}, 0
	p.Limit, p.Window, p.MaxConcurrent, p.WriteSpacing, p.FaultRate = 100, time.Minute, 0, 0, 0
	p.EndpointLimit, p.EndpointWindow = 1, 10*time.Second
	p.MinLatency, p.MaxLatency = 100*time.Millisecond, 100*time.Millisecond
	p.Events = []fleetsim.Event{
		{At: 0, Kind: fleetsim.EvSearch, Proc: 0, N: 1},
		{At: 150 * time.Millisecond, Kind: fleetsim.EvSearch, Proc: 0, N: 2},
		{At: 200 * time.Millisecond, Kind: fleetsim.EvBlink, D: 2 * time.Second},
		{At: 2201 * time.Millisecond, Kind: fleetsim.EvKill, Proc: 0},
		{At: 5 * time.Second, Kind: fleetsim.EvSearch, Proc: 1, N: 3},
	}
	p.Length = 6 * time.Second
	if res := fleetsim.Run(t, p, fleetsim.Options{Store: fleetsim.Memory}); res.Failed() {
		t.Fatal(res.Report("go test ./fleetsim -run TestRefusalLostWithItsProcess"))
	}
}

// TestScopeRefusalReachesAnotherProcessBlock: memory seed 2 with
// plentiful buckets. Another process's /search arrived 8–14 ms after one
// process's refusal of that unannounced limit, beyond Reach: its block,
// taken for a scope nothing was known of, heard of the refusal only at
// quota.BlockMaxAge, since the memory store sends no notification. The
// refusal's transaction now counts news in the store value every process
// shares, and a block that has not heard it hands out nothing. The
// schedule's first second holds the refusal (at 0.38 s) and the requests
// after it; its whole 40 s costs minutes of CPU on the rows once the
// bucket is no longer plentiful. It failed 3 runs in 3 before.
func TestScopeRefusalReachesAnotherProcessBlock(t *testing.T) {
	sw := fleetsim.Switches{Plenty: true}
	for range 3 {
		p := fleetsim.Draw(2, sw)
		p.Events = slices.DeleteFunc(p.Events, func(e fleetsim.Event) bool { return e.At >= time.Second })
		if res := fleetsim.Run(t, p, fleetsim.Options{Store: fleetsim.Memory, Switches: sw}); res.Failed() {
			t.Fatal(res.Report("go test ./fleetsim -run TestScopeRefusalReachesAnotherProcessBlock"))
		}
	}
}

// repeatSeed runs memory seed seed drawn with sw, runs times, failing at
// the first run that breaks an invariant with its report and cmd, the
// command that runs the test again.
func repeatSeed(t *testing.T, seed uint64, sw fleetsim.Switches, runs int, cmd string) {
	t.Helper()
	for range runs {
		p := fleetsim.Draw(seed, sw)
		if res := fleetsim.Run(t, p, fleetsim.Options{Store: fleetsim.Memory, Switches: sw}); res.Failed() {
			t.Fatal(res.Report(cmd))
		}
	}
}

// TestLearntLimitWithinATenth: the learnt limit of /search within 10 % of
// the server's after 3 clean windows (-sim.learnt), memory seeds that
// failed it. Runs per seed: enough to catch the defect it found, which
// each failed in some runs only. With the referee that counts only the
// windows that put the limit to the test (fleetsim/server.go,
// cleanSearchWindows), the product of before the fixes still fails 1179
// (10 runs in 10), 1368 (4 in 10) and 1297 (1 in 10: a long schedule,
// run 3 times; quota.TestEpisodeEndKeepsTheCountSinceThePause catches its
// defect at every run); 54, 73, 1006 and
// 1278 failed with the referee of before, in windows that could teach
// nothing (a fleet that wanted fewer searches than the limit, or that a
// primary bucket or a concurrency cap held back). 5560 failed 5 runs in
// 100 and 6246 4 in 20: a provisional limit, judged in windows where a
// primary bucket let through exactly the endpoint's limit; and 5560 also
// with a window learnt 11 s for the server's 10 s
// (quota.TestLongerGapNarrowsTheWindow) and a count under it taken as
// whole (quota.TestCountUnderACorrectedWindowIsNotWhole). 1283 (1 run in
// 60) was judged after a refusal in the drain had lowered the limit; its
// window learnt as two of the server's (8 s for 4 s; 4 runs in 30 once,
// 1 in about 180 before these fixes, none in 90 since) is open, and so
// runs 10 times; 7734 (7 of 5) failed once in 9,900 schedules, and in
// none of 370 runs since. 5560, a fleet of 8, is checked as the default
// check does, which leaves out windows learnt as two or more of the
// server's (the open finding -sim.learnt checks): since each process's
// jitter is drawn from the seed it meets that finding about one test in
// ten (12 to 14 of 7 over 20 s for 10 s), where its own shapes are fixed:
// a window learnt 11 s for 10 s from an end named late by its answer's
// round trip (quota.TestNamedEndsAreLateByTheirRoundTrip), and 14 found
// over 20 s kept whole when a refusal taught 10 s
// (quota.TestShorterWindowDropsALimitCountedOverTheLonger). 8273, found
// by CI's bulk (14 runs in 400), a fleet of 8 checked as the default check
// does: 3 found whole over 11 s for the server's 10 s became 2 when a
// refusal taught 10 s, its share rounded down, and no probe's count came
// within the shortest window the named ends allowed to raise it
// (quota.TestShorterWindowKeepsTheNearestShare). 367789 (a fleet of 8, 7
// runs in 20) and 4876 (3 processes, -sim.learnt, 6 in 20): a process
// killed with a search in flight when a refusal found the count whole;
// the server had admitted it, the fleet never counted it, and the limit
// one short held for ten windows
// (quota.TestLimitFoundWholeCountsALostRequestInFlight). 673974 (a
// fleet of 8, about 1 run in 100 with two runs at once): a database blink
// of 4 s held back answers, written after the count had moved on to the
// next window: a refusal judged the next window's count (1 or 2 of 7
// found whole), successes counted there (8 of 7), and one written late
// moved the count's latest answer back, hiding a count that straddled
// two of the server's windows (6 of 7)
// (quota.TestAnswersOfAWindowCountedBeforeAreWrittenLate,
// quota.TestLateSuccessKeepsTheLatestCounted). 7582 (a fleet of 8, found
// by CI's bulk; 26 runs in 800 with two at once): the referee's error. It
// noted whether the learnt limit capped the fleet's searches only at the
// plan's events, and the last came 18 s before 3 windows of exactly the
// server's 2 searches, sent under a provisional limit that capped
// nothing: unnoted, they counted as tested. Between events it now notes
// a window whose limit caps nothing at least 4 times a window.
func TestLearntLimitWithinATenth(t *testing.T) {
	for _, c := range []struct {
		seed uint64
		runs int
		// asDefault checks as the default check does (see the comment
		// above) rather than with -sim.learnt.
		asDefault bool
		why       string
	}{
		{54, 3, false, "a window learnt as 10 s for the server's 8 s: never refused again, never learnt better"},
		{73, 3, false, "9 of 11: the count left out answers the server charged and answered 502"},
		{1006, 3, false, "6 of 10"},
		{1278, 3, false, "3 of 8: a provisional limit of one process's count"},
		{1179, 3, false, "4 or 5 of 6"},
		{1297, 3, false, "4 of 5: the episode's first success dropped a probe answered 502 from the count"},
		{1368, 10, false, "8 of 7: a limit found whole rose after a clean window"},
		{1283, 10, false, "4 of 7 judged after a refusal in the drain (9 of 7 over a window learnt 8 s for 4 s is open)"},
		{5560, 30, true, "1, 3 or 4 of 7, provisional, judged in windows a primary bucket held at 7; 5 of 7 or 3 of 7 under a window learnt 11 s for 10 s; 14 of 7 kept whole under 10 s"},
		{6246, 20, false, "1 of 3, provisional, its window a floor from one refusal"},
		{7734, 3, false, "7 of 5"},
		{8273, 30, true, "2 of 3: 3 found whole over 11 s became 2 under 10 s and held"},
		{367789, 10, true, "5 of 6 found whole: a killed process's search in flight at the refusal went uncounted"},
		{4876, 10, false, "5 of 6 found whole: a killed process's search in flight at the refusal went uncounted"},
		{7582, 30, true, "1 of 2, provisional: the referee judged 3 windows of exactly the limit, sent under a limit that capped nothing, as tested"},
		{673974, 60, true, "1, 2, 6 or 8 of 7: answers held back by a database blink, written after the count moved on"},
		{403869, 10, false, "14 of 9, provisional, judged 5 s after a proxy's bare 429 had taught it (the referee: such a window is not clean)"},
	} {
		t.Run(fmt.Sprint(c.seed), func(t *testing.T) {
			runs := c.runs
			if raceEnabled && runs > 10 {
				runs = 5 // ten times slower
			}
			sw := fleetsim.Switches{Learnt: !c.asDefault}
			repeatSeed(t, c.seed, sw, runs,
				fmt.Sprintf("go test ./fleetsim -run 'TestLearntLimitWithinATenth/%d$' (%s)", c.seed, c.why))
		})
	}
}

// TestAnswerOfAClosedBlockReachesTheFleet: memory seed 269775, found by a
// long run (8 processes, answers up to 1.8 s late, another spender taking
// nearly all of a window). An answer stating 0 remaining, of a request a
// block had handed out before it closed, waited blockFlushDelay (50 ms) to
// be written, as a plentiful block's answers may; another process's
// request went 35 ms after it. It failed 30 runs of 30 before.
func TestAnswerOfAClosedBlockReachesTheFleet(t *testing.T) {
	repeatSeed(t, 269775, fleetsim.Switches{}, 3, "go test ./fleetsim -run TestAnswerOfAClosedBlockReachesTheFleet")
}

// TestEndpointRefusalAfterARollPausesOnlyTheEndpoint: memory seed 8494 (the
// CI bulk, once). Another spender emptied the primary window just after it
// rolled; the first answer of the new window was /search's own refusal
// (429, limit 2, remaining 0, its window's reset a second away), taken for
// the bucket's because the rolled bucket's counts were assumed — though
// its limit of 14 was the server's word. The bucket then refilled at the
// endpoint's reset, and a search went a second after three primary
// refusals had said none were left for 6 s (refused-scope, admitted). A
// rolled bucket keeps its stated limit for refusalOfScope
// (quota.TestScopeRefusalAfterTheBucketRolledPausesTheScope). It failed
// about one run in 25 alone; 0 in 100 after.
func TestEndpointRefusalAfterARollPausesOnlyTheEndpoint(t *testing.T) {
	runs := 40
	if raceEnabled {
		runs = 8
	}
	for range runs {
		p := fleetsim.Draw(8494, fleetsim.Switches{})
		if res := fleetsim.Run(t, p, fleetsim.Options{Store: fleetsim.Memory}); res.Failed() {
			t.Fatal(res.Report("go test ./fleetsim -run TestEndpointRefusalAfterARollPausesOnlyTheEndpoint"))
		}
	}
}

// TestBlockLeaseOfAKilledProcessJudgedAtItsEnd: memory seed 20191 with
// bare refusals in its schedule (the referee's error). Its lease of 61 s
// put the first check of a killed holder's leases (LeaseBoundSwept, 61 s
// after the kill) exactly at the lease's length, where it was judged as
// the lapse check, and a block taken 0.08 s before the kill, which lives
// its length and quota.BlockMaxAge more, was still held. It failed every
// run.
func TestBlockLeaseOfAKilledProcessJudgedAtItsEnd(t *testing.T) {
	repeatSeed(t, 20191, fleetsim.Switches{Bare: true}, 3, "go test ./fleetsim -run TestBlockLeaseOfAKilledProcessJudgedAtItsEnd")
}
