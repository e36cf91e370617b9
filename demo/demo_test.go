package demo

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestRunAgainstTheSimulator runs the whole demo on fake time: 700 GETs
// against three owners of 100 requests per 10 s need several windows, so
// the client has to wait for resets; the simulator must see no violation
// and every number of the summary must agree with its counters.
func TestRunAgainstTheSimulator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		s, err := Run(context.Background(), &out, Options{Size: 700, InProcess: true, Progress: ProgressLines})
		if err != nil {
			t.Fatalf("Run: %v\n%s", err, out.String())
		}
		text := out.String()
		if s.Violations != 0 || s.PrimaryViolations != 0 || s.SecondaryViolations != 0 {
			t.Errorf("violations %d/%d/%d, want 0\n%s", s.Violations, s.PrimaryViolations, s.SecondaryViolations, text)
		}
		if s.EarlyRetries != 0 {
			t.Errorf("%d early retries, want 0\n%s", s.EarlyRetries, text)
		}
		if s.Done != 700 || s.Failed != 0 {
			t.Errorf("done %d failed %d, want 700 and 0", s.Done, s.Failed)
		}
		// The client's count of requests on the wire is the simulator's.
		if s.ClientChecks+s.ClientBatch != s.Sent {
			t.Errorf("client sent %d+%d, simulator saw %d", s.ClientChecks, s.ClientBatch, s.Sent)
		}
		// Checking 5 tokens: 5 GET /user (one 401) and 4 free GET /rate_limit.
		// Repeats served fresh from the cache send nothing.
		if s.ClientChecks != 9 || s.ClientBatch != int64(700-s.Fresh) {
			t.Errorf("checks %d, batch %d; want 9 and 700 less %d fresh", s.ClientChecks, s.ClientBatch, s.Fresh)
		}
		// Every 304 the simulator sent came back to a job as a cached 200.
		if int64(s.Revalidated) != s.NotModified {
			t.Errorf("client revalidated %d, simulator answered %d 304s", s.Revalidated, s.NotModified)
		}
		// Charged: the batch's full answers plus the 4 accepted GET /user.
		if want := s.ClientBatch - s.NotModified + 4; s.Charged != want {
			t.Errorf("charged %d, want %d", s.Charged, want)
		}
		// Every repeat is free: served fresh from the cache (the
		// simulator says max-age=60, as GitHub does), or a free 304
		// whichever owner's token it went with: a perfect client pays
		// for the distinct URLs only. (The simulator's tags hash the
		// token, as GitHub's do: a repeat with another token is free
		// only with the tag computed for it.)
		if int64(s.Fresh)+s.NotModified != int64(s.Repeats) || s.Fresh == 0 {
			t.Errorf("%d fresh and %d 304s for %d repeats, want one or the other per repeat, some fresh", s.Fresh, s.NotModified, s.Repeats)
		}
		if s.Waits == 0 || s.WaitTotal <= 0 {
			t.Errorf("no waits recorded (%d, %v), but 700 GETs cannot fit in one window", s.Waits, s.WaitTotal)
		}
		// Nobody beats the ideal: if this fails, the ideal is wrong.
		if s.Elapsed < s.Ideal || s.Elapsed < s.ChargedIdeal {
			t.Errorf("elapsed %v is below the ideal %v / %v", s.Elapsed, s.Ideal, s.ChargedIdeal)
		}
		// The repeats being free, the run keeps close to the ideal.
		if limit := s.Ideal * 115 / 100; s.Elapsed > limit {
			t.Errorf("elapsed %v, want at most 1.15 × the ideal %v = %v", s.Elapsed, s.Ideal, limit)
		}
		if s.Charged > s.Available {
			t.Errorf("charged %d above the %d available", s.Charged, s.Available)
		}
		if s.Owners != 3 || s.PhysicalRate != 30 {
			t.Errorf("owners %d rate %v, want 3 and 30/s", s.Owners, s.PhysicalRate)
		}
		if len(s.Shared) != 1 || s.Shared[0].Owner != "alice" || len(s.Shared[0].Tokens) != 2 || s.Shared[0].Violations != 0 {
			t.Errorf("shared owners %+v, want alice with #1 and #2", s.Shared)
		}
		if len(s.Rejected) != 1 || s.Rejected[0].Index != 5 {
			t.Errorf("rejected %+v, want #5", s.Rejected)
		}
		for _, want := range []string{
			"tokens #1 and #2 belong to the same user: ratekeeper detects it and paces them as one bucket",
			"#1 and #2 → alice (one bucket), #3 → bob, #4 → carol, #5 rejected",
			"  violations  0 (0 primary, 0 secondary)",
			"  early       0 early retries: requests the simulator saw arrive at a refused bucket before the time its refusal named",
			"physical limit K·L/W = 3 × 100 / 10s = 30 requests/s",
			"  rejected    #5 …0005: GET /github/user answered 401 Unauthorized",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("output lacks %q:\n%s", want, text)
			}
		}
		if strings.Contains(text, "demo-alice-key") || strings.Contains(text, "\x1b[") {
			t.Errorf("output shows a token or terminal escapes:\n%s", text)
		}
		// Plain progress: a line every 2 s of the run.
		line := regexp.MustCompile(`(?m)^\[\s*\d+\.\ds\] \d+/700 GETs \(\d+%\).* · #1\+#2 alice \d+/100.* · #3 bob \d+/100.* · #4 carol \d+/100.* · #5 rejected$`)
		if n := len(line.FindAllString(text, -1)); n < int(s.Elapsed/DefaultInterval) {
			t.Errorf("%d progress lines, want one every 2s of a %v run:\n%s", n, s.Elapsed, text)
		}
		if !strings.Contains(text, "] 700/700 GETs (100%) · ") {
			t.Errorf("no final progress line:\n%s", text)
		}
	})
}

func TestRunStopsWithTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var out bytes.Buffer
		s, err := Run(ctx, &out, Options{Size: 1000, InProcess: true, Progress: ProgressOff})
		if err == nil || !strings.Contains(err.Error(), "batch stopped after") {
			t.Fatalf("err = %v, want the batch stopped", err)
		}
		if s == nil || s.Done+s.Failed >= 1000 || s.Violations != 0 {
			t.Fatalf("summary %+v", s)
		}
	})
}

func TestValidate(t *testing.T) {
	def := Options{}.WithDefaults()
	if err := def.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	for _, c := range []struct {
		change func(*Options)
		want   string
	}{
		{func(o *Options) { o.Size = 0 }, "size 0: want a number of GETs from 1 to 100000"},
		{func(o *Options) { o.Workers = 1000 }, "workers 1000: want 1 to 256"},
		{func(o *Options) { o.Limit = -5 }, "limit -5: want at least 1 request per window"},
		{func(o *Options) { o.Window = 1500 * time.Millisecond }, "window 1.5s: want whole seconds"},
		{func(o *Options) { o.Latency = -time.Second }, "latency -1s: want 0 to 10s"},
		{func(o *Options) { o.Progress = "fancy" }, `progress "fancy": want auto, bars, lines or off`},
		{func(o *Options) { o.Interval = 0 }, "interval 0s: want at least 100ms"},
		{func(o *Options) { o.Policy = "fast" }, `unknown policy "fast": want spread, adaptive or greedy`},
	} {
		o := def
		c.change(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", o, err, c.want)
		}
	}
}

// TestRunAppOnThreeOrganisations: given the App's id and key alone, the
// client finds the three installations, mints one token for each, and
// answers every repository's GET with its own organisation's
// installation, each on its own budget.
func TestRunAppOnThreeOrganisations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		s, err := RunApp(context.Background(), &out, Options{InProcess: true})
		if err != nil {
			t.Fatalf("RunApp: %v\n%s", err, out.String())
		}
		if s.Jobs != 90 || s.Done != 90 || s.Failed != 0 || s.Wrong != 0 || s.Expired != 0 || s.Violations != 0 {
			t.Errorf("jobs %d done %d failed %d wrong %d expired %d violations %d; want 90 answered, nothing else\n%s",
				s.Jobs, s.Done, s.Failed, s.Wrong, s.Expired, s.Violations, out.String())
		}
		if len(s.Installations) != len(appAccounts) {
			t.Fatalf("%d installations, want %d\n%s", len(s.Installations), len(appAccounts), out.String())
		}
		for i, in := range s.Installations {
			if in.Account != appAccounts[i] || in.Answered != 30 || in.Used != 30 || in.Limit != DefaultLimit || in.Mints != 1 {
				t.Errorf("installation %+v: want on %s, 30 answered, 30 of %d used, 1 mint", in, appAccounts[i], DefaultLimit)
			}
		}
		if !strings.Contains(out.String(), "90 of 90 GETs answered with their repository, 0 failed") {
			t.Errorf("output:\n%s", out.String())
		}
	})
}
