package fetch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/store/sqlite"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// faultyState stands for a rate-keeping transport whose quota state fails
// (a damaged database) for the URLs bad picks, before anything is sent;
// the others go to the network through tasks.WireTransport.
type faultyState struct {
	wire http.RoundTripper
	bad  func(*http.Request) bool
	hits atomic.Int64
}

func (f *faultyState) RoundTrip(req *http.Request) (*http.Response, error) {
	if f.bad(req) {
		f.hits.Add(1)
		return nil, errors.New("ratekeeper: reserving quota: store: update \"github/alice/core\": database disk image is malformed (11)")
	}
	return f.wire.RoundTrip(req)
}

// A fault on this machine is never a URL's outcome: the run stops with
// exit-worthy error, the URL it hit is not written, and the same batch
// run again (the fault gone) writes it, once.
func TestLocalFaultStopsTheRunAndWritesNothingForIt(t *testing.T) {
	s := githubSim(t, "tok-alice-1")
	urls := repoURLs(s.URL, 30)
	badURL := urls[17]
	tr := client(t, githubOpts(s.URL))
	targets := plan(t, tr, false, urls...)
	dsn := sqliteDSN(t)
	out := filepath.Join(t.TempDir(), "results.jsonl")

	faulty := &faultyState{wire: tasks.WireTransport(tr), bad: func(r *http.Request) bool { return r.URL.String() == badURL }}
	j := openJournal(t, out)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	_, err := fetch.Run(ctx, targets, fetch.Options{
		DSN: dsn, Client: &http.Client{Transport: faulty}, Output: j, Concurrency: 4, Timeout: 20 * time.Second,
		WireMarked: true, PollInterval: 20 * time.Millisecond, BodyDir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})),
	})
	j.Close()
	if err == nil || !tasks.IsLocalFault(err) || !strings.Contains(err.Error(), "malformed") || !strings.Contains(err.Error(), "run the same command again") {
		t.Fatalf("Run = %v, want it stopped by the local fault, saying what to do", err)
	}
	if faulty.hits.Load() != 1 {
		t.Errorf("the faulty URL was tried %d times, want once: a local fault spends no retries", faulty.hits.Load())
	}
	for _, r := range readRecords(t, out) {
		if r.URL == badURL || strings.Contains(r.Error, "malformed") {
			t.Fatalf("a local fault was written as an outcome: %+v", r)
		}
	}

	// The fault gone: the same batch finishes, every URL once, the one the
	// fault hit with its server's answer.
	j = openJournal(t, out)
	run(t, dsn, tr, targets, j)
	j.Close()
	by := onceEach(t, readRecords(t, out), urls)
	if r := by[badURL]; r.Status != http.StatusOK || r.Failed() {
		t.Errorf("after the fault: %+v, want a 200", r)
	}
}

// A batch that the task queue would refuse once running is refused before
// anything is opened or submitted.
func TestRunChecksOptionsFirst(t *testing.T) {
	tr := client(t, githubOpts("http://127.0.0.1:1"))
	targets := plan(t, tr, false, "http://127.0.0.1:1/github/repos/o/r")
	dsn := filepath.Join(t.TempDir(), "rk.db")
	for name, o := range map[string]fetch.Options{
		"concurrency": {Concurrency: 1_000_000},
		"retries":     {MaxRetries: 50_000},
		"timeout":     {Timeout: time.Microsecond},
		"priority":    {Priority: 9},
		"no timeout":  {Timeout: tasks.NoTimeout},
	} {
		o.DSN, o.Output = dsn, fetch.NewStream(&strings.Builder{}, "stdout")
		_, err := fetch.Run(context.Background(), targets, o)
		if !errors.Is(err, tasks.ErrInvalid) {
			t.Errorf("%s: Run = %v, want an invalid-options error", name, err)
		}
	}
	if _, err := os.Stat(dsn); !os.IsNotExist(err) {
		t.Errorf("the database was created (%v): something ran before the options were checked", err)
	}
}

