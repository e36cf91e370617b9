package fetch_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// TestCrashResume kills a real `ratekeeper fetch` with SIGKILL in the middle
// of a batch, runs the same command again, and checks that the output
// holds every URL exactly once and that URLs written before the kill were
// not fetched again.
func TestCrashResume(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		crashResume(t, sqliteDSN(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		crashResume(t, postgresDSN(t))
	})
}

func crashResume(t *testing.T, dsn string) {
	const n = 400
	s := startSim(t, sim.Config{APIs: []sim.APIConfig{{
		Dialect: sim.DialectGitHub, Prefix: "/github", Limit: 5000, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-alice-1"}, {Token: "tok-bob-1"}},
		// Slow enough answers that the kill lands mid-batch.
		Latency: 15 * time.Millisecond,
	}}})
	dir := t.TempDir()
	urls := repoURLs(s.URL, n)
	input := filepath.Join(dir, "urls.txt")
	writeFile(t, input, "# a batch\n"+strings.Join(urls, "\n")+"\n")
	out := filepath.Join(dir, "results.jsonl")
	args := []string{"fetch", "-i", input, "-o", out, "--db", dsn,
		"--provider", "github=" + s.URL + "/github", "--policy", "greedy",
		"--concurrency", "4", "--max-wait", "1s", "--timeout", "3s",
		"--progress", "lines", "--progress-every", "1s"}
	fetch := func(ctx context.Context) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.CommandContext(ctx, os.Args[0], args...)
		cmd.Env = append(os.Environ(), childEnv+"=1", "GITHUB_TOKEN=tok-alice-1,tok-bob-1")
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		return cmd, &stderr
	}

	// First run: killed once some results are written. The bound is for
	// a hang, not a speed: the fetch processes are this test binary, so
	// under -race SQLite (a Go translation of C, every access checked)
	// makes a run of 400 URLs take 20-25 s on a quiet 2-core machine,
	// against 3.5 s without -race, and twice that beside other tests.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	first, firstErr := fetch(ctx)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- first.Wait() }()
	var before []string
	for len(before) < 40 {
		select {
		case err := <-exited:
			t.Fatalf("fetch ended before it was killed (%v), after %d lines; make the batch slower\n%s", err, len(before), firstErr)
		case <-time.After(5 * time.Millisecond):
		}
		before = completeLines(t, out)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("first fetch: %v, want killed", err)
	}
	before = completeLines(t, out)
	if len(before) >= n {
		t.Fatalf("all %d URLs were written before the kill; make the batch slower", n)
	}
	servedBefore := map[string]int{}
	for _, u := range urls {
		servedBefore[u] = s.hits(pathOf(t, u))
	}
	// The worst moment for a kill: half a line written. The next run must
	// cut it off and write that URL once.
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	next := nextUnwritten(t, urls, before)
	fmt.Fprintf(f, `{"url":%q,"status":20`, next)
	f.Close()

	// Second run: the same command, to the end.
	second, secondErr := fetch(ctx)
	start := time.Now()
	if err := second.Run(); err != nil {
		t.Fatalf("second fetch: %v\n%s", err, secondErr)
	}
	t.Logf("killed after %d of %d lines; the second run took %v", len(before), n, time.Since(start).Round(time.Millisecond))
	if !strings.Contains(secondErr.String(), fmt.Sprintf("fetch: %d/%d URLs done", n, n)) {
		t.Errorf("second run's progress lacks the final line:\n%s", secondErr)
	}
	if !strings.Contains(secondErr.String(), "torn line") {
		t.Errorf("second run did not say it cut off the torn line:\n%s", secondErr)
	}

	by := onceEach(t, readRecords(t, out), urls)
	refetched := 0
	for _, u := range urls {
		if by[u].Failed() {
			t.Errorf("%s failed: %s", u, by[u].Error)
		}
		served := s.hits(pathOf(t, u))
		switch {
		case served > 2:
			t.Errorf("%s served %d times, want at most 2 (once, or again after the kill cut its task short)", u, served)
		case served == 2:
			refetched++
		}
	}
	for _, line := range before {
		u := recordURL(t, line)
		if got := s.hits(pathOf(t, u)); got != servedBefore[u] || got != 1 {
			t.Errorf("%s was written before the kill but served %d times, want 1", u, got)
		}
	}
	t.Logf("%d URLs were fetched again: their tasks were running or finishing when the process was killed", refetched)
	if refetched > 150 {
		t.Errorf("%d URLs fetched again, more than the tasks a killed process can hold", refetched)
	}
	if v := s.Stats().Total.Violations; v != 0 {
		t.Errorf("%d rate-limit violations, want 0", v)
	}
}

// completeLines returns the newline-terminated lines of path.
func completeLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return strings.Split(string(b[:i]), "\n")
	}
	return nil
}

func recordURL(t *testing.T, line string) string {
	t.Helper()
	recs := parseRecords(t, []byte(line))
	if len(recs) != 1 {
		t.Fatalf("not one record: %q", line)
	}
	return recs[0].URL
}

// nextUnwritten returns a URL with no line among lines.
func nextUnwritten(t *testing.T, urls, lines []string) string {
	t.Helper()
	written := map[string]bool{}
	for _, l := range lines {
		written[recordURL(t, l)] = true
	}
	for _, u := range urls {
		if !written[u] {
			return u
		}
	}
	t.Fatal("every URL is written")
	return ""
}
