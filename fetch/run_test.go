package fetch_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/tasks"
	"github.com/ratekeeper/ratekeeper/transport"
)

// client is a rate-keeping transport as one process of fetch builds it.
func client(t *testing.T, o ratekeeper.Options) *transport.Transport {
	t.Helper()
	if o.Policy == "" {
		o.Policy = "greedy"
	}
	if o.MaxWait == 0 {
		o.MaxWait = 2 * time.Second
	}
	tr, err := ratekeeper.NewTransport(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// plan turns URLs into targets through tr's providers.
func plan(t *testing.T, tr *transport.Transport, readme bool, urls ...string) []fetch.Target {
	t.Helper()
	targets, err := fetch.Plan(fetch.ArgEntries(urls), "arguments", readme, tr.Registry())
	if err != nil {
		t.Fatal(err)
	}
	return targets
}

// run runs a batch as fetch does, with quick polling.
func run(t *testing.T, dsn string, tr *transport.Transport, targets []fetch.Target, out fetch.Output, tune ...func(*fetch.Options)) fetch.Summary {
	t.Helper()
	o := fetch.Options{
		DSN:          dsn,
		Client:       &http.Client{Transport: tr},
		Output:       out,
		Concurrency:  8,
		Timeout:      20 * time.Second,
		BodyDir:      filepath.Join(t.TempDir(), "bodies"),
		Logger:       slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		PollInterval: 50 * time.Millisecond,
	}
	for _, f := range tune {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	sum, err := fetch.Run(ctx, targets, o)
	if err != nil {
		t.Fatalf("Run: %v (summary %+v)", err, sum)
	}
	return sum
}

func openJournal(t *testing.T, path string) *fetch.Journal {
	t.Helper()
	j, err := fetch.OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// TestRunEveryURLOnce fetches a batch with two valid tokens and one the
// server rejects: every URL is in the output once, fetched once, with a
// valid credential and no rate-limit violation. Running the batch again
// submits and fetches nothing, whether the output already holds the
// results or they go to a fresh stream.
func TestRunEveryURLOnce(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		everyURLOnce(t, sqliteDSN(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		everyURLOnce(t, postgresDSN(t))
	})
}

func everyURLOnce(t *testing.T, dsn string) {
	s := githubSim(t, "tok-alice-1", "tok-bob-1")
	urls := repoURLs(s.URL, 120)
	opts := ratekeeper.Options{
		Providers: []string{"github=" + s.URL + "/github"},
		Tokens:    map[string][]string{"github": {"tok-alice-1", "tok-bob-1", "tok-invalid-1"}},
	}
	tr := client(t, opts)
	out := filepath.Join(t.TempDir(), "results.jsonl")

	j := openJournal(t, out)
	sum := run(t, dsn, tr, plan(t, tr, false, urls...), j)
	j.Close()
	if sum.Total != 120 || sum.Written != 120 || sum.Submitted != 120 || sum.Failed != 0 || !sum.Done() {
		t.Fatalf("summary %+v, want 120 written and submitted, none failed", sum)
	}
	by := onceEach(t, readRecords(t, out), urls)
	for _, u := range urls {
		r := by[u]
		if r.Status != 200 || r.Failed() || r.Body == nil || r.ETag == "" || r.SHA256 == "" || r.Attempts != 1 || r.TaskID == 0 {
			t.Errorf("%s: record %+v, want a 200 with body, etag and sha256 in one attempt", u, r)
		}
		if r.Credential == "" || strings.HasPrefix(r.Credential, "#3 ") || strings.Contains(r.Credential, "alice") || strings.Contains(r.Credential, "bob") {
			t.Errorf("%s: credential %q, want #1 or #2, masked", u, r.Credential)
		}
		if sum := sha256.Sum256([]byte(*r.Body)); hex.EncodeToString(sum[:]) != r.SHA256 {
			t.Errorf("%s: sha256 %s does not match the body", u, r.SHA256)
		}
		if n := s.hits(pathOf(t, u)); n != 1 {
			t.Errorf("%s fetched %d times, want 1", u, n)
		}
	}
	if v := s.Stats().Total.Violations; v != 0 {
		t.Errorf("%d rate-limit violations, want 0", v)
	}
	requests := s.total()

	// A second process with the same input and output: nothing to do.
	tr2 := client(t, opts)
	j2 := openJournal(t, out)
	sum = run(t, dsn, tr2, plan(t, tr2, false, urls...), j2)
	j2.Close()
	if sum.AlreadyWritten != 120 || sum.Written != 0 || sum.Submitted != 0 || sum.Reused != 0 {
		t.Errorf("re-run summary %+v, want all 120 already written", sum)
	}
	// Results to a stream: written again from the tasks, not fetched.
	var stdout bytes.Buffer
	sum = run(t, dsn, tr2, plan(t, tr2, false, urls...), fetch.NewStream(&stdout, "stdout"))
	if sum.Written != 120 || sum.Submitted != 0 || sum.Reused != 120 {
		t.Errorf("stream re-run summary %+v, want 120 written from 120 reused tasks", sum)
	}
	onceEach(t, parseRecords(t, stdout.Bytes()), urls)
	if n := s.total(); n != requests {
		t.Errorf("re-runs sent %d requests, want none", n-requests)
	}
	if n := len(readRecords(t, out)); n != 120 {
		t.Errorf("output has %d lines after the re-runs, want 120", n)
	}
}

// TestRunCountsFailures: a 404 and a server that always fails are failures
// with their reason; a later run reports them again without fetching them
// again, even when its output does not hold them yet.
func TestRunCountsFailures(t *testing.T) {
	s := githubSim(t, "tok-alice-1")
	var broken atomic.Int32
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		broken.Add(1)
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer bad.Close()
	good := repoURLs(s.URL, 5)
	missing := []string{s.URL + "/github/no/such/endpoint-1", s.URL + "/github/no/such/endpoint-2"}
	urls := append(append(append([]string{}, good...), missing...), bad.URL+"/always-500")
	opts := ratekeeper.Options{
		Providers: []string{"github=" + s.URL + "/github"},
		Tokens:    map[string][]string{"github": {"tok-alice-1"}},
	}
	tr := client(t, opts)
	dsn := sqliteDSN(t)
	noRetries := func(o *fetch.Options) { o.MaxRetries = tasks.NoRetries }

	out := filepath.Join(t.TempDir(), "results.jsonl")
	j := openJournal(t, out)
	var logs syncBuffer
	sum := run(t, dsn, tr, plan(t, tr, false, urls...), j, noRetries, func(o *fetch.Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	j.Close()
	if sum.Failed != 3 || sum.Written != 8 {
		t.Fatalf("summary %+v, want 8 written, 3 failed", sum)
	}
	if strings.Contains(logs.String(), "Job errored") {
		t.Errorf("a failed attempt was logged; its record says it all:\n%s", logs.String())
	}
	by := onceEach(t, readRecords(t, out), urls)
	for _, u := range missing {
		if r := by[u]; r.Status != 404 || r.Error != "HTTP 404 Not Found" || r.Body == nil {
			t.Errorf("%s: record %+v, want status 404 with its body and error", u, r)
		}
	}
	if r := by[bad.URL+"/always-500"]; r.Status != 0 || !strings.Contains(r.Error, "task failed") || !strings.Contains(r.Error, "500") {
		t.Errorf("always-500: record %+v, want a failed task saying 500", r)
	}
	for _, u := range good {
		if by[u].Failed() {
			t.Errorf("%s failed: %s", u, by[u].Error)
		}
	}

	// The same output again: the failures are counted from the file.
	j = openJournal(t, out)
	sum = run(t, dsn, tr, plan(t, tr, false, urls...), j, noRetries)
	j.Close()
	if sum.Failed != 3 || sum.AlreadyWritten != 8 || sum.Written != 0 {
		t.Errorf("re-run summary %+v, want 3 failed among 8 already written", sum)
	}
	// A fresh output: the failed task is reused, not fetched again.
	requests := s.total()
	var stdout bytes.Buffer
	sum = run(t, dsn, tr, plan(t, tr, false, urls...), fetch.NewStream(&stdout, "stdout"), noRetries)
	if sum.Failed != 3 || sum.Written != 8 || sum.Submitted != 0 {
		t.Errorf("stream re-run summary %+v, want 8 written, 3 failed, none submitted", sum)
	}
	onceEach(t, parseRecords(t, stdout.Bytes()), urls)
	// Its one attempt: the first send and the transport's retries of a
	// 5xx, as for any host (it is a generic provider of its own).
	if n := broken.Load(); n != 1+transport.DefaultMaxRetries {
		t.Errorf("the failing server was asked %d times, want %d (one attempt)", n, 1+transport.DefaultMaxRetries)
	}
	if n := s.total(); n != requests {
		t.Errorf("the stream re-run sent %d requests, want none", n-requests)
	}
}

// TestRunReadme resolves repository pages of the four dialects to their
// README through each provider's API, as configured for self-hosted
// instances (here the simulator stands in for github.com and the others).
func TestRunReadme(t *testing.T) {
	s := startSim(t, sim.Config{APIs: []sim.APIConfig{
		{Dialect: sim.DialectGitHub, Prefix: "/github", Tokens: []sim.TokenConfig{{Token: "tok-gh-1"}}},
		{Dialect: sim.DialectGitLab, Prefix: "/gitlab", Tokens: []sim.TokenConfig{{Token: "tok-gl-1"}}},
		{Dialect: sim.DialectHuggingFace, Prefix: "/hf", Tokens: []sim.TokenConfig{{Token: "tok-hf-1"}}},
		{Dialect: sim.DialectGitea, Prefix: "/gitea", Tokens: []sim.TokenConfig{{Token: "tok-cb-1"}}},
	}})
	cfg := filepath.Join(t.TempDir(), "providers.toml")
	writeFile(t, cfg, `
[providers.github]
base_url = "`+s.URL+`/github"
web_url = "https://github.com"
[providers.gitlab]
base_url = "`+s.URL+`/gitlab/api/v4"
web_url = "https://gitlab.com"
[providers.huggingface]
base_url = "`+s.URL+`/hf"
web_url = "https://huggingface.co"
[providers.codeberg]
base_url = "`+s.URL+`/gitea/api/v1"
web_url = "https://codeberg.org"
`)
	tr := client(t, ratekeeper.Options{ConfigFile: cfg, Tokens: map[string][]string{
		"github": {"tok-gh-1"}, "gitlab": {"tok-gl-1"}, "huggingface": {"tok-hf-1"}, "codeberg": {"tok-cb-1"},
	}})
	repos := map[string]string{ // repository page → the README's title
		"https://github.com/octo/hello":         "# hello\n",
		"github.com/octo/world.git":             "# world\n",
		"https://gitlab.com/group/sub/project":  "# sub/project\n",
		"https://huggingface.co/org/model":      "# model\n",
		"https://huggingface.co/datasets/org/d": "# d\n",
		"https://codeberg.org/forge/tool":       "# tool\n",
	}
	var urls []string
	for u := range repos {
		urls = append(urls, u)
	}
	targets := plan(t, tr, true, urls...)
	for _, tg := range targets {
		if !strings.HasPrefix(tg.Request.URL, s.URL) {
			t.Errorf("%s resolved to %s, not the simulator", tg.URL, tg.Request.URL)
		}
	}
	var stdout bytes.Buffer
	sum := run(t, sqliteDSN(t), tr, targets, fetch.NewStream(&stdout, "stdout"))
	if sum.Failed != 0 {
		t.Errorf("summary %+v, want no failure", sum)
	}
	by := onceEach(t, parseRecords(t, stdout.Bytes()), urls)
	for repo, title := range repos {
		r := by[repo]
		if r.Status != 200 || r.Body == nil || !strings.HasPrefix(*r.Body, title) || r.Credential == "" {
			body := "<none>"
			if r.Body != nil {
				body = *r.Body
			}
			t.Errorf("%s: status %d, credential %q, error %q, body %.80q; want 200 with a README starting %q", repo, r.Status, r.Credential, r.Error, body, title)
		}
	}
	if v := s.Stats().Total.Violations; v != 0 {
		t.Errorf("%d rate-limit violations, want 0", v)
	}
}

// TestRunBodiesToFiles: bodies above the inline limit are in files named by
// their hash, and the record gives the path.
func TestRunBodiesToFiles(t *testing.T) {
	s := githubSim(t, "tok-alice-1")
	tr := client(t, ratekeeper.Options{Providers: []string{"github=" + s.URL + "/github"}, Tokens: map[string][]string{"github": {"tok-alice-1"}}})
	urls := repoURLs(s.URL, 3)
	var stdout bytes.Buffer
	run(t, sqliteDSN(t), tr, plan(t, tr, false, urls...), fetch.NewStream(&stdout, "stdout"), func(o *fetch.Options) { o.InlineBodyLimit = 64 })
	for _, r := range onceEach(t, parseRecords(t, stdout.Bytes()), urls) {
		if r.Body != nil || r.BodyFile == "" || !filepath.IsAbs(r.BodyFile) {
			t.Errorf("%s: body inline or no absolute body_file: %+v", r.URL, r)
			continue
		}
		b, err := os.ReadFile(r.BodyFile)
		if err != nil {
			t.Error(err)
			continue
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != r.SHA256 || int64(len(b)) != r.Size {
			t.Errorf("%s: body file does not match sha256 %s and size %d", r.URL, r.SHA256, r.Size)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRunQuotaBound: when the quota binds, waits longer than the client's
// MaxWait become reschedules (counted in the records), every URL is still
// fetched once and the server sees no violation.
func TestRunQuotaBound(t *testing.T) {
	s := startSim(t, sim.Config{APIs: []sim.APIConfig{{
		Dialect: sim.DialectGitHub, Prefix: "/github", Limit: 4, Window: time.Second, WindowMode: sim.WindowFixed,
		Tokens: []sim.TokenConfig{{Token: "tok-alice-1"}},
	}}})
	tr := client(t, ratekeeper.Options{
		Providers: []string{"github=" + s.URL + "/github"},
		Tokens:    map[string][]string{"github": {"tok-alice-1"}},
		MaxWait:   50 * time.Millisecond,
	})
	urls := repoURLs(s.URL, 10)
	var stdout bytes.Buffer
	sum := run(t, sqliteDSN(t), tr, plan(t, tr, false, urls...), fetch.NewStream(&stdout, "stdout"))
	if sum.Failed != 0 {
		t.Errorf("summary %+v, want no failure", sum)
	}
	reschedules := 0
	for u, r := range onceEach(t, parseRecords(t, stdout.Bytes()), urls) {
		reschedules += r.Reschedules
		if n := s.hits(pathOf(t, u)); n != 1 {
			t.Errorf("%s served %d times, want 1", u, n)
		}
	}
	if reschedules == 0 {
		t.Error("no task was rescheduled, though 10 URLs at 4 a second must wait")
	}
	if v := s.Stats().Total.Violations; v != 0 {
		t.Errorf("%d rate-limit violations, want 0", v)
	}
}

// A batch ends soon after its last task, not at the next look at its
// tasks: while answers come in its last tasks are looked at often. With
// looks 20 seconds apart, 5 URLs answered at once end the run well before
// the first of them (the margin is for a loaded machine's start-up).
func TestRunEndsWithItsLastTask(t *testing.T) {
	s := githubSim(t, "tok-alice-1")
	urls := repoURLs(s.URL, 5)
	tr := client(t, ratekeeper.Options{Providers: []string{"github=" + s.URL + "/github"},
		Tokens: map[string][]string{"github": {"tok-alice-1"}}})
	out := filepath.Join(t.TempDir(), "results.jsonl")
	j := openJournal(t, out)
	start := time.Now()
	sum := run(t, sqliteDSN(t), tr, plan(t, tr, false, urls...), j, func(o *fetch.Options) { o.PollInterval = 20 * time.Second })
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a batch of 5 URLs answered at once took %v with looks 20s apart: it waited for a look", took)
	}
	if sum.Written != 5 || !sum.Done() {
		t.Fatalf("summary %+v, want 5 written", sum)
	}
}
