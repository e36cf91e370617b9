package cli

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/transport"
)

// TestStatusNamesWhatTheDatabaseHolds: whatever --provider says, status
// names the quota state the database holds and the report leaves out —
// for a provider used at another base URL (with the flag that shows it),
// or of tokens not given — rather than "holds no quota state yet"; and a
// provider without a token reads "anonymous", not "1 credential".
func TestStatusNamesWhatTheDatabaseHolds(t *testing.T) {
	_, url := startSim(t)
	if _, stderr, code := run(t, "", "get", "--provider", "github="+url, url+"/repos/o/r1"); code != 0 {
		t.Fatalf("get: exit %d: %s", code, stderr)
	}
	// The default github (api.github.com) holds nothing; the database
	// holds state for github at the simulator.
	_, stderr, code := run(t, "", "status")
	if code != 0 || strings.Contains(stderr, "holds no quota state") ||
		!strings.Contains(stderr, "also holds ") || !strings.Contains(stderr, "for github at "+url+"; add --provider github="+url+" to see them") {
		t.Errorf("status without --provider: exit %d, stderr %q", code, stderr)
	}

	// Without a token: anonymous, and the tokens' buckets are named.
	t.Setenv("GITHUB_TOKEN", "")
	out, stderr, code := run(t, "", "status", "--provider", "github="+url)
	if code != 0 || !regexp.MustCompile(`(?m)^github: \S+, anonymous, `).MatchString(out) || strings.Contains(out, "1 credential") {
		t.Errorf("status without a token: exit %d:\n%s", code, out)
	}
	if !regexp.MustCompile(`also holds \d+ buckets? of \d+ owners? for github at ` + regexp.QuoteMeta(url) + ` not shown: other tokens`).MatchString(stderr) {
		t.Errorf("status without a token does not name the tokens' state: %q", stderr)
	}

	// A database that holds nothing says so.
	t.Setenv("RATEKEEPER_DB", filepath.Join(t.TempDir(), "empty.db"))
	if _, stderr, _ := run(t, "", "status"); !strings.Contains(stderr, "holds no quota state yet") || strings.Contains(stderr, "also holds") {
		t.Errorf("empty database: %q", stderr)
	}
}

// serve's startup line says "anonymous" for a provider without a token.
func TestCredentialCount(t *testing.T) {
	for _, c := range []struct {
		pool []*creds.Credential
		want string
	}{
		{[]*creds.Credential{creds.NewAnonymous("github", 1)}, "anonymous"},
		{[]*creds.Credential{creds.NewToken("github", 1, "tok-a", "test")}, "1 credential"},
		{[]*creds.Credential{creds.NewToken("github", 1, "tok-a", "test"), creds.NewToken("github", 2, "tok-b", "test")}, "2 credentials"},
	} {
		tr, err := transport.New(transport.Options{Pools: map[string]*creds.Pool{"github": creds.NewPool("github", c.pool...)}})
		if err != nil {
			t.Fatal(err)
		}
		if got := credentialCount(tr, "github"); got != c.want {
			t.Errorf("credentialCount = %q, want %q", got, c.want)
		}
	}
}

// A scope's row says where its limit comes from and, while a refusal
// pauses it, until when; an announced bucket's row is its name.
func TestResourceTextMarksScopes(t *testing.T) {
	until := time.Date(2026, 1, 1, 12, 0, 42, 0, time.UTC)
	in := 12.0
	for _, c := range []struct {
		r    transport.ResourceStatus
		want string
	}{
		{transport.ResourceStatus{Resource: "core"}, "core"},
		{transport.ResourceStatus{Resource: "/api/v4/users/*", Origin: "learnt"}, "/api/v4/users/* (learnt)"},
		{transport.ResourceStatus{Resource: "GET /api/v4/users/*", Origin: "configured"}, "GET /api/v4/users/* (configured)"},
		{transport.ResourceStatus{Resource: "/api/v4/users/*", Origin: "learnt", BlockedUntil: &until, ResetsIn: &in}, "/api/v4/users/* (learnt, paused until 12:00:42)"},
	} {
		if got := resourceText(c.r); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
	}
}
