package batch_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/batch"
	"github.com/ratekeeper/ratekeeper/internal/cli"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// fetchCLI runs `ratekeeper fetch args…` in this process with stdin.
func fetchCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli.Execute(append([]string{"fetch"}, args...), strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestFetchCommand runs the command end to end: URLs from stdin with
// comments, results to a file, progress lines on a stderr that is not a
// terminal, exit status 0, then 1 with a count when some URLs fail.
func TestFetchCommand(t *testing.T) {
	s := githubSim(t, "tok-alice-1", "tok-bob-1")
	t.Setenv("GITHUB_TOKEN", "tok-alice-1,tok-bob-1,tok-invalid-1")
	dir := t.TempDir()
	db, out := filepath.Join(dir, "rk.db"), filepath.Join(dir, "results.jsonl")
	urls := repoURLs(s.URL, 20)
	common := []string{"--db", db, "--provider", "github=" + s.URL + "/github", "--policy", "greedy", "--progress", "lines"}

	stdin := "# twenty repositories\n\n" + strings.Join(urls, "\n") + "\n"
	code, stdout, stderr := fetchCLI(t, stdin, append([]string{"-i", "-", "-o", out}, common...)...)
	if code != 0 || stdout != "" {
		t.Fatalf("exit %d, stdout %q, want 0 and nothing on stdout; stderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "fetch: 20/20 URLs done") || !strings.Contains(stderr, "fetch:   github #1 ") {
		t.Errorf("stderr lacks the progress lines:\n%s", stderr)
	}
	onceEach(t, readRecords(t, out), urls)

	// Two URLs the server does not have: exit 1 with the count.
	missing := []string{s.URL + "/github/nope/a", s.URL + "/github/nope/b"}
	code, stdout, stderr = fetchCLI(t, "", append(append([]string{}, common...), append(urls, missing...)...)...)
	if code != 1 || !strings.Contains(stderr, "ratekeeper: 2 of 22 URLs failed; see stdout") {
		t.Errorf("exit %d, want 1 saying 2 of 22 failed; stderr:\n%s", code, stderr)
	}
	onceEach(t, parseRecords(t, []byte(stdout)), append(urls, missing...))
}

// TestFetchCommandBadInput: bad input is refused with exit status 2 and a
// message saying what is wrong, before anything is submitted.
func TestFetchCommandBadInput(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "rk.db")
	urls := filepath.Join(dir, "urls.txt")
	writeFile(t, urls, "https://api.github.com/repos/o/r\n# fine so far\nnot-a-url\nhttps://api.github.com/repos/o/s\n")
	repos := filepath.Join(dir, "repos.txt")
	writeFile(t, repos, "https://github.com/o/r\nhttps://bitbucket.org/o/r\n")
	locked := filepath.Join(dir, "locked.jsonl")
	j, err := batch.OpenJournal(locked)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"invalid URL", []string{"-i", urls}, `urls.txt: 1 input cannot be fetched; nothing was submitted` + "\n  line 3: \"not-a-url\" is not an absolute"},
		{"unknown README host", []string{"--readme", "-i", repos}, "line 2: no configured provider serves repository pages at https://bitbucket.org"},
		{"unreadable input", []string{"-i", filepath.Join(dir, "missing.txt")}, "-i: open " + filepath.Join(dir, "missing.txt") + ": no such file or directory"},
		{"no URLs", nil, "no URLs: give them as arguments"},
		{"arguments and -i", []string{"-i", urls, "https://api.github.com/"}, "not both"},
		{"unknown provider", []string{"--provider", "nosuch", "https://api.github.com/"}, "--provider nosuch: "},
		{"timeout within max wait", []string{"--timeout", "10s", "https://api.github.com/"}, "--timeout 10s must exceed --max-wait 30s"},
		{"memory database", []string{"--db", "memory", "https://api.github.com/"}, "--db memory: fetch keeps its tasks in a database"},
		{"output not ours", []string{"-o", urls, "https://api.github.com/"}, "line 1 is not a result line"},
		{"output in use", []string{"-o", locked, "https://api.github.com/"}, "being written by another ratekeeper fetch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--progress", "off"}, tt.args...)
			if !contains(args, "--db") {
				args = append(args, "--db", db)
			}
			code, _, stderr := fetchCLI(t, "", args...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 2 saying %q", code, stderr, tt.want)
			}
		})
	}
	// Nothing was submitted by any of them.
	q, err := tasks.Open(context.Background(), db, tasks.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if ts, err := q.List(context.Background(), tasks.Filter{}); err != nil || len(ts) != 0 {
		t.Errorf("tasks in the database: %d (%v), want none", len(ts), err)
	}
}

// TestFetchCommandUnreachableDatabase: a database that cannot be reached is
// an error naming it, and nothing is fetched.
func TestFetchCommandUnreachableDatabase(t *testing.T) {
	s := githubSim(t, "tok-alice-1")
	t.Setenv("GITHUB_TOKEN", "tok-alice-1")
	dsn := "postgres://ratekeeper@127.0.0.1:1/nowhere?connect_timeout=2"
	code, _, stderr := fetchCLI(t, "", "--db", dsn, "--progress", "off", "--provider", "github="+s.URL+"/github", s.URL+"/github/repos/o/r")
	if code == 0 || !strings.Contains(stderr, "127.0.0.1:1") {
		t.Errorf("exit %d, stderr:\n%s\nwant a failure naming the database", code, stderr)
	}
	if n := s.total(); n != 0 {
		t.Errorf("%d requests sent, want none", n)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
