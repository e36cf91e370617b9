package poll

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // named zones work on machines without zoneinfo
)

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// tokyoPolicy is the default profile in Asia/Tokyo.
func tokyoPolicy(t testing.TB) Policy {
	p := DefaultPolicy()
	p.Location = mustLoad(t, "Asia/Tokyo")
	return p
}

// tue returns Tuesday 10 June 2025 at h:m in loc.
func tue(loc *time.Location, h, m int) time.Time { return time.Date(2025, 6, 10, h, m, 0, 0, loc) }

func TestDefaultProfile(t *testing.T) {
	p := tokyoPolicy(t)
	loc := p.Location
	at := func(h, m int) time.Time { return tue(loc, h, m) }
	sat := func(h, m int) time.Time { return time.Date(2025, 6, 14, h, m, 0, 0, loc) }
	cases := []struct {
		name  string
		state State
		now   time.Time
		want  time.Duration
		rule  Rule
	}{
		{"business hours", State{Started: at(9, 30)}, at(10, 0), 3 * time.Minute, RuleBusiness},
		{"business hours start at 9", State{Started: at(8, 30)}, at(9, 0), 3 * time.Minute, RuleBusiness},
		{"business hours end before 18", State{Started: at(17, 30)}, at(18, 0), 5 * time.Minute, RuleDefault},
		{"evening", State{Started: at(19, 30)}, at(20, 0), 5 * time.Minute, RuleDefault},
		{"saturday is not a business day", State{Started: sat(9, 30)}, sat(10, 0), 5 * time.Minute, RuleDefault},
		{"night from 22", State{Started: at(21, 30)}, at(22, 0), 15 * time.Minute, RuleNight},
		{"night until 7", State{Started: at(6, 0)}, at(6, 59), 15 * time.Minute, RuleNight},
		{"morning from 7", State{Started: at(6, 30)}, at(7, 0), 5 * time.Minute, RuleDefault},
		{"idle hour in business hours", State{Started: at(8, 0)}, at(10, 0), 10 * time.Minute, RuleIdle},
		{"idle hour after a change", State{Started: at(8, 0), LastChange: at(9, 0), Empty: 20}, at(10, 0), 10 * time.Minute, RuleIdle},
		{"idle at night stays at the night interval", State{Started: at(20, 0)}, at(23, 0), 15 * time.Minute, RuleNight},
		{"right after a change", State{Started: at(9, 0), LastChange: at(10, 0), Activity: 0.5}, at(10, 0), time.Minute, RuleAfterChange},
		{"right after a change at night", State{Started: at(20, 0), LastChange: at(23, 0), Activity: 0.5}, at(23, 0), time.Minute, RuleAfterChange},
		{"empty streak stretches", State{Started: at(9, 0), LastChange: at(10, 0), Empty: 2}, at(10, 3), 135 * time.Second, RuleAfterChange},
		{"streak capped by the base", State{Started: at(9, 0), LastChange: at(10, 0), Empty: 10}, at(10, 30), 3 * time.Minute, RuleBusiness},
		{"activity pulls the base down", State{Started: at(9, 0), LastChange: at(10, 0), Empty: 10, Activity: 0.5}, at(10, 30), 2 * time.Minute, RuleActivity},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, rule := p.Adaptive(c.state, c.now)
			if got != c.want || rule != c.rule {
				t.Fatalf("Adaptive = %v (%s), want %v (%s)", got, rule, c.want, c.rule)
			}
		})
	}
}

func TestBusinessHoursInNamedZone(t *testing.T) {
	// 01:00 UTC on Tuesday is 10:00 on Tuesday in Tokyo (business hours)
	// and 21:00 on Monday in New York (evening).
	now := time.Date(2025, 6, 10, 1, 0, 0, 0, time.UTC)
	s := State{Started: now.Add(-10 * time.Minute)}
	for _, c := range []struct {
		zone string
		want time.Duration
	}{{"Asia/Tokyo", 3 * time.Minute}, {"America/New_York", 5 * time.Minute}, {"Europe/Paris", 15 * time.Minute}} {
		p := DefaultPolicy()
		p.Location = mustLoad(t, c.zone)
		if got, _ := p.Adaptive(s, now); got != c.want {
			t.Errorf("%s: %v, want %v", c.zone, got, c.want)
		}
	}
	// 22:30 UTC is quiet in UTC, 07:30 the next morning in Tokyo.
	late := time.Date(2025, 6, 10, 22, 30, 0, 0, time.UTC)
	p := DefaultPolicy()
	p.Location = time.UTC
	if got, rule := p.Adaptive(State{Started: late}, late); rule != RuleNight || got != 15*time.Minute {
		t.Errorf("UTC 22:30: %v %s", got, rule)
	}
	p.Location = mustLoad(t, "Asia/Tokyo")
	if got, rule := p.Adaptive(State{Started: late}, late); rule != RuleDefault || got != 5*time.Minute {
		t.Errorf("Tokyo 07:30: %v %s", got, rule)
	}
}

