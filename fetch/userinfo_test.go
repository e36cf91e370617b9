package fetch_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// TestURLCredentialsAreNeitherStoredNorWritten: a URL that carries a
// token in its user information (as a password, or as the user name) is
// fetched with that token — the server charges its owner, and the record
// says "own credential" — but the output's url shows it masked, no file
// of the database holds it, and a second run finds the URLs written.
func TestURLCredentialsAreNeitherStoredNorWritten(t *testing.T) {
	s := startSim(t, sim.Config{APIs: []sim.APIConfig{{
		Dialect: sim.DialectGitHub, Prefix: "/github", Limit: 5000, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}, {Token: "tok-bob-000001", Owner: "bob"}},
	}}})
	withPassword := strings.Replace(s.URL, "http://", "http://x:tok-bob-000001@", 1) + "/github/repos/o/r1"
	asUser := strings.Replace(s.URL, "http://", "http://tok-bob-000001@", 1) + "/github/repos/o/r2"
	tr := client(t, githubOpts(s.URL))
	dsn := sqliteDSN(t)
	out := filepath.Join(t.TempDir(), "results.jsonl")
	j := openJournal(t, out)
	sum := run(t, dsn, tr, plan(t, tr, false, withPassword, asUser), j)
	j.Close()
	if sum.Written != 2 || sum.Failed != 0 {
		t.Fatalf("summary %+v", sum)
	}
	masked := map[string]bool{
		strings.Replace(s.URL, "http://", "http://x:…001@", 1) + "/github/repos/o/r1": true,
		strings.Replace(s.URL, "http://", "http://…001@", 1) + "/github/repos/o/r2":   true,
	}
	for _, r := range readRecords(t, out) {
		if !masked[r.URL] || r.Status != 200 || r.Credential != "own credential …001" {
			t.Errorf("record url %q, status %d, credential %q; want a masked url, 200 with the URL's own credential", r.URL, r.Status, r.Credential)
		}
	}
	if b, ok := s.Stats().BucketFor("github", "bob", "core"); !ok || b.Charged != 2 {
		t.Errorf("bob's token charged %d times (%v), want 2", b.Charged, ok)
	}
	files, _ := filepath.Glob(dsn + "*")
	files = append(files, out)
	for _, f := range files {
		if b, _ := os.ReadFile(f); bytes.Contains(b, []byte("tok-bob-000001")) {
			t.Errorf("%s holds the URL's token", filepath.Base(f))
		}
	}
	sum = run(t, dsn, tr, plan(t, tr, false, withPassword, asUser), openJournal(t, out))
	if sum.AlreadyWritten != 2 || sum.Submitted != 0 {
		t.Errorf("second run %+v, want both already written", sum)
	}
}
