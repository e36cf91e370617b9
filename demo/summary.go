package demo

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/sim"
)

// Inputs are everything a summary is made from.
type Inputs struct {
	Scenario Scenario
	Jobs     []Job
	Workers  int
	Policy   string
	Latency  time.Duration
	// Elapsed runs from the first token check to the batch's last answer.
	Elapsed time.Duration
	Run     RunTotals
	Wire    WireTotals
	// Stats are the simulator's counters, the ground truth.
	Stats sim.Stats
	Final Snapshot
}

// Summary is what a run achieved, with the simulator's word on quota.
type Summary struct {
	Policy  string
	Workers int
	// App is the App part's outcome (nil when skipped).
	App *AppSummary

	// The batch: GETs, distinct URLs among them, repeats; done and failed.
	Jobs, Distinct, Repeats int
	Done, Failed            int
	FirstError              error
	Elapsed                 time.Duration

	// Requests that reached the server, as the simulator counted them, and
	// as the client did: while checking the tokens and for the batch.
	Sent                      int64
	ClientChecks, ClientBatch int64
	// NotModified are the simulator's 304s; Revalidated the jobs the client
	// answered from its cache after a 304. RepeatsOtherOwner are repeats
	// sent with another owner's token than their first fetch.
	NotModified int64
	Revalidated int
	// Fresh are the jobs the client answered from its cache without a
	// request (the stored answer was fresh for its max-age).
	Fresh             int
	RepeatsOtherOwner int
	// Charged is the quota the server charged, all buckets together.
	Charged int64

	Waits                  int
	WaitTotal, LongestWait time.Duration
	Refusals, Retries      int

	Violations, PrimaryViolations, SecondaryViolations int64
	// EndpointViolations are refusals of limits that announce nothing
	// (the simulator's endpoint limits), counted in Violations too.
	EndpointViolations int64
	// EarlyRetries are requests the simulator saw arrive at a refused
	// scope before the time its refusal named (sim.Counters.EarlyRetries).
	EarlyRetries int64

	// The physical limit: Owners independent buckets of Limit requests
	// per Window. Windows counts the windows a run of Elapsed opens in
	// each bucket; Available is the quota they hold.
	Owners       int
	Limit        int64
	Window       time.Duration
	Windows      int64
	Available    int64
	PhysicalRate float64 // K·L/W, requests per second
	Rate         float64 // Charged ÷ Elapsed

	// Ideal is the earliest a perfect client could have finished (see
	// Ideal); IdealWindows the windows it needs.
	Ideal        time.Duration
	IdealWindows int
	Latency      time.Duration
	// ChargedIdeal is Ideal for the requests this run was charged for:
	// how well it paced what it spent, whatever the cache saved.
	ChargedIdeal time.Duration

	// Shared lists the owners with several tokens, as the client learned
	// them; Rejected the tokens the server refused.
	Shared   []SharedOwner
	Rejected []TokenLine
}

// SharedOwner is one owner with several tokens, and what its one bucket
// was charged, according to the simulator.
type SharedOwner struct {
	Owner        string
	Tokens       []int
	Charged      int64
	Violations   int64
	EarlyRetries int64
}

// Ideal is the earliest a perfect client could finish charged requests
// against owners independent buckets of limit requests per window, with
// workers requests in flight taking latency each. It spends each bucket in
// full the moment a window opens, so it needs n = ⌈charged ÷ (owners·limit)⌉
// windows and ends (n−1) windows after the start, plus the time the last
// window's requests take: ⌈requests ÷ workers⌉ × latency.
func Ideal(charged, owners int, limit int64, window time.Duration, workers int, latency time.Duration) (time.Duration, int) {
	perWindow := int64(owners) * limit
	if charged <= 0 || perWindow <= 0 {
		return 0, 0
	}
	n := (int64(charged) + perWindow - 1) / perWindow
	last := int64(charged) - (n-1)*perWindow
	rounds := (last + int64(max(workers, 1)) - 1) / int64(max(workers, 1))
	return time.Duration(n-1)*window + time.Duration(rounds)*latency, int(n)
}