func TestQuietHoursWinOverBusinessHours(t *testing.T) {
	p := tokyoPolicy(t)
	p.BusinessHours = Hours{From: 8 * 60, To: 23 * 60}
	now := tue(p.Location, 22, 30)
	if got, rule := p.Adaptive(State{Started: now}, now); rule != RuleNight || got != p.Night {
		t.Fatalf("%v %s, want the night interval", got, rule)
	}
}

func TestBounds(t *testing.T) {
	p := tokyoPolicy(t)
	p.Min = 2 * time.Minute
	p.Max = 10 * time.Minute
	now := tue(p.Location, 10, 0)
	if got, rule := p.Adaptive(State{Started: now, LastChange: now}, now); got != 2*time.Minute || rule != RuleMin {
		t.Errorf("after a change with Min 2m: %v %s", got, rule)
	}
	night := tue(p.Location, 23, 0)
	if got, rule := p.Adaptive(State{Started: night}, night); got != 10*time.Minute || rule != RuleMax {
		t.Errorf("night with Max 10m: %v %s", got, rule)
	}
}

func TestPeriodStartCutsASlowInterval(t *testing.T) {
	p := tokyoPolicy(t)
	loc := p.Location
	cases := []struct {
		name string
		now  time.Time
		want time.Duration
		rule Rule
	}{
		// 15 minutes from 06:50 would overshoot the end of the night.
		{"night ends at 7", tue(loc, 6, 50), 10 * time.Minute, RulePeriodStart},
		{"business hours start at 9", tue(loc, 8, 58), 2 * time.Minute, RulePeriodStart},
		// Not shorter than Min, even right before the boundary.
		{"but not below Min", tue(loc, 8, 59).Add(45 * time.Second), p.Min, RulePeriodStart},
		// A slower period ahead changes nothing.
		{"evening after business", tue(loc, 17, 59), 3 * time.Minute, RuleBusiness},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, d := p.Next(State{Started: c.now.Add(-10 * time.Minute)}, Observation{Outcome: Unchanged}, c.now)
			if d.Interval != c.want || d.Rule != c.rule {
				t.Fatalf("interval %v (%s), want %v (%s)", d.Interval, d.Rule, c.want, c.rule)
			}
		})
	}
}

func TestActivityScore(t *testing.T) {
	p := tokyoPolicy(t)
	now := tue(p.Location, 10, 0)
	var s State
	s, _ = p.Next(s, Observation{Outcome: First}, now)
	if s.Activity != 0 {
		t.Fatalf("the baseline raised the score to %v", s.Activity)
	}
	s, _ = p.Next(s, Observation{Outcome: Changed}, now.Add(time.Minute))
	if s.Activity != 0.5 {
		t.Fatalf("one change: %v, want 0.5", s.Activity)
	}
	s, _ = p.Next(s, Observation{Outcome: Changed}, now.Add(2*time.Minute))
	if s.Activity != 0.75 {
		t.Fatalf("two changes: %v, want 0.75", s.Activity)
	}
	s, _ = p.Next(s, Observation{Outcome: Unchanged}, now.Add(3*time.Minute))
	if math.Abs(s.Activity-0.6) > 1e-9 {
		t.Fatalf("an empty poll: %v, want 0.6", s.Activity)
	}

	// Two URLs with the same empty streak: the busier one polls sooner.
	run := func(changes int) time.Duration {
		var s State
		at := now
		s, _ = p.Next(s, Observation{Outcome: First}, at)
		for range changes {
			at = at.Add(time.Minute)
			s, _ = p.Next(s, Observation{Outcome: Changed}, at)
		}
		var d Decision
		for range 6 {
			at = at.Add(2 * time.Minute)
			s, d = p.Next(s, Observation{Outcome: Unchanged}, at)
		}
		return d.Interval
	}
	busy, quiet := run(4), run(1)
	if !(busy < quiet) {
		t.Fatalf("busy URL polls every %v, quiet one every %v: activity ignored", busy, quiet)
	}
	if quiet > p.Business || busy < p.AfterChange {
		t.Fatalf("intervals out of the profile: %v %v", busy, quiet)
	}
}

