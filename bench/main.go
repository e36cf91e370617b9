// Command bench compares ratekeeper with what people use instead — plain
// net/http, hashicorp/go-retryablehttp and gofri/go-github-ratelimit — on
// the same workloads against the simulator, and writes the comparison into
// docs/benchmarks-clients.md (its clients section) with a chart;
// BENCHMARKS.md keeps a summary of it.
//
//	go run ./bench            # everything, about 8 minutes; rewrites docs/benchmarks-clients.md and its chart
//	go run ./bench -quick     # smaller workloads, about a minute; writes to bench/out/ only
//	go run ./bench -only primary-403 -out bench/out
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/bench/harness"
	"github.com/ratekeeper/ratekeeper/bench/report"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	quick := flag.Bool("quick", false, "smaller workloads with shorter windows: a smoke run of about a minute")
	only := flag.String("only", "", "run only the workloads and clients whose name contains this (e.g. primary-403, ratekeeper)")
	md := flag.String("md", "docs/benchmarks-clients.md", "markdown file whose clients section is rewritten (BENCHMARKS.md keeps a summary of it)")
	png := flag.String("png", "docs/benchmarks-clients.png", "where the chart goes, beside the markdown file")
	out := flag.String("out", "", "write the markdown and chart here instead (default bench/out with -quick or -only)")
	from := flag.String("from", "", "skip the runs: rebuild the markdown and chart from a results.json a previous run saved")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q; see -help", flag.Args())
	}

	scale, command := harness.Full, "go run ./bench"
	if *quick {
		scale, command = harness.Quick, "go run ./bench -quick"
	}
	if *out == "" && (*quick || *only != "") {
		*out = filepath.Join("bench", "out")
	}
	// The chart is linked from the markdown file, relative to it.
	link, err := filepath.Rel(filepath.Dir(*md), *png)
	if err != nil {
		return fmt.Errorf("-png %s: %v", *png, err)
	}
	mdPath, pngPath := *md, *png
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
		mdPath, pngPath, link = filepath.Join(*out, "BENCHMARKS.md"), filepath.Join(*out, "benchmarks-clients.png"), "benchmarks-clients.png"
	}

	if *from != "" {
		return rebuild(*from, scale, command, mdPath, pngPath, link)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	machine := report.ThisMachine(time.Now())
	began := time.Now()
	ws, ran, rs, err := runAll(ctx, scale, *only)
	if err != nil {
		return err
	}
	machine.LoadAfter = report.LoadAverage()
	saved := saved{Machine: machine, Took: time.Since(began), Results: rs}
	// Keep the raw results first, so a failure below loses no run.
	resultsPath := filepath.Join("bench", "out", "results.json")
	if *out != "" {
		resultsPath = filepath.Join(*out, "results.json")
	}
	if err := save(resultsPath, saved); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "saved %s\n", resultsPath)
	return write(ws, ran, saved, command, mdPath, pngPath, link)
}

// runAll runs every client on every workload of scale, or those whose
// name contains only, telling each result on stderr. It returns the
// workloads and the clients that ran, in their order, and the results.
func runAll(ctx context.Context, scale harness.Scale, only string) ([]harness.Workload, []harness.Client, []harness.Result, error) {
	var ws []harness.Workload
	var rs []harness.Result
	clients := harness.Clients()
	var ran []harness.Client
	for _, w := range harness.Workloads(scale) {
		used := false
		for _, c := range clients {
			if only != "" && !strings.Contains(w.Name, only) && !strings.Contains(c.Name, only) {
				continue
			}
			fmt.Fprintf(os.Stderr, "%-22s %-20s ", w.Name, c.Name)
			r, err := harness.Run(ctx, w, c, harness.Options{})
			if err != nil {
				return nil, nil, nil, err
			}
			if ctx.Err() != nil {
				return nil, nil, nil, ctx.Err()
			}
			fmt.Fprintf(os.Stderr, "%4d done %4d failed %4d unfinished  %6.1f s (%.2f× ideal)  %d violations\n",
				r.Done, r.Failed, r.Unfinished, r.Makespan.Seconds(), r.Ratio(), r.Violations())
			rs = append(rs, r)
			used = true
			if !contains(ran, c.Name) {
				ran = append(ran, c)
			}
		}
		if used {
			ws = append(ws, w)
		}
	}
	if len(rs) == 0 {
		return nil, nil, nil, fmt.Errorf("-only %q matches no workload or client", only)
	}
	return ws, ran, rs, nil
}

// save writes the results as JSON to path, making its directory.
func save(path string, s saved) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// saved is what results.json holds.
type saved struct {
	Machine report.Machine   `json:"machine"`
	Took    time.Duration    `json:"took_ns"`
	Results []harness.Result `json:"results"`
}

// write draws the chart and splices the section into the markdown file.
func write(ws []harness.Workload, cs []harness.Client, s saved, command, mdPath, pngPath, link string) error {
	if err := report.Chart(pngPath, ws, s.Results); err != nil {
		return err
	}
	doc, err := os.ReadFile(mdPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	updated, err := report.Splice(string(doc), report.Generated(ws, cs, s.Results, s.Machine, command, s.Took, link))
	if err != nil {
		return err
	}
	if err := os.WriteFile(mdPath, []byte(updated), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s and %s\n", mdPath, pngPath)
	return nil
}

// rebuild writes the markdown and chart from a saved results.json.
func rebuild(path string, scale harness.Scale, command, mdPath, pngPath, link string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var s saved
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var ws []harness.Workload
	var cs []harness.Client
	for _, w := range harness.Workloads(scale) {
		for _, r := range s.Results {
			if r.Workload == w.Name {
				ws = append(ws, w)
				break
			}
		}
	}
	for _, c := range harness.Clients() {
		for _, r := range s.Results {
			if r.Client == c.Name {
				cs = append(cs, c)
				break
			}
		}
	}
	if len(ws) == 0 {
		return fmt.Errorf("%s: no results for the workloads of this scale (use -quick for a quick run's results)", path)
	}
	return write(ws, cs, s, command, mdPath, pngPath, link)
}

func contains(cs []harness.Client, name string) bool {
	for _, c := range cs {
		if c.Name == name {
			return true
		}
	}
	return false
}