// Summarize computes the summary of a run.
func Summarize(in Inputs) *Summary {
	sc := in.Scenario
	s := &Summary{
		Policy: in.Policy, Workers: in.Workers,
		Jobs: len(in.Jobs), Distinct: distinctPaths(in.Jobs),
		Done: in.Run.Done, Failed: in.Run.Failed, FirstError: in.Run.FirstError,
		Elapsed:      in.Elapsed,
		Sent:         in.Stats.Total.Requests,
		ClientChecks: in.Wire.Checks, ClientBatch: in.Wire.Batch,
		NotModified: in.Stats.Total.NotModified, Revalidated: in.Run.Revalidated, Fresh: in.Run.Fresh,
		RepeatsOtherOwner: in.Run.RepeatsOtherOwner,
		Charged:           in.Stats.Total.Charged,
		Waits:             in.Run.Waits, WaitTotal: in.Run.WaitTotal, LongestWait: in.Run.LongestWait,
		Refusals: in.Run.Refusals, Retries: in.Run.Retries,
		Violations:          in.Stats.Total.Violations,
		PrimaryViolations:   in.Stats.Total.PrimaryViolations,
		SecondaryViolations: in.Stats.Total.SecondaryViolations,
		EndpointViolations:  in.Stats.Total.EndpointViolations,
		EarlyRetries:        in.Stats.Total.EarlyRetries,
		Owners:              len(sc.Owners()), Limit: sc.Limit, Window: sc.Window,
		PhysicalRate: sc.PhysicalRate(),
		Latency:      in.Latency,
	}
	s.Repeats = s.Jobs - s.Distinct
	s.Windows = int64(in.Elapsed/sc.Window) + 1
	s.Available = int64(s.Owners) * sc.Limit * s.Windows
	if in.Elapsed > 0 {
		s.Rate = float64(s.Charged) / in.Elapsed.Seconds()
	}
	s.Ideal, s.IdealWindows = Ideal(s.Distinct, s.Owners, sc.Limit, sc.Window, in.Workers, in.Latency)
	s.ChargedIdeal, _ = Ideal(int(s.Charged), s.Owners, sc.Limit, sc.Window, in.Workers, in.Latency)

	shown := map[int]bool{}
	for _, t := range in.Final.Tokens {
		if t.State == creds.Invalid.String() {
			s.Rejected = append(s.Rejected, t)
			continue
		}
		if len(t.SharedWith) == 0 || shown[t.Index] {
			continue
		}
		g := SharedOwner{Owner: t.Owner, Tokens: append([]int{t.Index}, t.SharedWith...)}
		for _, i := range g.Tokens {
			shown[i] = true
		}
		sort.Ints(g.Tokens)
		if b, ok := in.Stats.BucketFor(APIName, t.Owner, ""); ok {
			g.Charged, g.Violations, g.EarlyRetries = b.Charged, b.Violations, b.EarlyRetries
		}
		s.Shared = append(s.Shared, g)
	}
	return s
}