func TestEmptyStreakRampsBackToTheBase(t *testing.T) {
	p := tokyoPolicy(t)
	p.ActivityRaise = 0 // isolate the streak from the score
	now := tue(p.Location, 10, 0)
	s, _ := p.Next(State{}, Observation{Outcome: First}, now)
	s, d := p.Next(s, Observation{Outcome: Changed}, now.Add(time.Minute))
	got := []time.Duration{d.Interval}
	at := d.Next
	for range 4 {
		s, d = p.Next(s, Observation{Outcome: Unchanged}, at)
		got = append(got, d.Interval)
		at = d.Next
	}
	want := []time.Duration{time.Minute, 90 * time.Second, 135 * time.Second, 3 * time.Minute, 3 * time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("intervals %v, want %v", got, want)
		}
	}
	if s.Empty != 4 {
		t.Fatalf("empty streak %d, want 4", s.Empty)
	}
	s, _ = p.Next(s, Observation{Outcome: Changed}, at)
	if s.Empty != 0 || s.Interval != time.Minute {
		t.Fatalf("a change did not reset the streak: %d, %v", s.Empty, s.Interval)
	}
}

func TestIdleAfterAnHourSinceTheLastChange(t *testing.T) {
	p := tokyoPolicy(t)
	change := tue(p.Location, 10, 0)
	s := State{Started: change.Add(-time.Hour), LastChange: change, Empty: 20}
	if got, rule := p.Adaptive(s, change.Add(59*time.Minute)); rule == RuleIdle || got != 3*time.Minute {
		t.Fatalf("59 minutes after a change: %v %s", got, rule)
	}
	if got, rule := p.Adaptive(s, change.Add(time.Hour)); rule != RuleIdle || got != 10*time.Minute {
		t.Fatalf("an hour after a change: %v %s", got, rule)
	}
	// An idle hour overrides a high activity score.
	s.Activity = 1
	if got, _ := p.Adaptive(s, change.Add(time.Hour)); got != 10*time.Minute {
		t.Fatalf("idle with activity 1: %v", got)
	}
}

func TestXPollIntervalIsAFloor(t *testing.T) {
	p := tokyoPolicy(t)
	now := tue(p.Location, 10, 0)
	s, _ := p.Next(State{}, Observation{Outcome: First}, now)
	s, d := p.Next(s, Observation{Outcome: Changed, PollInterval: 90 * time.Second}, now.Add(time.Minute))
	if d.Interval != 90*time.Second || d.Rule != RulePollFloor || d.Adaptive != time.Minute {
		t.Fatalf("with X-Poll-Interval 90: %v (%s), adaptive %v", d.Interval, d.Rule, d.Adaptive)
	}
	// The floor stays through an error, and goes when the server stops asking.
	s, d = p.Next(s, Observation{Outcome: Failed}, d.Next)
	if d.Interval < 90*time.Second {
		t.Fatalf("after an error: %v", d.Interval)
	}
	_, d = p.Next(s, Observation{Outcome: Changed}, d.Next)
	if d.Interval != time.Minute {
		t.Fatalf("without X-Poll-Interval: %v (%s)", d.Interval, d.Rule)
	}
	// Above Max too: it is the server's word.
	p.Max = time.Minute
	_, d = p.Next(State{}, Observation{Outcome: First, PollInterval: 5 * time.Minute}, now)
	if d.Interval != 5*time.Minute {
		t.Fatalf("X-Poll-Interval above Max: %v", d.Interval)
	}
}

func quotaAt(remaining, limit int64, reset time.Time) Quota {
	return Quota{Known: true, Remaining: remaining, Limit: limit, Reset: reset, Resource: "core"}
}

