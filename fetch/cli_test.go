package fetch_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratekeeper/ratekeeper/cmd/ratekeeper/cli"
	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/tasks"
	"github.com/ratekeeper/ratekeeper/transport"
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

// TestFetchCommandPaginate: JSON Lines on stdin, --paginate, results on
// stdout: one line per page with the request's id and the page's number.
func TestFetchCommandPaginate(t *testing.T) {
	s := githubSim(t, "tok-alice-1")
	t.Setenv("GITHUB_TOKEN", "tok-alice-1")
	db := filepath.Join(t.TempDir(), "rk.db")
	stdin := `{"url": "` + s.URL + `/github/repos/octo/cli/issues?per_page=50", "id": "cli-issues"}` + "\n" +
		`{"url": "` + s.URL + `/github/graphql", "method": "POST", "id": "viewer", "body": {"query": "{ viewer { login } }"}}` + "\n"
	code, stdout, stderr := fetchCLI(t, stdin, "-i", "-", "--paginate", "--db", db, "--body-dir", t.TempDir(), "--provider", "github="+s.URL+"/github", "--policy", "greedy", "--progress", "off")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	by := pages(t, parseRecords(t, []byte(stdout)))
	if n := len(by[`id:"cli-issues"`]); n < 2 {
		t.Errorf("%d pages of the issues, want several:\n%s", n, stdout)
	}
	if v := by[`id:"viewer"`]; len(v) != 1 || v[0].Method != "POST" || v[0].Status != 200 || !strings.Contains(*v[0].Body, `"login"`) {
		t.Errorf("GraphQL query without $endCursor: %+v, want one page", v)
	}
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
	binary := filepath.Join(dir, "binary.bin")
	writeFile(t, binary, "https://api.github.com/repos/o/r\n\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\n"+strings.Repeat("z", 2<<20)+"\n")
	requests := filepath.Join(dir, "requests.jsonl")
	writeFile(t, requests, `{"url": "https://api.github.com/graphql", "method": "POST", "body": {"query": "{ viewer { login } }"}}`+"\n"+`{"url": "https://api.github.com/repos/o/r", "header": {"Accept": "text/plain"}}`+"\n")
	locked := filepath.Join(dir, "locked.jsonl")
	j, err := fetch.OpenJournal(locked)
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
		{"concurrency beyond the queue's", []string{"--concurrency", "1000000", "https://api.github.com/"}, "--concurrency 1000000: want 1 to 10,000"},
		{"retries beyond the queue's", []string{"--retries", "100000", "https://api.github.com/"}, "--retries 100000: want 0 to 9,999"},
		{"timeout below a millisecond", []string{"--timeout", "10us", "--max-wait", "1us", "https://api.github.com/"}, "--timeout 10µs: want a duration of 1ms or more"},
		{"bad JSON line", []string{"-i", requests}, `requests.jsonl: 1 input cannot be fetched; nothing was submitted` + "\n  line 2: unknown field \"header\"; a JSON line has url, method, headers, body, id, cost"},
		{"paginate and since", []string{"--paginate", "--since", urls, "https://api.github.com/"}, "--paginate and --since together"},
		{"paginate and readme", []string{"--paginate", "--readme", "https://github.com/o/r"}, "--paginate and --readme together"},
		{"binary input", []string{"-i", binary}, "binary.bin: 4 inputs cannot be fetched; nothing was submitted\n  line 2: not text (a NUL byte or invalid UTF-8); the input looks binary"},
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

// TestFetchCommandDamagedDatabase: a --db that fails SQLite's check is
// refused before anything runs, with a message naming it and saying what
// to do; nothing is written. A --db in a directory that does not exist
// says so.
func TestFetchCommandDamagedDatabase(t *testing.T) {
	s := githubSim(t, "tok-alice-1")
	t.Setenv("GITHUB_TOKEN", "tok-alice-1")
	dir := t.TempDir()
	db := filepath.Join(dir, "rk.db")
	common := []string{"--db", db, "--progress", "off", "--provider", "github=" + s.URL + "/github"}
	if code, _, stderr := fetchCLI(t, "", append(append([]string{"-o", filepath.Join(dir, "first.jsonl")}, common...), repoURLs(s.URL, 60)...)...); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, stderr)
	}
	corrupt(t, db)
	served := s.total()
	out := filepath.Join(dir, "second.jsonl")
	code, _, stderr := fetchCLI(t, "", append(append([]string{"-o", out}, common...), s.URL+"/github/repos/o/new")...)
	if code != 1 || !strings.Contains(stderr, "ratekeeper: --db "+db+" is damaged (SQLite's quick_check: ") || !strings.Contains(stderr, "Move it aside") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 naming the damaged file and what to do", code, stderr)
	}
	if b, err := os.ReadFile(out); err == nil && len(b) > 0 {
		t.Errorf("lines written: %q", b)
	}
	if s.total() != served {
		t.Errorf("%d requests sent, want none", s.total()-served)
	}

	missing := filepath.Join(dir, "no", "such", "rk.db")
	code, _, stderr = fetchCLI(t, "", "--db", missing, "--progress", "off", s.URL+"/github/repos/o/r")
	if want := "ratekeeper: --db " + missing + ": directory " + filepath.Join(dir, "no", "such") + " does not exist; create it"; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 saying %q", code, stderr, want)
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

