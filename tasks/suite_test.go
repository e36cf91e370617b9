package tasks

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/store/storetest"
)

// The task suite runs every test against SQLite and PostgreSQL, like
// River's shared driver tests: one behaviour, two databases.

// forEachDB runs fn as a subtest per database, each with a fresh database.
func forEachDB(t *testing.T, fn func(t *testing.T, dsn string)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, sqliteDSN(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, postgresDSN(t))
	})
}

func sqliteDSN(t testing.TB) string {
	return filepath.Join(t.TempDir(), "tasks.db")
}

// postgresDSN is a fresh database on the test server, dropped at the end.
func postgresDSN(t testing.TB) string {
	return storetest.NewPostgresDatabase(t, "rk_tasks_")
}

// testOptions polls fast and backs off in milliseconds so that tests wait
// for events, not seconds.
func testOptions() Options {
	return Options{
		Logger:             testLogger(),
		FetchPollInterval:  10 * time.Millisecond,
		FetchCooldown:      time.Millisecond,
		CancelPollInterval: 20 * time.Millisecond,
		Backoff:            func(retry int) time.Duration { return time.Duration(retry) * 5 * time.Millisecond },
	}
}

func openQueue(t testing.TB, dsn string, opts Options) *Queue {
	t.Helper()
	if opts.BodyDir == "" {
		opts.BodyDir = filepath.Join(t.TempDir(), "bodies")
	}
	q, err := Open(context.Background(), dsn, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// startWorker runs q.Work until the test ends.
func startWorker(t testing.TB, q *Queue, wo WorkOptions) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() { werr = q.Work(ctx, wo) })
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			if werr != nil {
				t.Errorf("Work: %v", werr)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustSubmit(t testing.TB, q *Queue, typ, input string, opts SubmitOptions) int64 {
	t.Helper()
	id, err := q.Submit(ctxT(t), typ, json.RawMessage(input), opts)
	if err != nil {
		t.Fatalf("Submit(%s, %s): %v", typ, input, err)
	}
	return id
}

func mustAwait(t testing.TB, q *Queue, id int64) *Task {
	t.Helper()
	task, err := q.Await(ctxT(t), id)
	if err != nil {
		t.Fatalf("Await(%d): %v (task: %+v)", id, err, task)
	}
	return task
}

func kinds(evs []Event) []EventKind {
	out := make([]EventKind, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

// testLogger discards logs unless RATEKEEPER_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("RATEKEEPER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
