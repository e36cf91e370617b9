package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkFetchSecondaryRealTime is GitHub's secondary limit at its own
// time scale, through `ratekeeper fetch` with its defaults: 400 URLs, one
// token, a server that allows 4 requests in flight, answers in 1 s and
// refuses for the real 60 s penalty without retry-after. The client starts
// at 4 in flight (quota.RampStart) and tries 5 after a round of successes:
// one refusal episode is the price of finding the limit, and the cap it
// learns holds for ten pauses from the end of the pause, past the end of
// the batch. The ideal is 100 s of work at 4 in flight plus the one 60 s
// penalty; the target 1.15 × that (184 s) with at most 1 episode. It
// reports the makespan, its ratio to the ideal, the simulator's count of
// secondary refusals and the refusal episodes (refusals more than a
// penalty apart).
//
//	go test ./cmd/ratekeeper -run '^$' -bench FetchSecondaryRealTime -benchtime 1x -timeout 20m
func BenchmarkFetchSecondaryRealTime(b *testing.B) {
	const (
		n        = 400
		inFlight = 4
		latency  = time.Second
		penalty  = time.Minute
	)
	ideal := n/inFlight*latency + penalty
	for b.Loop() {
		s := startSimProxy(b, "--latency", latency.String(), "--max-concurrent", fmt.Sprint(inFlight),
			"--penalty", penalty.String(), "--secondary-retry-after=false")
		dir := b.TempDir()
		input, out := filepath.Join(dir, "urls.txt"), filepath.Join(dir, "results.jsonl")
		var urls strings.Builder
		for i := range n {
			fmt.Fprintf(&urls, "%s/github/repos/o/r%03d\n", s.URL, i)
		}
		if err := os.WriteFile(input, []byte(urls.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		p := startProcess(b, []string{"GITHUB_TOKEN=tok-alice-1"}, "fetch", "-i", input, "-o", out,
			"--db", filepath.Join(dir, "rk.db"), "--provider", "github="+s.URL+"/github", "--progress", "off")
		if err := p.wait(b, 15*time.Minute); err != nil {
			b.Fatalf("fetch: %v\n%s", err, p.out())
		}
		makespan := time.Since(start)

		by := outputRecords(b, out)
		ok := 0
		for _, rec := range by {
			if rec["status"] == float64(http.StatusOK) {
				ok++
			}
		}
		if len(by) != n || ok != n {
			b.Errorf("%d URLs in the output, %d of them 200; want %d", len(by), ok, n)
		}
		st := s.readStats(b)
		refused := s.refusals()
		b.Logf("makespan %v (ideal %v), %d requests at the simulator, %d secondary refusals, most in flight %d; refusals (arrived→answered) %v",
			makespan.Round(time.Millisecond), ideal, st.Total.Requests, st.Total.SecondaryViolations, st.Total.MaxInFlight, offsets(refused, start))
		b.ReportMetric(makespan.Seconds(), "makespan-s")
		b.ReportMetric(makespan.Seconds()/ideal.Seconds(), "x-ideal")
		b.ReportMetric(float64(st.Total.SecondaryViolations), "secondary-refusals")
		b.ReportMetric(float64(episodes(refused, penalty)), "refusal-episodes")
	}
}

// offsets shows when each refusal arrived and was answered, counted from
// start.
func offsets(refused []proxied, start time.Time) []string {
	out := make([]string, len(refused))
	for i, r := range refused {
		out[i] = fmt.Sprintf("%v→%v", r.arrived.Sub(start).Round(time.Millisecond), r.answered.Sub(start).Round(time.Millisecond))
	}
	return out
}
