package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/transport"
)

// TestStatusOverview: status starts with one line per provider, and its
// JSON carries the same.
func TestStatusOverview(t *testing.T) {
	_, url := startSim(t)
	for _, path := range []string{"/repos/o/r1", "/repos/o/r2"} {
		if _, stderr, code := run(t, "", "get", "--provider", "github="+url, url+path); code != 0 {
			t.Fatalf("get: exit %d: %s", code, stderr)
		}
	}
	// Naming the provider twice (moved, then selected) lists it once.
	out, stderr, code := run(t, "", "status", "--provider", "github="+url, "--provider", "github")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	// Alice's first token's bucket is the only one known: 2 spent (the
	// two GETs; nothing to learn it) of her 100.
	line := regexp.MustCompile(`(?m)^github: HEALTHY, 4 credentials, core 98/100, resets in \S+$`)
	if n := len(line.FindAllString(out, -1)); n != 1 {
		t.Fatalf("%d overall lines for github, want 1:\n%s", n, out)
	}
	out, _, _ = run(t, "", "status", "--provider", "github="+url, "--provider", "github", "--json")
	var rep transport.StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Providers) != 1 || rep.Providers[0].Provider != "github" || rep.Providers[0].Resource != "core" ||
		rep.Providers[0].Limit == nil || rep.Providers[0].Credentials != 4 {
		t.Fatalf("providers in the JSON: %+v", rep.Providers)
	}
}

// TestUnmatchedURLIsSaidOnce: get of a URL no provider owns says so on
// stderr, once, with the variable that would give it a token and how to
// pin it, and sends no token (GITHUB_TOKEN is not its).
func TestUnmatchedURLIsSaidOnce(t *testing.T) {
	var auth []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		io.WriteString(w, `{"ok":true}`)
	}))
	defer ts.Close()
	t.Setenv("GITHUB_TOKEN", "tok-cli-unmatched-1")
	t.Setenv("RATEKEEPER_DB", "memory")
	out, stderr, code := run(t, "", "get", ts.URL+"/things/1")
	if code != 0 || !strings.Contains(out, `"ok":true`) {
		t.Fatalf("exit %d: %s %s", code, out, stderr)
	}
	want := "matched no provider: no token (set _127_0_0_1_" + ts.URL[len("http://127.0.0.1:"):] + "_TOKEN to send one), paced by its rate-limit headers, or 60 requests a minute when it states none; to pin it: --provider NAME=" + ts.URL
	if n := strings.Count(stderr, "matched no provider"); n != 1 || !strings.Contains(stderr, want) {
		t.Fatalf("stderr says it %d times, want once saying %q:\n%s", n, want, stderr)
	}
	if len(auth) != 1 || auth[0] != "" {
		t.Fatalf("the unknown host was sent %q", auth)
	}
}