func TestBudgetGuard(t *testing.T) {
	p := tokyoPolicy(t)
	now := tue(p.Location, 10, 0)
	reset := now.Add(time.Hour)
	after := State{Started: now.Add(-time.Minute), LastChange: now.Add(-time.Minute), Polls: 3}

	t.Run("stretches near exhaustion", func(t *testing.T) {
		// 20 % of 100 over an hour: one poll every 3 minutes.
		_, d := p.Next(after, Observation{Outcome: Changed, Quota: quotaAt(100, 5000, reset)}, now)
		if d.Rule != RuleBudget || d.Interval != 3*time.Minute || d.Adaptive != time.Minute || d.Paused {
			t.Fatalf("%+v", d)
		}
	})
	t.Run("sharers split it", func(t *testing.T) {
		_, d := p.Next(after, Observation{Outcome: Changed, Quota: quotaAt(100, 5000, reset), Sharers: 2}, now)
		if d.Interval != 6*time.Minute {
			t.Fatalf("%v", d.Interval)
		}
	})
	t.Run("plenty of quota changes nothing", func(t *testing.T) {
		_, d := p.Next(after, Observation{Outcome: Changed, Quota: quotaAt(4000, 5000, reset)}, now)
		if d.Rule != RuleAfterChange || d.Interval != time.Minute {
			t.Fatalf("%+v", d)
		}
	})
	t.Run("free 304s spend nothing", func(t *testing.T) {
		s, d := p.Next(after, Observation{Outcome: Changed, Quota: quotaAt(100, 5000, reset)}, now)
		at := d.Next
		for range 5 {
			s, d = p.Next(s, Observation{Outcome: Unchanged, NotModified: true, Quota: quotaAt(100, 5000, reset)}, at)
			if d.Rule == RuleBudget || d.Rule == RulePaused {
				t.Fatalf("a free 304 was counted: %+v", d)
			}
			at = d.Next
		}
	})
	t.Run("charged 304s spend", func(t *testing.T) {
		s, d := p.Next(after, Observation{Outcome: Changed, Quota: quotaAt(100, 5000, reset)}, now)
		_, d = p.Next(s, Observation{Outcome: Unchanged, NotModified: true, Quota: quotaAt(99, 5000, reset)}, d.Next)
		if d.Rule != RuleBudget {
			t.Fatalf("a 304 that lowered remaining was free: %+v", d)
		}
	})
	t.Run("pauses when the share is below one poll", func(t *testing.T) {
		_, d := p.Next(after, Observation{Outcome: Changed, Quota: quotaAt(4, 5000, reset)}, now)
		if !d.Paused || d.Rule != RulePaused || d.Interval != time.Hour+PauseMargin {
			t.Fatalf("%+v", d)
		}
	})
	t.Run("pauses below the floor", func(t *testing.T) {
		p := p
		p.MinRemaining = 500
		_, d := p.Next(after, Observation{Outcome: Changed, Quota: quotaAt(499, 5000, reset)}, now)
		if !d.Paused || d.Next != reset.Add(PauseMargin) {
			t.Fatalf("%+v", d)
		}
		_, d = p.Next(after, Observation{Outcome: Changed, Quota: quotaAt(500, 5000, reset)}, now)
		if d.Paused {
			t.Fatalf("paused at the floor: %+v", d)
		}
	})
	t.Run("pauses when the allowance returns after the reset", func(t *testing.T) {
		// 20 % of 10 over an hour's window: one poll every 30 minutes,
		// but the reset comes in 10.
		s := after
		s.Window = time.Hour
		_, d := p.Next(s, Observation{Outcome: Changed, Quota: quotaAt(10, 5000, now.Add(10*time.Minute))}, now)
		if !d.Paused || d.Interval != 10*time.Minute+PauseMargin {
			t.Fatalf("%+v", d)
		}
	})
	t.Run("a reset in the past lifts it", func(t *testing.T) {
		_, d := p.Next(after, Observation{Outcome: Changed, Quota: quotaAt(0, 5000, now.Add(-time.Second))}, now)
		if d.Paused || d.Rule != RuleAfterChange {
			t.Fatalf("%+v", d)
		}
	})
	t.Run("no reset stated: the budget window", func(t *testing.T) {
		_, d := p.Next(after, Observation{Outcome: Changed, Quota: quotaAt(100, -1, time.Time{})}, now)
		if d.Interval != 3*time.Minute {
			t.Fatalf("%+v", d)
		}
	})
}