// Write prints the summary.
func (s *Summary) Write(w io.Writer) {
	row := func(label, format string, args ...any) {
		fmt.Fprintf(w, "  %-11s %s\n", label, fmt.Sprintf(format, args...))
	}
	more := func(format string, args ...any) {
		fmt.Fprintf(w, "  %-11s %s\n", "", fmt.Sprintf(format, args...))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Summary")
	row("batch", "%d GETs (%d distinct URLs, %d repeated): %d done, %d failed, in %s (policy %s, %d workers)",
		s.Jobs, s.Distinct, s.Repeats, s.Done, s.Failed, roundDuration(s.Elapsed), s.Policy, s.Workers)
	if s.FirstError != nil {
		more("first failure: %v", s.FirstError)
	}
	row("sent", "%d requests reached the server: %d to check the tokens, %d for the batch",
		s.Sent, s.ClientChecks, s.ClientBatch)
	if client := s.ClientChecks + s.ClientBatch; client != s.Sent {
		more("(the client counted %d, the simulator %d)", client, s.Sent)
	}
	row("cache", "%d served from ratekeeper's cache without a request (fresh: GitHub says max-age=60)", s.Fresh)
	more("%d revalidated: answered 304 Not Modified (free on GitHub) and served from the cache", s.NotModified)
	if s.RepeatsOtherOwner > 0 {
		more("%d of the %d repeats went out with another owner's token than their first fetch: GitHub's ETag hashes", s.RepeatsOtherOwner, s.Repeats)
		more("the token, so ratekeeper sends the tag the server gives that token for the stored body, and the 304 confirms it")
	}
	row("waits", "%d requests waited for quota, %s in all (longest %s)", s.Waits, roundDuration(s.WaitTotal), roundDuration(s.LongestWait))
	row("refusals", "%d rate-limit refusals reached the client, %d retries", s.Refusals, s.Retries)
	endpoint := ""
	if s.EndpointViolations > 0 {
		endpoint = fmt.Sprintf(", %d by limits that announce nothing", s.EndpointViolations)
	}
	row("violations", "%d (%d primary, %d secondary%s): requests the simulator saw arrive at an empty bucket or during a penalty",
		s.Violations, s.PrimaryViolations, s.SecondaryViolations, endpoint)
	row("early", "%d early retries: requests the simulator saw arrive at a refused bucket before the time its refusal named",
		s.EarlyRetries)
	pct := 0.0
	if s.Available > 0 {
		pct = float64(s.Charged) * 100 / float64(s.Available)
	}
	row("quota", "%d requests charged of the %d the server made available during the run (%d owners × %d × %d windows): %.0f%%",
		s.Charged, s.Available, s.Owners, s.Limit, s.Windows, pct)
	more("physical limit K·L/W = %d × %d / %s = %s requests/s sustained; this run averaged %.1f/s",
		s.Owners, s.Limit, shortDuration(s.Window), trimFloat(s.PhysicalRate), s.Rate)
	ratio := math.NaN()
	if s.Ideal > 0 {
		ratio = s.Elapsed.Seconds() / s.Ideal.Seconds()
	}
	row("elapsed", "%s vs ideal %s (%.2f×)", roundDuration(s.Elapsed), roundDuration(s.Ideal), ratio)
	perWindow := int64(s.Owners) * s.Limit
	last := int64(s.Distinct) - int64(s.IdealWindows-1)*perWindow
	more("ideal: a perfect client pays only for the %d distinct URLs (a repeat is fresh, or a free 304); at %d per window",
		s.Distinct, perWindow)
	more("(%d owners × %d) that takes %s, so it ends %d × %s after the start, plus the last window's",
		s.Owners, s.Limit, plural(s.IdealWindows, "window"), s.IdealWindows-1, shortDuration(s.Window))
	more("%d requests at %d in flight × %s latency", last, s.Workers, s.Latency)
	if s.ChargedIdeal > 0 {
		more("the %d requests this run was charged for need at least %s the same way: %.2f× that",
			s.Charged, roundDuration(s.ChargedIdeal), s.Elapsed.Seconds()/s.ChargedIdeal.Seconds())
	}
	for _, g := range s.Shared {
		row("owners", "tokens %s both belong to %s: ratekeeper learned it from GET /user and paced them as one bucket",
			joinIndexes(g.Tokens), g.Owner)
		more("(%s's bucket: %d requests charged, %d violations, %d early retries)", g.Owner, g.Charged, g.Violations, g.EarlyRetries)
	}
	for _, t := range s.Rejected {
		row("rejected", "%s: %s; ratekeeper never used it for the batch", t.Masked, t.Reason)
	}
}

// joinIndexes writes [1 2] as "#1 and #2" and [1 2 3] as "#1, #2 and #3".
func joinIndexes(idx []int) string {
	parts := make([]string, len(idx))
	for i, n := range idx {
		parts[i] = fmt.Sprintf("#%d", n)
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// trimFloat writes 30 as "30" and 7.5 as "7.5".
func trimFloat(f float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", f), "0"), ".")
}

// plural writes 1 window, 3 windows.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