// Keys too long for the task queue become digests; a retry's key too.
func TestLongURLGetsADigestKey(t *testing.T) {
	s := githubSim(t, "tok-alice-1")
	long := s.URL + "/github/search/code?q=" + strings.Repeat("x", 2000)
	short := s.URL + "/github/repos/o/r"
	tr := client(t, githubOpts(s.URL))
	targets := plan(t, tr, false, long, short)
	if k := targets[0].Key; !strings.HasPrefix(k, "sha256:") || len(k) > tasks.UniqueKeyLimit {
		t.Errorf("key of a 2,000-character URL = %q, want a digest", k)
	}
	if targets[1].Key != short {
		t.Errorf("key of a short URL = %q, want the URL", targets[1].Key)
	}
	out := filepath.Join(t.TempDir(), "results.jsonl")
	j := openJournal(t, out)
	sum := run(t, sqliteDSN(t), tr, targets, j)
	j.Close()
	by := onceEach(t, readRecords(t, out), []string{long, short})
	if sum.Failed != 0 || by[long].Status != http.StatusOK {
		t.Errorf("summary %+v, long URL %+v: want it fetched like any other", sum, by[long])
	}
}

// deleting stands for a finished task deleted before fetch wrote its
// record (a retention setting of another worker, by hand): the request for
// trigger first waits until del has removed the finished task of victim.
type deleting struct {
	http.RoundTripper
	trigger string
	del     func() error
}

func (d *deleting) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.String() == d.trigger {
		if err := d.del(); err != nil {
			return nil, err
		}
	}
	return d.RoundTripper.RoundTrip(req)
}

// A task deleted from the database before its record was written took its
// outcome with it: it is submitted again, not written as a failure. The
// victim's task is deleted in the same transaction that finishes it (by a
// trigger set while its request is under way), so that no look at the
// tasks can see it finished first, whatever the machine's load: a look
// finds it gone, as it finds a finished task a retention setting deleted.
func TestVanishedTaskIsSubmittedAgain(t *testing.T) {
	s := githubSim(t, "tok-alice-1")
	urls := repoURLs(s.URL, 3)
	tr := client(t, githubOpts(s.URL))
	targets := plan(t, tr, false, urls...)
	dsn := sqliteDSN(t)
	victim := urls[1]
	armed := false
	d := &deleting{RoundTripper: tr, trigger: victim, del: func() error {
		if armed {
			return nil
		}
		db, err := sqlite.OpenDB(context.Background(), dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		var id int64
		if err := db.QueryRow("SELECT id FROM river_job WHERE json_extract(args, ?) = ? AND state = 'running'", "$.unique_key", victim).Scan(&id); err != nil {
			return fmt.Errorf("the victim's running task: %w", err)
		}
		// Only this task: the one submitted again must finish.
		_, err = db.Exec(fmt.Sprintf(`CREATE TRIGGER vanish AFTER UPDATE OF state ON river_job
			WHEN NEW.id = %d AND NEW.state = 'completed'
			BEGIN DELETE FROM river_job WHERE id = NEW.id; END`, id))
		armed = err == nil
		return err
	}}
	out := filepath.Join(t.TempDir(), "results.jsonl")
	j := openJournal(t, out)
	sum := run(t, dsn, tr, targets, j, func(o *fetch.Options) {
		o.Client = &http.Client{Transport: d}
		o.Concurrency = 1
	})
	j.Close()
	if !armed {
		t.Fatal("nothing was deleted")
	}
	by := onceEach(t, readRecords(t, out), urls)
	if r := by[victim]; r.Failed() || r.Status != http.StatusOK {
		t.Errorf("%s: %+v, want fetched again by a new task", victim, r)
	}
	if sum.Submitted != 4 || s.hits(pathOf(t, victim)) != 2 {
		t.Errorf("summary %+v, %d hits; want the vanished task added again and its URL fetched again", sum, s.hits(pathOf(t, victim)))
	}
}

// githubOpts is a client of the simulator's GitHub at base, with alice's
// token.
func githubOpts(base string) ratekeeper.Options {
	return ratekeeper.Options{Providers: []string{"github=" + base + "/github"}, Tokens: map[string][]string{"github": {"tok-alice-1"}}}
}
