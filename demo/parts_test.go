package demo

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

func TestBatch(t *testing.T) {
	jobs := Batch(1000)
	if len(jobs) != 1000 {
		t.Fatalf("%d jobs", len(jobs))
	}
	if d := distinctPaths(jobs); d != 800 {
		t.Fatalf("%d distinct URLs, want 800", d)
	}
	seen := map[string]int{}
	kinds := map[string]int{}
	for i, j := range jobs {
		kinds[j.Kind]++
		if j.Kind == KindRepeat {
			first, ok := seen[j.Path]
			if !ok {
				t.Fatalf("repeat %d of %s was never fetched before", i, j.Path)
			}
			if jobs[first].Kind != KindRepository {
				t.Errorf("repeat of a %s", jobs[first].Kind)
			}
			continue
		}
		if _, dup := seen[j.Path]; dup {
			t.Fatalf("%s twice in the first pass", j.Path)
		}
		seen[j.Path] = i
	}
	if kinds[KindRepository] != 200 || kinds[KindReadme] != 200 || kinds[KindIssues] != 400 || kinds[KindRepeat] != 200 {
		t.Errorf("kinds %v", kinds)
	}
	if jobs[1].Path != jobs[0].Path+"/readme" || !strings.HasPrefix(jobs[2].Path, jobs[0].Path+"/issues?") {
		t.Errorf("first jobs %v", jobs[:4])
	}
	// Deterministic, and any size works.
	if again := Batch(1000); again[999] != jobs[999] {
		t.Error("not deterministic")
	}
	for _, n := range []int{1, 2, 5, 7, 50_001} {
		b := Batch(n)
		if len(b) != n || distinctPaths(b) != n-n/5 {
			t.Errorf("Batch(%d): %d jobs, %d distinct", n, len(b), distinctPaths(b))
		}
	}
	if Batch(0) != nil {
		t.Error("Batch(0) not empty")
	}
}

func TestIdeal(t *testing.T) {
	for _, c := range []struct {
		charged, owners int
		limit           int64
		workers         int
		latency         time.Duration
		want            time.Duration
		windows         int
	}{
		// 1,200 requests, 3 × 100 per 10 s: 4 windows, the last 300 at 12 in flight × 20 ms.
		{1200, 3, 100, 12, 20 * time.Millisecond, 30*time.Second + 25*20*time.Millisecond, 4},
		{300, 3, 100, 1, 0, 0, 1},
		{301, 3, 100, 1, time.Millisecond, 10*time.Second + time.Millisecond, 2},
		{0, 3, 100, 1, time.Millisecond, 0, 0},
	} {
		got, n := Ideal(c.charged, c.owners, c.limit, 10*time.Second, c.workers, c.latency)
		if got != c.want || n != c.windows {
			t.Errorf("Ideal(%d, %d, %d) = %v, %d; want %v, %d", c.charged, c.owners, c.limit, got, n, c.want, c.windows)
		}
	}
}

func snapshot() Snapshot {
	return Snapshot{
		Elapsed: 4 * time.Second, Window: 10 * time.Second, Total: 1000, Done: 230, Failed: 1,
		Tokens: []TokenLine{
			{Index: 1, Masked: "#1 …0001", Owner: "alice", State: "exhausted", Remaining: 0, Limit: 100, ResetsIn: 6 * time.Second, Answered: 90, SharedWith: []int{2}},
			{Index: 2, Masked: "#2 …0002", Owner: "alice", State: "exhausted", Remaining: 0, Limit: 100, ResetsIn: 6 * time.Second, Answered: 10, SharedWith: []int{1}},
			{Index: 3, Masked: "#3 …0003", Owner: "bob", State: "available", Remaining: 12, Limit: 100, ResetsIn: 7 * time.Second, Answered: 88},
			{Index: 4, Masked: "#4 …0004", Owner: "carol", State: "available", Remaining: 40, Limit: 100, ResetsIn: 8 * time.Second, Answered: 60},
			{Index: 5, Masked: "#5 …0005", State: "invalid", Reason: "GET /github/user answered 401 Unauthorized", Remaining: -1, Limit: -1},
		},
	}
}

func TestPlainLine(t *testing.T) {
	got := PlainLine(snapshot())
	// 769 left, 52 available now, then 100 at 6 s (alice), 7 s (bob), 8 s
	// (carol), 16 s, 17 s, 18 s, 26 s, 27 s: the quota allows it at 27 s
	// at best.
	want := "[   4.0s] 231/1000 GETs (23%), 1 failed, ETA 27s · #1+#2 alice 0/100, resets in 6s · #3 bob 12/100 · #4 carol 40/100 · #5 rejected"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestETA(t *testing.T) {
	s := snapshot()
	if q, ok := QuotaETA(s); !ok || q != 27*time.Second {
		t.Errorf("QuotaETA = %v, %v", q, ok)
	}
	// The pace so far wins when it is slower than the quota allows.
	s.Tokens[2].Remaining, s.Tokens[3].Remaining = 100, 100
	s.Total, s.Done, s.Failed = 400, 100, 0
	if e, ok := BatchETA(s); !ok || e != 12*time.Second {
		t.Errorf("BatchETA = %v, %v; want 12s (4s for 100 of 400)", e, ok)
	}
	if _, ok := BatchETA(Snapshot{Total: 10}); ok {
		t.Error("an ETA with nothing done and nothing known")
	}
	s.Tokens[2].Remaining = -1
	if _, ok := QuotaETA(s); ok {
		t.Error("a quota ETA with an unknown bucket")
	}
}

func TestTokenText(t *testing.T) {
	s := snapshot()
	for i, want := range []string{
		"#1 …0001   alice  answered 90   core 0/100 left, resets in 6s  waiting for the reset  (one bucket with #2)",
		"#2 …0002   alice  answered 10   core 0/100 left, resets in 6s  waiting for the reset  (one bucket with #1)",
		"#3 …0003   bob    answered 88   core 12/100 left  low",
		"#4 …0004   carol  answered 60   core 40/100 left  ok",
		"#5 …0005   rejected: GET /github/user answered 401 Unauthorized; not used",
	} {
		if got := TokenText(s.Tokens[i]); got != want {
			t.Errorf("token %d:\ngot  %q\nwant %q", i+1, got, want)
		}
	}
	if got := TokenText(TokenLine{Masked: "#1 …0001", Remaining: -1, Limit: -1}); got != "#1 …0001   not checked yet" {
		t.Errorf("unchecked: %q", got)
	}
}

// The summary takes early retries and endpoint-limit refusals from the
// simulator's totals and prints them beside the violations.
func TestSummaryEarlyRetries(t *testing.T) {
	st := sim.Stats{Total: sim.Counters{Violations: 5, PrimaryViolations: 1, SecondaryViolations: 2, EndpointViolations: 2, EarlyRetries: 3}}
	s := Summarize(Inputs{Scenario: Scenario{Limit: 10, Window: 10 * time.Second, Tokens: []Token{{Secret: "demo-x", Owner: "alice"}}}, Stats: st})
	if s.EarlyRetries != 3 || s.EndpointViolations != 2 {
		t.Fatalf("summary %+v", s)
	}
	var out bytes.Buffer
	s.Write(&out)
	for _, want := range []string{
		"  violations  5 (1 primary, 2 secondary, 2 by limits that announce nothing)",
		"  early       3 early retries",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}
