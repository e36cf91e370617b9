// Package examples holds programs that use ratekeeper from Go, the shell,
// Python and JavaScript; TestExamples runs each against `ratekeeper sim`.
package examples

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// deadline bounds one example's run.
const deadline = 2 * time.Minute

// TestExamples builds ratekeeper, starts `ratekeeper sim` (and `ratekeeper
// serve` in front of it) on loopback, runs every example with a deadline
// and checks what it prints. Python and Node must be installed: without
// them the test fails under CI=true and skips, saying so, elsewhere.
func TestExamples(t *testing.T) {
	bin := t.TempDir()
	rk := goBuild(t, filepath.Join(bin, "ratekeeper"), "../cmd/ratekeeper")
	goGitHub := goBuild(t, filepath.Join(bin, "go-github"), "./go-github")

	simURL := serveUntilCleanup(t, rk, "sim", "--listen", "127.0.0.1:0", "--tokens", "2")
	env := cleanEnv("GITHUB_TOKEN=sim-token-1,sim-token-2")

	t.Run("go-github", func(t *testing.T) {
		out := runExample(t, env, goGitHub, "-api", simURL)
		expectLines(t, out,
			`round 1: golang/go, \d+ stars, cache miss`,
			`round 1: golang/tools, \d+ stars, cache miss`,
			`round 2: golang/go, \d+ stars, cache fresh`,
			`round 2: golang/tools, \d+ stars, cache fresh`,
		)
	})

	t.Run("fetch.sh", func(t *testing.T) {
		bash := need(t, "bash")
		work := t.TempDir()
		out := runExample(t, append(env, "RATEKEEPER="+rk, "GITHUB_API="+simURL, "WORKDIR="+work), bash, "fetch.sh")
		expectLines(t, out,
			`fetched: 4 lines, 4 with status 200`,
			`run again: still 4 lines`,
			`re-sync: 4 of 4 unchanged`,
		)
	})

	gatewayURL := serveUntilCleanup(t, rk, "serve", "--db", "memory", "--refresh", "0",
		"--listen", "127.0.0.1:0", "--provider", "github="+simURL)
	gatewayLines := []string{
		`golang/go: \d+ stars, cache miss`,
		`golang/go: \d+ stars, cache fresh`,
		`issues of golang/go: [1-9]\d* in ([2-9]|\d\d+) pages`,
		`read 40 repositories with 8 workers`,
	}
	t.Run("gateway.py", func(t *testing.T) {
		python := need(t, "python3")
		out := runExample(t, append(env, "GATEWAY_URL="+gatewayURL), python, "gateway.py")
		expectLines(t, out, gatewayLines...)
	})
	t.Run("gateway.mjs", func(t *testing.T) {
		node := need(t, "node")
		version := runExample(t, env, node, "--version")
		if major, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(version, ".", 2)[0], "v")); major < 18 {
			missing(t, fmt.Sprintf("node %s has no built-in fetch; the example needs Node 18 or later", strings.TrimSpace(version)))
		}
		out := runExample(t, append(env, "GATEWAY_URL="+gatewayURL), node, "gateway.mjs")
		expectLines(t, out, gatewayLines...)
	})

	// A batch of prompts to a simulated OpenAI through the gateway: two
	// keys of one organization, 6,000 tokens per 10 s.
	llmSim := serveWithEnv(t, rk, nil, "sim", "--listen", "127.0.0.1:0", "--dialect", "openai",
		"--tokens", "org-acme:sim-key-1,org-acme:sim-key-2", "--window", "10s", "--resource-limit", "tokens=6000")
	llmGateway := serveWithEnv(t, rk, []string{"OPENAI_API_KEY=sim-key-1,sim-key-2"}, "serve", "--db", "memory", "--refresh", "0",
		"--listen", "127.0.0.1:0", "--provider", "openai="+llmSim)
	t.Run("llm_gateway.py", func(t *testing.T) {
		python := need(t, "python3")
		out := runExample(t, cleanEnv("GATEWAY_URL="+llmGateway), python, "llm_gateway.py")
		expectLines(t, out,
			`answered 24 prompts, 24 with status 200`,
			`tokens: \d+ prompt, \d+ completion`,
			`RateLimit-Policy: "tokens";q=\d+;qu="tokens"`,
		)
		if v := simViolations(t, llmSim); v != 0 {
			t.Errorf("the simulated OpenAI refused %d requests", v)
		}
	})

	// The simulator refused nothing, and the repeats were its free 304s.
	resp, err := http.Get(simURL + "/_stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var stats struct {
		Buckets []struct {
			Violations  int `json:"violations"`
			NotModified int `json:"not_modified"`
		} `json:"buckets"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
		t.Fatal(err)
	}
	violations, notModified := 0, 0
	for _, b := range stats.Buckets {
		violations += b.Violations
		notModified += b.NotModified
	}
	if violations != 0 || notModified == 0 {
		t.Errorf("the simulator counted %d violations and %d free 304s; want none and some", violations, notModified)
	}
}

// missing fails the test under CI, where every example must run, and
// skips it elsewhere.
func missing(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s; CI must provide it (.ci/run installs it)", why)
	}
	t.Skipf("%s (under CI=true this fails)", why)
}

// need returns the path of a program the example runs with.
func need(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		missing(t, name+" is not installed")
	}
	return path
}

func goBuild(t *testing.T, out, pkg string) string {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// cleanEnv is this process's environment without tokens or ratekeeper
// settings of the machine running the test, plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(name, "_TOKEN") || strings.HasSuffix(name, "_API_KEY") || strings.HasPrefix(name, "RATEKEEPER") ||
			name == "GATEWAY_URL" || name == "GITHUB_API" || name == "WORKDIR" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

var listenURL = regexp.MustCompile(`http://127\.0\.0\.1:\d+`)

// serveUntilCleanup starts `ratekeeper ARGS`, which prints the URL it
// serves on its first line, and returns that URL; the process is stopped
// when the test ends.
func serveUntilCleanup(t *testing.T, rk string, args ...string) string {
	t.Helper()
	return serveWithEnv(t, rk, []string{"GITHUB_TOKEN=sim-token-1,sim-token-2"}, args...)
}

// serveWithEnv is serveUntilCleanup with the given variables (tokens).
func serveWithEnv(t *testing.T, rk string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(rk, args...)
	cmd.Env = cleanEnv(env...)
	cmd.Dir = t.TempDir()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			first <- sc.Text()
		}
		close(first)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-first:
		u := listenURL.FindString(line)
		if u == "" {
			t.Fatalf("ratekeeper %s printed %q, no URL; stderr:\n%s", args[0], line, stderr.String())
		}
		return u
	case <-time.After(30 * time.Second):
		t.Fatalf("ratekeeper %s printed nothing in 30 s; stderr:\n%s", args[0], stderr.String())
	}
	return ""
}

// runExample runs a program to its end within the deadline and returns its
// stdout.
func runExample(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v (deadline %s)\nstdout:\n%s\nstderr:\n%s", filepath.Base(name), strings.Join(args, " "), err, deadline, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// expectLines checks that out is exactly lines matching the patterns, in
// order.
func expectLines(t *testing.T, out string, patterns ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != len(patterns) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(patterns), out)
	}
	for i, p := range patterns {
		if !regexp.MustCompile(`^` + p + `$`).MatchString(lines[i]) {
			t.Errorf("line %d is %q, want %q\nwhole output:\n%s", i+1, lines[i], p, out)
		}
	}
}

// lockedBuffer collects a child's stderr while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// simViolations is the total of the simulator's refusals.
func simViolations(t *testing.T, simURL string) int {
	t.Helper()
	resp, err := http.Get(simURL + "/_stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var stats struct {
		Total struct {
			Violations int `json:"violations"`
		} `json:"total"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
		t.Fatal(err)
	}
	return stats.Total.Violations
}
