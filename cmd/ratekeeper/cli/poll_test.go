package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// startPollSim serves a simulated GitHub with one token of alice and a
// quota of limit per hour, points GITHUB_TOKEN at it and gives the test its
// own database.
func startPollSim(t *testing.T, limit int64) (*sim.Server, string) {
	t.Helper()
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: limit, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Setenv("GITHUB_TOKEN", "tok-alice-1")
	t.Setenv("GH_TOKEN", "")
	t.Setenv("RATEKEEPER_DB", filepath.Join(t.TempDir(), "rk.db"))
	return srv, ts.URL
}

// manyPerHour is a quota large enough for the budget guard to let polls
// every 50 ms through.
const manyPerHour = 100_000_000

// fastPoll are flags that make every interval short, for tests on the
// real clock, and let the client spend quota without pacing.
var fastPoll = []string{"--policy", "greedy", "--tz", "UTC", "--interval-min", "50ms", "--after-change", "50ms", "--business-interval", "50ms",
	"--default-interval", "50ms", "--idle-interval", "50ms", "--night-interval", "50ms", "--backoff-base", "50ms", "--backoff-max", "100ms"}

func pollArgs(extra ...string) []string {
	return append(append([]string{"poll"}, fastPoll...), extra...)
}

func TestPollIdleTimeoutExitStatusAndInitialLine(t *testing.T) {
	srv, url := startPollSim(t, manyPerHour)
	out, stderr, code := run(t, "", pollArgs("--provider", "github="+url, "--idle-timeout", "400ms", "--initial", url+"/repos/o/r/issues")...)
	if code != exitPollIdle {
		t.Fatalf("exit %d, want %d: %s", code, exitPollIdle, stderr)
	}
	if !strings.Contains(stderr, "no change for 400ms since the start (idle timeout)") {
		t.Fatalf("stderr %q", stderr)
	}
	// Without -v, when the next poll is due is said once per interval,
	// not at every poll.
	if n := strings.Count(stderr, ": next poll in 50ms"); n == 0 || n > 3 {
		t.Fatalf("%d lines saying when the next poll is, want 1 to 3: %q", n, stderr)
	}
	var line struct {
		URL     string `json:"url"`
		ETag    string `json:"etag"`
		Initial bool   `json:"initial"`
		Body    []any  `json:"body"`
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &line) != nil || !line.Initial || line.ETag == "" || len(line.Body) == 0 {
		t.Fatalf("stdout %q", out)
	}
	b, _ := srv.Stats().BucketFor("github", "alice", "core")
	// The first answer alone: a single token needs no owner, the budget
	// guard read the free /rate_limit, and every other poll was a 304.
	if b.Charged != 1 || b.NotModified == 0 {
		t.Fatalf("charged %d, 304s %d", b.Charged, b.NotModified)
	}
	if strings.Contains(stderr+out, "tok-alice") {
		t.Fatal("the token was printed")
	}
}

func TestPollEmitsChangesAndRunsExec(t *testing.T) {
	srv, url := startPollSim(t, manyPerHour)
	path := "/repos/o/r/readme"
	file := filepath.Join(t.TempDir(), "changes")
	go func() {
		time.Sleep(300 * time.Millisecond)
		srv.Touch(path)
	}()
	_, stderr, code := run(t, "", pollArgs("--provider", "github="+url, "--idle-timeout", "800ms", "--exec", `cat > "`+file+`"; echo "$RATEKEEPER_POLL_URL" >> "`+file+`.url"`, url+path)...)
	if code != exitPollIdle {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	body, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(body), `"name"`) {
		t.Fatalf("exec stdin %q (%v)", body, err)
	}
	urls, _ := os.ReadFile(file + ".url")
	if strings.TrimSpace(string(urls)) != url+path {
		t.Fatalf("exec ran for %q, want one change of %s", urls, url+path)
	}
}

func TestPollStopsAfterMaxErrors(t *testing.T) {
	_, url := startPollSim(t, manyPerHour)
	_, stderr, code := run(t, "", pollArgs("--provider", "github="+url, "--max-errors", "3", url+"/no/such/thing")...)
	if code != exitPollErrors {
		t.Fatalf("exit %d, want %d: %s", code, exitPollErrors, stderr)
	}
	if !strings.Contains(stderr, "stopped after 3 consecutive errors; the last: GET "+url+"/no/such/thing: 404 Not Found") {
		t.Fatalf("stderr %q", stderr)
	}
	if strings.Count(stderr, "error 1 in a row") != 1 || strings.Count(stderr, "error 2 in a row") != 1 {
		t.Fatalf("backoff lines missing: %q", stderr)
	}
}

