package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// BenchmarkResumeAfterKill measures how long the tasks a killed fetch left
// running wait before the next run of the same command does them: the time
// from the rerun's start until the last of their URLs is in the output
// (resume-s), with the default --timeout (2 minutes). 300 URLs, 8 at a
// time, answers after 50 ms, quota not binding; the first run is killed
// with SIGKILL once 100 URLs are written.
//
//	go test ./cmd/ratekeeper -run '^$' -bench ResumeAfterKill -benchtime 1x
func BenchmarkResumeAfterKill(b *testing.B) {
	for b.Loop() {
		s := startRecordingSim(b, sim.APIConfig{Dialect: sim.DialectGitHub, Prefix: "/github",
			Tokens: []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}}, Limit: 5000, Window: time.Hour, Latency: 50 * time.Millisecond})
		dir := b.TempDir()
		db, input, out := filepath.Join(dir, "rk.db"), filepath.Join(dir, "urls.txt"), filepath.Join(dir, "results.jsonl")
		var urls strings.Builder
		for i := range 300 {
			fmt.Fprintf(&urls, "%s/github/repos/o/r%03d\n", s.URL, i)
		}
		if err := os.WriteFile(input, []byte(urls.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		args := []string{"-i", input, "-o", out, "--db", db, "--provider", "github=" + s.URL + "/github", "--concurrency", "8", "--progress", "off"}

		first := startFetch(b, dir, args...)
		for countLines(out) < 100 {
			if first.ended() {
				b.Fatalf("the first run ended early:\n%s", first.output.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		first.wait(b)
		q, err := tasks.Open(context.Background(), db, tasks.Options{})
		if err != nil {
			b.Fatal(err)
		}
		left, err := q.List(context.Background(), tasks.Filter{State: tasks.StateRunning, Limit: 10_000})
		q.Close()
		if err != nil || len(left) == 0 {
			b.Fatalf("%d tasks left running (%v): nothing to measure", len(left), err)
		}

		rerun := startFetch(b, dir, args...)
		var waited time.Duration
		for {
			written := outputRecords(b, out)
			all := true
			for _, task := range left {
				_, ok := written[task.UniqueKey]
				all = all && ok
			}
			if all {
				waited = time.Since(rerun.started)
				break
			}
			if rerun.ended() {
				b.Fatalf("the rerun ended without writing every URL left running:\n%s", rerun.output.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if code := rerun.wait(b); code != 0 {
			b.Fatalf("rerun: exit %d\n%s", code, rerun.output.String())
		}
		b.ReportMetric(waited.Seconds(), "resume-s")
		b.ReportMetric(float64(len(left)), "left-running")
	}
}
