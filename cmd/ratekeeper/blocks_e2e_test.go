package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// Two `fetch` processes share one SQLite --db and one GitLab token whose
// owner has no cap on requests in flight (max_concurrency = 0) and plenty
// of quota (a million an hour: GitLab states 16,667 a minute), so they
// decide on blocks of reservations taken ahead: every URL is answered,
// the server refuses nothing and counts no early retry, and once both
// have exited nothing is left in flight. (store/quotastate's tests show
// the blocks' accounting; this is the CLI on top of them.)
func TestFetchFleetOnBlocks(t *testing.T) {
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "gitlab", Prefix: "/gitlab", Limit: 1000000, Window: time.Hour,
		Latency: 2 * time.Millisecond, Tokens: []sim.TokenConfig{{Token: "glpat-blocks-alice-1", Owner: "alice"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	base := ts.URL + "/gitlab/api/v4"
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ratekeeper.toml")
	if err := os.WriteFile(cfg, []byte("[providers.gitlab]\nmax_concurrency = 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "rk.db")
	client := []string{"--db", db, "--config", cfg, "--provider", "gitlab=" + base}
	env := []string{"GITLAB_TOKEN=glpat-blocks-alice-1"}
	const perProcess = 300
	var wg sync.WaitGroup
	outs := make([]string, 2)
	for k := range outs {
		input := filepath.Join(dir, fmt.Sprintf("urls%d.txt", k))
		var urls strings.Builder
		for i := range perProcess {
			fmt.Fprintf(&urls, "%s/projects/%d\n", base, k*perProcess+i)
		}
		if err := os.WriteFile(input, []byte(urls.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		outs[k] = filepath.Join(dir, fmt.Sprintf("out%d.jsonl", k))
		p := startProcess(t, env, append([]string{"fetch", "-i", input, "-o", outs[k], "--progress", "off"}, client...)...)
		wg.Go(func() {
			if err := p.wait(t, 2*time.Minute); err != nil {
				t.Errorf("fetch %d: %v\n%s", k, err, p.out())
			}
		})
	}
	wg.Wait()
	for k, out := range outs {
		recs := outputRecords(t, out)
		if len(recs) != perProcess {
			t.Errorf("fetch %d wrote %d URLs, want %d", k, len(recs), perProcess)
		}
		for u, rec := range recs {
			if rec["status"] != float64(http.StatusOK) {
				t.Errorf("%s: status %v", u, rec["status"])
			}
		}
	}
	st := srv.Stats().Total
	if st.Violations != 0 || st.EarlyRetries != 0 {
		t.Errorf("the server counted %d violations and %d early retries, want none", st.Violations, st.EarlyRetries)
	}
	if st.Accepted < 2*perProcess {
		t.Errorf("the server accepted %d requests, want at least %d", st.Accepted, 2*perProcess)
	}
	cmd := exec.Command(binary, append([]string{"status", "--json"}, client...)...)
	cmd.Env = append(os.Environ(), env...)
	status, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("status: %v\n%s", err, status)
	}
	if !strings.Contains(string(status), `"in_flight"`) {
		t.Fatalf("status shows no in_flight:\n%s", status)
	}
	if m := regexp.MustCompile(`"in_flight": *[1-9]`).Find(status); m != nil {
		t.Errorf("after both processes exited, status shows %s:\n%s", m, status)
	}
}
