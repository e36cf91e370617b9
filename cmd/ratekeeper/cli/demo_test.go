package cli

import (
	"regexp"
	"strings"
	"testing"
)

// TestDemoCommand runs the real demo on loopback with a batch small enough
// to fit in the first window: no waits, so it takes a fraction of a second.
func TestDemoCommand(t *testing.T) {
	out, stderr, code := run(t, "", "demo", "--size", "60", "--latency", "0s")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, out)
	}
	for _, want := range []string{
		"ratekeeper demo: a simulated GitHub API at http://127.0.0.1:",
		"tokens #1 and #2 belong to the same user: ratekeeper detects it and paces them as one bucket",
		"batch: 60 GETs",
		"\nSummary\n",
		"  batch       60 GETs (48 distinct URLs, 12 repeated): 60 done, 0 failed",
		// The 12 repeats are served fresh from the cache: no request.
		"  sent        57 requests reached the server: 9 to check the tokens, 48 for the batch\n",
		"  cache       12 served from ratekeeper's cache without a request",
		"  violations  0 (0 primary, 0 secondary)",
		"  owners      tokens #1 and #2 both belong to alice",
		"A GitHub App on 3 organisations: App 77 is installed on acme, globex, initech",
		"    #1 app:77/installation:101  on acme      30 answered,  30 of its own 100 used, 1 token minted\n",
		"    #3 app:77/installation:103  on initech   30 answered,  30 of its own 100 used, 1 token minted\n",
		"  90 of 90 GETs answered with their repository, 0 failed, in ",
		"; 0 sent to an installation\n  that cannot see the repository, 0 with an expired token, 0 violations\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Not a terminal: plain lines, no escape sequences, and a final line.
	if strings.Contains(out, "\x1b[") {
		t.Errorf("terminal escapes in non-terminal output:\n%s", out)
	}
	final := regexp.MustCompile(`(?m)^\[\s*\d+\.\ds\] 60/60 GETs \(100%\) · #1\+#2 alice \d+/100 · #3 bob \d+/100 · #4 carol \d+/100 · #5 rejected$`)
	if !final.MatchString(out) {
		t.Errorf("no final progress line:\n%s", out)
	}
	if strings.Contains(out, "demo-alice-key") || strings.Contains(stderr, "demo-") {
		t.Errorf("a token's text was printed")
	}
}

// --app=false leaves the App part out.
func TestDemoWithoutApp(t *testing.T) {
	out, stderr, code := run(t, "", "demo", "--size", "10", "--latency", "0s", "--app=false")
	if code != 0 || strings.Contains(out, "GitHub App") || !strings.Contains(out, "\nSummary\n") {
		t.Errorf("exit %d, %s\n%s", code, stderr, out)
	}
}

func TestDemoBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--size", "0"}, "--size 0: want a number of GETs from 1 to 100000"},
		{[]string{"--window", "1500ms"}, "--window 1.5s: want whole seconds"},
		{[]string{"--policy", "fast"}, `unknown policy "fast"`},
		{[]string{"--progress", "fancy"}, `--progress "fancy": want auto, bars, lines or off`},
		{[]string{"extra"}, "unknown command"},
	} {
		out, stderr, code := run(t, "", append([]string{"demo"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) || out != "" {
			t.Errorf("%v: exit %d, stderr %q, out %q; want 2 and %q", c.args, code, stderr, out, c.want)
		}
	}
	t.Setenv("RATEKEEPER_WORKERS", "0")
	if _, stderr, code := run(t, "", "demo"); code != 2 || !strings.Contains(stderr, "--workers 0") {
		t.Errorf("RATEKEEPER_WORKERS=0: exit %d, %q", code, stderr)
	}
}
