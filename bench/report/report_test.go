package report

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/bench/harness"
)

func TestSpliceAppendsThenReplacesOnlyTheGeneratedPart(t *testing.T) {
	doc := "# Benchmarks\n\n<!-- others:start -->\nthe store's numbers\n<!-- others:end -->"
	once, err := Splice(doc, "table one\n")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(once, doc+"\n\n"+SectionStart+"\n") || !strings.HasSuffix(once, SectionEnd+"\n") ||
		!strings.Contains(once, GeneratedStart+"\ntable one\n"+GeneratedEnd) {
		t.Fatalf("appended section:\n%s", once)
	}
	// A reading written by hand inside the section survives a new run.
	edited := strings.Replace(once, "(To be written after looking at the results.)", "Our reading.", 1) + "after the section\n"
	twice, err := Splice(edited, "table two\n")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(edited, "table one\n", "table two\n", 1)
	if twice != want {
		t.Fatalf("got\n%s\nwant\n%s", twice, want)
	}
	if fresh, _ := Splice("", "x\n"); !strings.HasPrefix(fresh, SectionStart) {
		t.Errorf("empty doc: %q", fresh)
	}
	// Empty markers someone left for the section are filled in place.
	placed := "# B\n\n" + SectionStart + "\n" + SectionEnd + "\n\n## Next\n"
	filled, err := Splice(placed, "x\n")
	if err != nil || !strings.HasPrefix(filled, "# B\n\n"+SectionStart+"\n## Against other clients\n") ||
		!strings.HasSuffix(filled, "(To be written after looking at the results.)\n"+SectionEnd+"\n\n## Next\n") {
		t.Errorf("empty markers: %v\n%s", err, filled)
	}
	for _, bad := range []string{
		SectionStart + "\nno end",
		SectionEnd + " before " + SectionStart,
		SectionStart + "\nno generated markers\n" + SectionEnd,
	} {
		if _, err := Splice(bad, "x"); err == nil || !strings.Contains(err.Error(), "BENCHMARKS.md") {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
}

func results() ([]harness.Workload, []harness.Result) {
	ws := harness.Workloads(harness.Quick)
	rs := []harness.Result{
		{Workload: ws[0].Name, Client: "ratekeeper greedy", Jobs: 240, Done: 240, Makespan: 6500 * time.Millisecond,
			Ideal: 6 * time.Second, Requests: 243, Accepted: 243, Charged: 243, Available: 300, MaxInFlight: 5,
			Accepts: []float64{0.1, 0.2, 2.1, 4.1, 6.4}},
		{Workload: ws[0].Name, Client: "net/http", Jobs: 240, Done: 240, Makespan: 6 * time.Second, Ideal: 6 * time.Second,
			Requests: 276, Accepted: 240, PrimaryViolations: 36, Available: 240, MaxInFlight: 4,
			Accepts: []float64{0.1, 2.1}, Refusals: []float64{0.3}},
		{Workload: ws[2].Name, Client: "ratekeeper spread", Jobs: 300, Done: 25, Unfinished: 275, Makespan: 12 * time.Second,
			Ideal: 600 * time.Millisecond, Requests: 26, Accepted: 26, MaxInFlight: 1, Accepts: []float64{1, 2}},
	}
	return ws, rs
}

func TestTable(t *testing.T) {
	ws, rs := results()
	got := Table(ws[0], rs)
	for _, want := range []string{
		"| ratekeeper greedy | 240 / 0 / 0 | 6.5 s | 1.08 | 0 (0 / 0) | 0 | 3 | 80 % | 5 |",
		"| net/http | 240 / 0 / 0 | 6.0 s | 1.00 | 36 (36 / 0) | 36 | 0 | 100 % | 4 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	rs = append(rs, harness.Result{Workload: ws[0].Name, Client: "go-retryablehttp", Jobs: 240, Done: 60, Failed: 180,
		Makespan: time.Second, Ideal: 6 * time.Second, Requests: 240, Accepted: 60, PrimaryViolations: 180, Available: 60, MaxInFlight: 4})
	got = Table(ws[0], rs)
	if !strings.Contains(got, "| go-retryablehttp | 60 / 180 / 0 | 1.0 s | — (gave up) | 180 (180 / 0) | 180 | 0 | 100 % | 4 |") {
		t.Errorf("row of a client that gave up:\n%s", got)
	}
	if strings.Contains(got, "spread") {
		t.Errorf("another workload's row:\n%s", got)
	}
	got = Table(ws[2], rs)
	if !strings.Contains(got, "| ratekeeper spread | 25 / 0 / 275 | > 12 s (stopped) | > 20.00 | 0 (0 / 0) | 0 | 1 | — | 1 |") {
		t.Errorf("unfinished row:\n%s", got)
	}
}

func TestGeneratedAndChart(t *testing.T) {
	ws, rs := results()
	cs := harness.Clients()
	m := Machine{CPUs: 2, CPU: "Test CPU", Go: "go1.26", OS: "linux/amd64", LoadBefore: "0.1 0.2 0.3", LoadAfter: "1 1 1", Date: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)}
	g := Generated(ws, cs, rs, m, "go run ./bench", 8*time.Minute, "docs/chart.png")
	for _, want := range []string{"`go run ./bench`", "2 CPUs (`nproc`), Test CPU, go1.26", "load average 0.1 0.2 0.3 before",
		"- **go-retryablehttp**: retryablehttp.NewClient()", "![", "(docs/chart.png)", "### " + ws[0].Title} {
		if !strings.Contains(g, want) {
			t.Errorf("generated part lacks %q", want)
		}
	}
	path := filepath.Join(t.TempDir(), "chart.png")
	if err := Chart(path, ws, rs); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// One panel per workload with results: two of the three.
	if b := img.Bounds(); b.Dx() != 1100 || b.Dy() != 880 {
		t.Errorf("chart is %v", b)
	}
	if err := Chart(path, ws, nil); err == nil {
		t.Error("a chart of nothing")
	}
}
