// Package report turns benchmark results into the section of
// BENCHMARKS.md that compares clients, and into a chart of requests over
// time per client against what the quota allows.
//
// Layer 8 of docs/architecture.md: it owns the benchmark's tables and chart,
// and must not run workloads itself.
package report

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/bench/harness"
)

// Markers delimit the section this package owns in BENCHMARKS.md; the
// generated part inside it is rewritten by every run, the rest of the
// section (the reading of the results) is left as written.
const (
	SectionStart   = "<!-- clients:start -->"
	SectionEnd     = "<!-- clients:end -->"
	GeneratedStart = "<!-- clients:generated:start -->"
	GeneratedEnd   = "<!-- clients:generated:end -->"
)

// Machine describes where the benchmark ran.
type Machine struct {
	CPUs       int
	CPU        string
	Go         string
	OS         string
	LoadBefore string // /proc/loadavg's 1, 5 and 15 minute averages
	LoadAfter  string
	Date       time.Time
}

// ThisMachine reads what it can of this machine; fields it cannot read
// say "unknown".
func ThisMachine(now time.Time) Machine {
	return Machine{
		CPUs: runtime.NumCPU(), CPU: cpuModel(), Go: runtime.Version(),
		OS: runtime.GOOS + "/" + runtime.GOARCH, LoadBefore: LoadAverage(), Date: now.UTC(),
	}
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// LoadAverage returns the 1, 5 and 15 minute load averages, or "unknown".
func LoadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Generated is the generated part of the section: how to regenerate, the
// machine, the workloads and clients, one table per workload and the chart.
func Generated(ws []harness.Workload, cs []harness.Client, rs []harness.Result, m Machine, command string, took time.Duration, chart string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Regenerate with `%s` (about %s on the machine below; `go run ./bench -quick` is a one-minute smoke run that writes to bench/out/ only).\n\n",
		command, took.Round(10*time.Second))
	fmt.Fprintf(&b, "Machine: %d CPUs (`nproc`), %s, %s, %s; load average %s before the run and %s after. Run on %s.\n\n",
		m.CPUs, m.CPU, m.Go, m.OS, m.LoadBefore, m.LoadAfter, m.Date.Format("2006-01-02"))
	b.WriteString("Every run starts a fresh simulator (package sim) on loopback and sends the workload's GETs from one queue; " +
		"the simulator counts violations and charged requests, and a recording transport under each client notes every answer. " +
		"Timings on a shared 2-core machine are noisy (± a few hundred milliseconds), and so are the refusal counts of clients " +
		"that race into a limit: how many requests are in flight when a penalty starts varies from run to run.\n\n")
	b.WriteString("Clients:\n\n")
	for _, c := range cs {
		fmt.Fprintf(&b, "- **%s**: %s\n", c.Name, c.Setup)
	}
	b.WriteString("\nColumns: *makespan* from the first request to the last job's end; *÷ ideal* against the earliest a perfect client could finish " +
		"(quota-bound: every bucket spent in full as its window opens, windows resetting on whole seconds as GitHub's do; " +
		"concurrency-bound: rounds of the latency at the concurrency limit; none for a client that gave up on jobs); *violations* are requests the simulator refused for " +
		"an empty bucket (primary) or a secondary limit; *wasted* are requests sent that the server did not serve; " +
		"*extra* are requests served that were not jobs (ratekeeper's GET /user per token, to learn its owner; in a stopped run, " +
		"also answers cut off by the deadline); " +
		"*quota used* is jobs done ÷ the quota the server offered during the makespan; *max in flight* is the simulator's.\n")
	for _, w := range ws {
		fmt.Fprintf(&b, "\n### %s\n\n%s\n\n", w.Title, w.About)
		b.WriteString(Table(w, rs))
	}
	if chart != "" {
		fmt.Fprintf(&b, "\n![Requests served over time per client, against what the limits allow](%s)\n\n", chart)
		b.WriteString("The chart plots, per workload, the requests the server accepted over time for each client; the dashed line is what a " +
			"perfect client could have had accepted by then. Time starts at the whole second the run began in, where the simulator's windows are aligned.\n")
	}
	return b.String()
}

// Table is the markdown table of one workload's results.
func Table(w harness.Workload, rs []harness.Result) string {
	var b strings.Builder
	b.WriteString("| client | done / failed / unfinished | makespan | ÷ ideal | violations (primary / secondary) | wasted | extra | quota used | max in flight |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		if r.Workload != w.Name {
			continue
		}
		makespan := fmt.Sprintf("%.1f s", r.Makespan.Seconds())
		if r.Unfinished > 0 {
			makespan = fmt.Sprintf("> %.0f s (stopped)", r.Makespan.Seconds())
		}
		ratio := fmt.Sprintf("%.2f", r.Ratio())
		switch {
		case r.Failed > 0:
			ratio = "— (gave up)"
		case r.Unfinished > 0:
			ratio = "> " + ratio
		}
		used := "—"
		if r.Available > 0 {
			used = fmt.Sprintf("%.0f %%", 100*r.Utilisation())
		}
		fmt.Fprintf(&b, "| %s | %d / %d / %d | %s | %s | %d (%d / %d) | %d | %d | %s | %d |\n",
			r.Client, r.Done, r.Failed, r.Unfinished, makespan, ratio,
			r.Violations(), r.PrimaryViolations, r.SecondaryViolations, r.Wasted(), r.Overhead(), used, r.MaxInFlight)
	}
	fmt.Fprintf(&b, "\nIdeal: %.1f s (for a run starting on a whole second).\n", w.Ideal(0).Seconds())
	return b.String()
}

// Splice puts generated into doc: between the generated markers when the
// section has them; as the whole section, with a place for the reading
// after it, when the section is empty or missing (then it goes at the end
// of doc). Everything outside the section is kept byte for byte.
func Splice(doc, generated string) (string, error) {
	start := strings.Index(doc, SectionStart)
	end := strings.Index(doc, SectionEnd)
	body := "\n## Against other clients\n\n" + GeneratedStart + "\n" + generated + GeneratedEnd +
		"\n\n### Reading\n\n(To be written after looking at the results.)\n"
	if start >= 0 && end > start && strings.TrimSpace(doc[start+len(SectionStart):end]) == "" {
		return doc[:start+len(SectionStart)] + body + doc[end:], nil
	}
	if start < 0 && end < 0 {
		section := SectionStart + body + SectionEnd + "\n"
		if doc != "" && !strings.HasSuffix(doc, "\n") {
			doc += "\n"
		}
		if doc != "" {
			doc += "\n"
		}
		return doc + section, nil
	}
	if start < 0 || end < start {
		return "", fmt.Errorf("BENCHMARKS.md: %s and %s must both appear, in that order", SectionStart, SectionEnd)
	}
	inner := doc[start:end]
	gs := strings.Index(inner, GeneratedStart)
	ge := strings.Index(inner, GeneratedEnd)
	if gs < 0 || ge < gs {
		return "", fmt.Errorf("BENCHMARKS.md: the section between %s and %s lacks %s … %s around its generated part",
			SectionStart, SectionEnd, GeneratedStart, GeneratedEnd)
	}
	gs += start + len(GeneratedStart)
	ge += start
	return doc[:gs] + "\n" + generated + doc[ge:], nil
}
