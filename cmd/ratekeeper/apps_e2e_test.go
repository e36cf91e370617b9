package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestTasksWorkerRoutesAppInstallations: `tasks worker` goes through the
// same client as fetch, so a batch about the repositories of three
// accounts an App is installed on is worked by each repository's own
// installation. Two workers on one database, the App's installations
// discovered (or given as installation_ids), each installation 20
// requests per 2-second window against the simulator: every task
// completes with its repository, no request reaches an installation that
// cannot see it, and each worker mints one token per installation.
func TestTasksWorkerRoutesAppInstallations(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	for _, ids := range []string{"", "installation_ids = [101, 102, 103]\n"} {
		name := "discovered"
		if ids != "" {
			name = "installation_ids"
		}
		t.Run(name, func(t *testing.T) { workAppBatch(t, keyPEM, ids) })
	}
}

func workAppBatch(t *testing.T, keyPEM []byte, ids string) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "app.pem")
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	accounts := []string{"acme", "globex", "dora"}
	var simCfg strings.Builder
	fmt.Fprintf(&simCfg, "[[apis]]\ndialect = \"github\"\nwindow = \"2s\"\nwindow_mode = \"fixed\"\nlatency = \"20ms\"\n[apis.secondary]\n"+
		"[[apis.apps]]\nid = 77\npublic_key_file = %q\n", keyFile)
	for i, a := range accounts {
		fmt.Fprintf(&simCfg, "[[apis.apps.installations]]\nid = %d\naccount = %q\nlimit = 20\n", 101+i, a)
	}
	simFile := filepath.Join(dir, "sim.toml")
	if err := os.WriteFile(simFile, []byte(simCfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	simURL := startProcess(t, nil, "sim", "--config", simFile, "--listen", "127.0.0.1:0").waitFor(t, regexp.MustCompile(`listening on (http://\S+) `))
	rkFile := filepath.Join(dir, "rk.toml")
	rk := fmt.Sprintf("[providers.github]\nbase_url = %q\n\n[providers.github.app]\napp_id = 77\nprivate_key_file = %q\n%s", simURL, keyFile, ids)
	if err := os.WriteFile(rkFile, []byte(rk), 0o644); err != nil {
		t.Fatal(err)
	}

	// 30 repositories of each account, interleaved: 90 tasks, each
	// installation's 30 need two of its windows.
	const perAccount = 30
	var lines strings.Builder
	for i := range perAccount {
		for _, a := range accounts {
			fmt.Fprintf(&lines, `{"url":"%s/repos/%s/r%d"}`+"\n", simURL, a, i)
		}
	}
	input := filepath.Join(dir, "tasks.jsonl")
	if err := os.WriteFile(input, []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "rk.db")
	mustRun(t, nil, "tasks", "--db", db, "migrate")
	n := len(accounts) * perAccount
	if got := len(strings.Fields(mustRun(t, nil, "tasks", "--db", db, "submit", "-t", "http", "--jsonl", "-i", "@"+input))); got != n {
		t.Fatalf("submitted %d tasks, want %d", got, n)
	}

	start := time.Now()
	noTokens := []string{"GITHUB_TOKEN=", "GH_TOKEN="}
	var workers []*process
	for i := range 2 {
		workers = append(workers, startProcess(t, noTokens, "tasks", "worker", "--db", db, "--config", rkFile, "--policy", "greedy",
			"--max-wait", "300ms", "--concurrency", "8", "--worker-id", fmt.Sprintf("app-%d", i+1)))
	}
	deadline := time.Now().Add(60 * time.Second)
	for countDone(t, db) < n {
		if time.Now().After(deadline) {
			t.Fatalf("not every task done in 60s; workers said:\n%s", allOutput(workers))
		}
		time.Sleep(200 * time.Millisecond)
	}
	elapsed := time.Since(start)
	for _, w := range workers {
		w.stop(t)
	}

	answered := 0
	for line := range strings.Lines(mustRun(t, nil, "tasks", "--db", db, "list", "--limit", "10000", "--json")) {
		var task struct {
			ID     int64           `json:"id"`
			State  string          `json:"state"`
			Input  json.RawMessage `json:"input"`
			Result struct {
				Status int     `json:"status"`
				Body   *string `json:"body"`
			} `json:"result"`
		}
		if err := json.Unmarshal([]byte(line), &task); err != nil {
			t.Fatalf("tasks list --json: %v: %s", err, line)
		}
		var in struct{ URL string }
		_ = json.Unmarshal(task.Input, &in)
		var repo struct {
			FullName string `json:"full_name"`
		}
		if task.Result.Body != nil {
			_ = json.Unmarshal([]byte(*task.Result.Body), &repo)
		}
		if task.State != "completed" || task.Result.Status != http.StatusOK || repo.FullName == "" || !strings.HasSuffix(in.URL, "/repos/"+repo.FullName) {
			t.Errorf("task %d (%s): %s, status %d, repository %q; want completed, 200, its repository", task.ID, in.URL, task.State, task.Result.Status, repo.FullName)
			continue
		}
		answered++
	}

	var stats struct {
		Total struct {
			Requests          int64 `json:"requests"`
			Hidden            int64 `json:"hidden"`
			ExpiredTokens     int64 `json:"expired_tokens"`
			PrimaryViolations int64 `json:"primary_violations"`
		} `json:"total"`
		Apps []struct {
			Account string `json:"account"`
			Mints   int64  `json:"mints"`
		} `json:"apps"`
	}
	getJSON(t, simURL+"/_stats", &stats)
	if stats.Total.Hidden != 0 {
		t.Errorf("%d requests reached an installation that cannot see the repository, want 0", stats.Total.Hidden)
	}
	if stats.Total.ExpiredTokens != 0 {
		t.Errorf("%d requests carried an expired installation token", stats.Total.ExpiredTokens)
	}
	if v := stats.Total.PrimaryViolations; v > 3 {
		t.Errorf("the simulator saw %d requests beyond an installation's limit, want at most 3 (a window edge under load)", v)
	}
	if len(stats.Apps) != len(accounts) {
		t.Errorf("%d installations at the simulator, want %d", len(stats.Apps), len(accounts))
	}
	for _, a := range stats.Apps {
		if a.Mints < 1 || a.Mints > int64(len(workers)) {
			t.Errorf("installation on %s: %d tokens minted, want one per worker at most (and at least one)", a.Account, a.Mints)
		}
	}
	t.Logf("%d of %d tasks answered with their repository in %s by %d workers; %d requests at the simulator, %d to a wrong installation, mints %+v",
		answered, n, elapsed.Round(time.Millisecond), len(workers), stats.Total.Requests, stats.Total.Hidden, stats.Apps)
}