// TestBudgetNeverSpendsMoreThanItsShare polls a URL that changes at every
// poll (each costs a request) through a whole window with an adaptive
// interval of one second, and counts what it spent.
func TestBudgetNeverSpendsMoreThanItsShare(t *testing.T) {
	for _, c := range []struct {
		name      string
		remaining int64
		share     float64
		sharers   int
		others    int64 // requests others spend per poll
	}{
		{"20% of 1000", 1000, 0.2, 1, 0},
		{"50% of 300 for 3 URLs", 300, 0.5, 3, 0},
		{"10% of 5000 with others spending", 5000, 0.1, 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := DefaultPolicy()
			p.Location = time.UTC
			p.AfterChange, p.Business, p.Default, p.Idle, p.Night, p.Min = time.Second, time.Second, time.Second, time.Second, time.Second, time.Second
			p.BudgetShare = c.share
			start := time.Date(2025, 6, 10, 10, 0, 0, 0, time.UTC)
			reset := start.Add(time.Hour)
			remaining := c.remaining
			states := make([]State, c.sharers)
			next := make([]time.Time, c.sharers)
			for i := range next {
				next[i] = start
			}
			spent := int64(0)
			paused := false
			for {
				i := 0
				for j := range next {
					if next[j].Before(next[i]) {
						i = j
					}
				}
				now := next[i]
				if !now.Before(reset) {
					break
				}
				remaining -= 1 + c.others
				spent++
				if remaining < 0 {
					t.Fatalf("quota exhausted after %d polls", spent)
				}
				var d Decision
				states[i], d = p.Next(states[i], Observation{Outcome: Changed, Quota: quotaAt(remaining, c.remaining, reset), Sharers: c.sharers}, now)
				paused = paused || d.Paused
				next[i] = d.Next
			}
			limit := c.share*float64(c.remaining) + float64(c.sharers)
			if float64(spent) > limit {
				t.Fatalf("spent %d of %d, more than %.0f (%.0f%% plus one poll per URL)", spent, c.remaining, limit, c.share*100)
			}
			if float64(spent) < 0.5*c.share*float64(c.remaining) && c.others == 0 {
				t.Fatalf("spent only %d: the guard is far stricter than its share", spent)
			}
			t.Logf("spent %d of %d (share %.0f%%), paused: %v", spent, c.remaining, c.share*100, paused)
		})
	}
}

func TestBackoff(t *testing.T) {
	p := DefaultPolicy()
	for n, want := range map[int]time.Duration{1: time.Minute, 2: 2 * time.Minute, 4: 8 * time.Minute, 6: 32 * time.Minute, 7: time.Hour, 40: time.Hour, 100: time.Hour} {
		lo, hi := p.Backoff(n, 0), p.Backoff(n, 0.999999)
		if lo != want/2 || hi > want || hi < want-time.Second {
			t.Errorf("Backoff(%d) spans [%v, %v], want [%v, %v)", n, lo, hi, want/2, want)
		}
	}
	for n := 1; n < 70; n++ {
		if b := p.Backoff(n, 0.5); b <= 0 || b > time.Hour {
			t.Fatalf("Backoff(%d) = %v", n, b)
		}
	}
}

func TestErrorsBackOffResetAndStop(t *testing.T) {
	p := tokyoPolicy(t)
	now := tue(p.Location, 10, 0)
	s, d := p.Next(State{}, Observation{Outcome: First}, now)
	var intervals []time.Duration
	for i := 1; i <= 9; i++ {
		s, d = p.Next(s, Observation{Outcome: Failed, Jitter: 0.5}, d.Next)
		if d.Stop != nil {
			t.Fatalf("stopped after %d errors", i)
		}
		if s.Errors != i {
			t.Fatalf("errors %d, want %d", s.Errors, i)
		}
		intervals = append(intervals, d.Interval)
	}
	// Never sooner than the adaptive interval; doubling; capped at an hour.
	for i, iv := range intervals {
		if iv < 3*time.Minute || iv > time.Hour {
			t.Fatalf("interval %d: %v", i+1, iv)
		}
		if i > 0 && iv < intervals[i-1] {
			t.Fatalf("backoff shrank: %v", intervals)
		}
	}
	if intervals[8] < 45*time.Minute {
		t.Fatalf("9 errors back off only %v", intervals[8])
	}
	if intervals[3] != 6*time.Minute || intervals[4] != 12*time.Minute {
		t.Fatalf("backoff %v", intervals)
	}
	// The tenth stops polling.
	s2, d2 := p.Next(s, Observation{Outcome: Failed}, d.Next)
	if !errors.Is(d2.Stop, ErrTooManyErrors) || s2.Errors != 10 {
		t.Fatalf("tenth error: stop %v, errors %d", d2.Stop, s2.Errors)
	}
	// A success resets the count.
	s, d = p.Next(s, Observation{Outcome: Unchanged}, d.Next)
	if s.Errors != 0 || d.Rule == RuleBackoff {
		t.Fatalf("after a success: errors %d, rule %s", s.Errors, d.Rule)
	}
	s, d = p.Next(s, Observation{Outcome: Failed}, d.Next)
	if d.Stop != nil || s.Errors != 1 {
		t.Fatalf("count not reset: %d", s.Errors)
	}
	// MaxErrors 0 never stops.
	p.MaxErrors = 0
	for range 50 {
		s, d = p.Next(s, Observation{Outcome: Failed}, d.Next)
		if d.Stop != nil {
			t.Fatal("MaxErrors 0 stopped")
		}
	}
}

