package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// runBinary runs the binary to completion and returns its stdout, stderr
// and exit status.
func runBinary(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatalf("ratekeeper %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// TestGetWithTheCallersOwnCredential: `ratekeeper get -v` with the
// caller's own Authorization header, or user:pass@ in the URL, says it
// went with the caller's own credential (the upstream got that token, not
// the configured one), and accounts it there: `status` afterwards knows
// nothing of the configured token, never sent — in particular not the
// anonymous limit (60) of the 401 a bad token of the caller's got. No
// output and no file of the database holds a token.
func TestGetWithTheCallersOwnCredential(t *testing.T) {
	sim := startProcess(t, nil, "sim", "--listen", "127.0.0.1:0", "--dialect", "github", "--prefix", "/github",
		"--tokens", "alice:tok-alice-1,bob:tok-bob-000001", "--limit", "5000", "--window", "1h")
	simURL := sim.waitFor(t, regexp.MustCompile(`listening on (http://\S+) `))
	db := filepath.Join(t.TempDir(), "ratekeeper.db")
	env := []string{"GITHUB_TOKEN=tok-alice-1"}
	client := []string{"--db", db, "--provider", "github=" + simURL + "/github"}
	get := func(args ...string) (string, int) {
		_, stderr, code := runBinary(t, env, append(append([]string{"get", "-v"}, client...), args...)...)
		return stderr, code
	}
	secrets := []string{"tok-bob-000001", "not-a-token-at-all", "tok-alice-1"}

	withUser := strings.Replace(simURL, "http://", "http://x:tok-bob-000001@", 1)
	for _, c := range []struct {
		name string
		args []string
		code int
		via  string
	}{
		{"header", []string{"-H", "Authorization: Bearer tok-bob-000001", simURL + "/github/repos/o/r1"}, 0, "via own credential …001"},
		{"url user info", []string{withUser + "/github/repos/o/r2"}, 0, "via own credential …001"},
		{"bad token", []string{"-H", "Authorization: token not-a-token-at-all", simURL + "/github/repos/o/r3"}, 1, "401 Unauthorized via own credential …-all"},
	} {
		stderr, code := get(c.args...)
		if code != c.code || !strings.Contains(stderr, c.via) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", c.name, code, stderr, c.code, c.via)
		}
		for _, s := range secrets {
			if strings.Contains(stderr, s) {
				t.Errorf("%s: stderr shows a token: %q", c.name, stderr)
			}
		}
	}
	// Without a credential of its own, the request is the configured
	// token's.
	if stderr, code := get(simURL + "/github/repos/o/r4"); code != 0 || !strings.Contains(stderr, "via #1 ") {
		t.Errorf("without the caller's credential: exit %d, %q; want via #1", code, stderr)
	}

	out, _, code := runBinary(t, env, append([]string{"status", "--json"}, client...)...)
	if code != 0 {
		t.Fatalf("status: exit %d", code)
	}
	var rep struct {
		Credentials []struct {
			Credential string
			Resources  []struct {
				Resource         string
				Limit, Remaining *int64
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	// What the server says of alice's core bucket (GET /rate_limit is
	// free): the status must say the same.
	var server struct {
		Resources struct {
			Core struct{ Limit, Remaining int64 }
		}
	}
	req, _ := http.NewRequest(http.MethodGet, simURL+"/github/rate_limit", nil)
	req.Header.Set("Authorization", "Bearer tok-alice-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&server)
	resp.Body.Close()
	want := server.Resources.Core
	found := false
	for _, c := range rep.Credentials {
		for _, r := range c.Resources {
			if strings.HasPrefix(c.Credential, "#1 ") && r.Resource == "core" && r.Limit != nil {
				found = true
				if *r.Limit != want.Limit || *r.Remaining != want.Remaining {
					t.Errorf("status of the configured token's core: %d/%d; the server says %d/%d", *r.Remaining, *r.Limit, want.Remaining, want.Limit)
				}
			}
		}
	}
	if !found || want.Limit != 5000 {
		t.Errorf("no core status for #1 (%v), or the server's limit is not 5000 (%d):\n%s", found, want.Limit, out)
	}
	files, _ := filepath.Glob(db + "*")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds a token", filepath.Base(f))
			}
		}
	}
}