// TestFetchCommandRetryFailed: --retry-failed fetches again the URLs whose
// outcome was a failure — a task that failed (a 503 with no retries left)
// and one that completed with a 404 — and only those; without it, a second
// run fetches nothing. The retry's line follows the failure's. --priority
// is the priority of the batch's tasks.
func TestFetchCommandRetryFailed(t *testing.T) {
	var fixed atomic.Bool
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		switch {
		case fixed.Load() || r.URL.Path == "/fine":
			io.WriteString(w, "ok "+r.URL.Path)
		case r.URL.Path == "/later":
			http.NotFound(w, r)
		default:
			http.Error(w, "down", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	hitsOf := func(p string) int { mu.Lock(); defer mu.Unlock(); return hits[p] }
	dir := t.TempDir()
	db, out := filepath.Join(dir, "rk.db"), filepath.Join(dir, "results.jsonl")
	urls := []string{srv.URL + "/fine", srv.URL + "/later", srv.URL + "/broken"}
	args := append([]string{"--db", db, "-o", out, "--progress", "off", "--retries", "0", "--priority", "3"}, urls...)

	if code, _, stderr := fetchCLI(t, "", args...); code != 1 || !strings.Contains(stderr, "2 of 3 URLs failed") {
		t.Fatalf("first run: exit %d, stderr:\n%s", code, stderr)
	}
	// One attempt each: /broken's is its first send and the transport's
	// retries of a 503, as for any host.
	attempt := 1 + transport.DefaultMaxRetries
	if code, _, stderr := fetchCLI(t, "", args...); code != 1 || hitsOf("/later") != 1 || hitsOf("/broken") != attempt {
		t.Fatalf("second run without --retry-failed: exit %d, hits %v; want nothing fetched again\n%s", code, hits, stderr)
	}
	fixed.Store(true)
	if code, _, stderr := fetchCLI(t, "", append([]string{"--retry-failed"}, args...)...); code != 0 {
		t.Fatalf("retry run: exit %d, stderr:\n%s", code, stderr)
	}
	if hitsOf("/fine") != 1 || hitsOf("/later") != 2 || hitsOf("/broken") != attempt+1 {
		t.Errorf("hits after the retry %v: want the two failed URLs fetched once more, the other not", hits)
	}
	recs := readRecords(t, out)
	if len(recs) != 5 {
		t.Fatalf("%d lines, want 3 and 2 retries", len(recs))
	}
	for _, r := range recs[3:] {
		if r.Status != 200 || r.Failed() {
			t.Errorf("retry line %+v, want a success", r)
		}
	}
	if code, _, _ := fetchCLI(t, "", append([]string{"--retry-failed"}, args...)...); code != 0 || len(readRecords(t, out)) != 5 || hitsOf("/later") != 2 {
		t.Errorf("a retry run with nothing failed: exit %d, wrote or fetched again", code)
	}

	q, err := tasks.Open(context.Background(), db, tasks.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	all, err := q.List(context.Background(), tasks.Filter{})
	if err != nil || len(all) != 5 {
		t.Fatalf("%d tasks (%v), want 3 and 2 retries", len(all), err)
	}
	for _, task := range all {
		if task.Priority != 3 {
			t.Errorf("task %d has priority %d, want 3 (--priority)", task.ID, task.Priority)
		}
	}
}