func TestRateLimitedWaitsForQuotaWithoutCountingAnError(t *testing.T) {
	p := tokyoPolicy(t)
	now := tue(p.Location, 10, 0)
	s, _ := p.Next(State{}, Observation{Outcome: First}, now)
	s, d := p.Next(s, Observation{Outcome: RateLimited, RetryAt: now.Add(20 * time.Minute), Unsent: true}, now)
	if d.Interval != 20*time.Minute || d.Rule != RuleRateLimited || s.Errors != 0 {
		t.Fatalf("%+v errors %d", d, s.Errors)
	}
}

func TestCheckStart(t *testing.T) {
	p := DefaultPolicy()
	now := time.Date(2025, 6, 10, 10, 0, 0, 0, time.UTC)
	if err := p.CheckStart(quotaAt(3, 5000, now.Add(time.Hour)), now); err != nil {
		t.Fatalf("no floor: %v", err)
	}
	p.MinRemaining = 100
	err := p.CheckStart(quotaAt(42, 5000, now.Add(12*time.Minute)), now)
	if !errors.Is(err, ErrQuotaFloor) || !strings.Contains(err.Error(), "remaining core quota 42 is below the floor of 100") || !strings.Contains(err.Error(), "in 12m0s") {
		t.Fatalf("%v", err)
	}
	for _, q := range []Quota{quotaAt(100, 5000, now.Add(time.Hour)), {}, quotaAt(0, 5000, now.Add(-time.Second))} {
		if err := p.CheckStart(q, now); err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := DefaultPolicy()
	bad.Min, bad.Max = 10*time.Minute, 5*time.Minute
	bad.BudgetShare = 0
	bad.Growth = 0.5
	bad.Night = 0
	err := bad.Validate()
	for _, want := range []string{"Min 10m0s is above Max 5m0s", "BudgetShare 0", "Growth 0.5: want 1 or more", "Night is 0s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: want %q", err, want)
		}
	}
}

func TestParseHoursAndDays(t *testing.T) {
	for in, want := range map[string]Hours{"9-18": {540, 1080}, "22-7": {1320, 420}, "08:30-17:45": {510, 1065}, "0-24": {0, 1440}, "off": {}} {
		h, err := ParseHours(in)
		if err != nil || h != want {
			t.Errorf("ParseHours(%q) = %v, %v", in, h, err)
		}
		if back, _ := ParseHours(h.String()); back != h {
			t.Errorf("%q round trip: %q", in, h.String())
		}
	}
	for _, in := range []string{"9", "18-9x", "25-3", "9-9", "9:5-10", "24-3"} {
		if _, err := ParseHours(in); err == nil {
			t.Errorf("ParseHours(%q) accepted", in)
		}
	}
	day := Hours{From: 22 * 60, To: 7 * 60}
	for h, want := range map[int]bool{21: false, 22: true, 23: true, 0: true, 6: true, 7: false, 12: false} {
		if got := day.Contains(time.Date(2025, 1, 1, h, 0, 0, 0, time.UTC)); got != want {
			t.Errorf("22-7 contains %d:00: %v", h, got)
		}
	}
	for in, want := range map[string]Weekdays{"mon-fri": MondayToFriday, "all": EveryDay, "sat-sun": 1<<time.Saturday | 1<<time.Sunday,
		"fri-mon": 1<<time.Friday | 1<<time.Saturday | 1<<time.Sunday | 1<<time.Monday, "Monday,wed": 1<<time.Monday | 1<<time.Wednesday, "none": 0} {
		w, err := ParseWeekdays(in)
		if err != nil || w != want {
			t.Errorf("ParseWeekdays(%q) = %v, %v", in, w, err)
		}
	}
	if _, err := ParseWeekdays("mon-funday"); err == nil {
		t.Error("a bad day was accepted")
	}
}
