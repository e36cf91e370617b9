package cli

import (
	"encoding/json"
	"regexp"
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
	// Alice's bucket is the only one known: 3 spent ("who am I" and two
	// GETs) of her 100.
	line := regexp.MustCompile(`(?m)^github: HEALTHY, 4 credentials, core 97/100, resets in \S+$`)
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