func TestPollRefusesToStartBelowTheFloor(t *testing.T) {
	srv, url := startPollSim(t, 100)
	_, stderr, code := run(t, "", pollArgs("--provider", "github="+url, "--min-remaining", "500", url+"/repos/o/r/events")...)
	if code != exitPollFloor {
		t.Fatalf("exit %d, want %d: %s", code, exitPollFloor, stderr)
	}
	if !strings.Contains(stderr, "remaining core quota") || !strings.Contains(stderr, "below the floor of 500") {
		t.Fatalf("stderr %q", stderr)
	}
	// Learning the quota cost nothing (GitHub's /rate_limit is free, and
	// no owner is asked); no poll was sent.
	b, _ := srv.Stats().BucketFor("github", "alice", "core")
	if b.Charged != 0 {
		t.Fatalf("charged %d", b.Charged)
	}
}

func TestPollWarnsAboutURLsOfNoProvider(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"x"`)
		if r.Header.Get("If-None-Match") == `"x"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(other.Close)
	t.Setenv("RATEKEEPER_DB", "memory")
	_, stderr, code := run(t, "", pollArgs("--idle-timeout", "200ms", other.URL+"/status?api_key=k-secret-1")...)
	if code != exitPollIdle {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "warning: no configured provider owns "+other.URL+"/status?api_key=REDACTED; polling it anonymously") {
		t.Fatalf("stderr %q", stderr)
	}
	if strings.Contains(stderr, "k-secret-1") {
		t.Fatal("a credential in the URL was printed")
	}
}

func TestPollRejectsBadInput(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"poll", "--tz", "Asia/Tokio", "https://api.github.com/x"}, `--tz "Asia/Tokio": unknown time zone; want an IANA name such as Asia/Tokyo`},
		{[]string{"poll", "--interval-min", "10m", "--interval-max", "5m", "https://api.github.com/x"}, "--interval-min 10m0s is above --interval-max 5m0s"},
		{[]string{"poll", "--business-hours", "9", "https://api.github.com/x"}, "--business-hours: hours \"9\": want FROM-TO"},
		{[]string{"poll", "--quiet-hours", "22-7x", "https://api.github.com/x"}, "--quiet-hours"},
		{[]string{"poll", "--business-days", "mon-funday", "https://api.github.com/x"}, "--business-days"},
		{[]string{"poll", "--budget-share", "0", "https://api.github.com/x"}, "--budget-share 0: want a share above 0"},
		{[]string{"poll", "--max-errors", "-1", "https://api.github.com/x"}, "--max-errors -1"},
		{[]string{"poll", "--durable", "--db", "memory", "https://api.github.com/x"}, "--durable needs a database"},
		{[]string{"poll", "ftp://x/y"}, `"ftp://x/y" is not an http(s) URL`},
		{[]string{"poll", "https://x/a", "https://x/a"}, "given twice"},
		{[]string{"poll"}, "requires at least 1 arg"},
	}
	for _, c := range cases {
		_, stderr, code := run(t, "", c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

func TestPollDurableKeepsItsTask(t *testing.T) {
	_, url := startPollSim(t, manyPerHour)
	args := pollArgs("--provider", "github="+url, "--durable", "--idle-timeout", "1s", "-v", url+"/repos/o/r/events")
	_, stderr, code := run(t, "", args...)
	if code != exitPollIdle || !strings.Contains(stderr, "submitted as task 1") {
		t.Fatalf("first run: exit %d: %s", code, stderr)
	}
	_, stderr, code = run(t, "", args...)
	if code != exitPollIdle || !strings.Contains(stderr, "continues as task 1") {
		t.Fatalf("second run: exit %d: %s", code, stderr)
	}
	out, stderr, code := run(t, "", "tasks", "list", "--json")
	if code != 0 {
		t.Fatalf("tasks list: exit %d: %s", code, stderr)
	}
	if strings.Count(out, `"type":"poll"`) != 1 || !strings.Contains(out, `"state":"pending"`) {
		t.Fatalf("tasks: %s", out)
	}
}
