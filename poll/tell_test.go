package poll

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// runPolls polls the simulated events feed of f n times with pol and
// returns what it said.
func runPolls(t *testing.T, f *fixture, pol Policy, n int) *recorder {
	t.Helper()
	rec := &recorder{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rec.onPoll = func(k int, _ Event) {
		if k == n {
			cancel()
		}
	}
	p, err := New(Options{URLs: []string{simBase + "/repos/o/r/events"}, Client: f.client, Policy: pol, Sink: rec,
		Quota: TransportQuota(f.tr), OnEvent: rec.event})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return rec
}

// When the next poll is due is said from the first poll on, then only
// when the interval or its rule changes: 100 unchanged polls say it a few
// times, not 100, and without -v the user is never left in the dark.
func TestNextPollIsSaidOncePerChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, sim.APIConfig{}, 0)
		rec := runPolls(t, f, utcPolicy(), 100)
		next := rec.kinds(EventNext)
		if len(next) == 0 || len(next) > 10 {
			t.Fatalf("%d lines saying when the next poll is, want 1 to 10", len(next))
		}
		if first := rec.events[1]; first.Kind != EventNext || !strings.Contains(first.String(), "next poll in ") {
			t.Errorf("after the first poll: %s, want when the next one is", first)
		}
		for i := 1; i < len(next); i++ {
			if next[i].Rule == next[i-1].Rule && next[i].Interval == next[i-1].Interval {
				t.Errorf("said twice: %s", next[i])
			}
		}
		if n := len(rec.kinds(EventBudget)); n != 0 {
			t.Errorf("%d budget lines with 5,000 requests an hour", n)
		}
	})
}

// The budget guard speaks only when it stretches the interval by a tenth
// or more: with 59 of 60 requests left it lengthens 5m to 5m5s, which is
// said as the next poll's time, not as a stretch; with 9 of 10 left it
// triples the interval, and says so — once per change, not at every poll.
func TestBudgetGuardSpeaksWhenItStretches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := utcPolicy()
		pol.QuietHours, pol.BusinessHours = Hours{}, Hours{}
		f := newFixture(t, sim.APIConfig{Limit: 60, Window: time.Hour}, 0)
		rec := runPolls(t, f, pol, 5)
		if b := rec.kinds(EventBudget); len(b) != 0 {
			t.Errorf("with 59 of 60 left: %s", b[0])
		}
		if next := rec.kinds(EventNext); len(next) == 0 || next[0].Rule != RuleBudget || next[0].Interval <= 5*time.Minute {
			t.Errorf("with 59 of 60 left, the next poll's lines: %v", next)
		}

		f = newFixture(t, sim.APIConfig{Limit: 10, Window: time.Hour, EventsEvery: time.Minute}, 0)
		rec = runPolls(t, f, pol, 6)
		b := rec.kinds(EventBudget)
		if len(b) == 0 || len(b) >= 6 || !strings.Contains(b[0].String(), "budget guard stretches the interval from 5m0s to ") {
			t.Errorf("with 9 of 10 left: %d budget lines in 6 polls: %v", len(b), b)
		}
	})
}
