package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/sqlite"
	"github.com/ratekeeper/ratekeeper/store/storetest"
)

// fakeTime is an Outage's clock: every wait returns at once, moving now
// by the wait, so a test of a two-minute outage takes no real time.
type fakeTime struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeTime() *fakeTime { return &fakeTime{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeTime) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeTime) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeTime) After(d time.Duration) <-chan time.Time {
	c.Advance(d)
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return ch
}

// kinds are the SQL stores an outage test runs on: SQLite always,
// PostgreSQL when RATEKEEPER_TEST_POSTGRES names one.
func kinds() []struct {
	name string
	open func(t *testing.T) store.Store
} {
	return []struct {
		name string
		open func(t *testing.T) store.Store
	}{
		{"SQLite", func(t *testing.T) store.Store {
			return openStore(t, filepath.Join(t.TempDir(), "outage.db"))
		}},
		{"PostgreSQL", func(t *testing.T) store.Store {
			return openStore(t, storetest.NewPostgresSchema(t, storetest.PostgresBase(t)))
		}},
	}
}

func openStore(t *testing.T, dsn string) store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// outage returns an Outage of timeout on clk whose log lines go to log.
func outage(clk *fakeTime, timeout time.Duration, log *bytes.Buffer) *store.Outage {
	return store.NewOutage(store.OutageOptions{
		Timeout: timeout, Name: "test-db", Now: clk.Now, After: clk.After,
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
}

// Each class of transient error, on each SQL store: an update made while
// the database is away is made once it is back, exactly once, and the
// log says once that the database is away and once that it is back.
func TestOutageIsWaitedOut(t *testing.T) {
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			s := k.open(t)
			for _, e := range storetest.TransientErrors(t) {
				t.Run(e.Name, func(t *testing.T) {
					if !store.IsTransient(e.Err) {
						t.Fatalf("IsTransient(%v) = false; want true", e.Err)
					}
					clk, log := newFakeTime(), &bytes.Buffer{}
					f := storetest.NewFaulty(s)
					w := store.WaitOutages(f, outage(clk, time.Minute, log))
					f.Fail(e.Err, 8)
					key := "outage/" + e.Name
					runs := 0
					err := w.Update(t.Context(), key, func(rec *store.Record) error {
						runs++
						rec.Value = append(rec.Value, 'x')
						return nil
					})
					if err != nil {
						t.Fatalf("Update during an outage of 8 calls = %v; want it to wait the outage out", err)
					}
					rec, err := s.Get(t.Context(), key)
					if err != nil || string(rec.Value) != "x" || rec.Version != 1 {
						t.Fatalf("after the outage the record is %q version %d (%v); want \"x\" written once", rec.Value, rec.Version, err)
					}
					if failed, passed := f.Counts(); failed != 8 || passed != 1 || runs != 1 {
						t.Errorf("calls failed %d, passed %d, fn ran %d times; want 8, 1, 1", failed, passed, runs)
					}
					if n := strings.Count(log.String(), "waiting for it to come back"); n != 1 {
						t.Errorf("log says %d times that the database is away; want once:\n%s", n, log)
					}
					if n := strings.Count(log.String(), "database is back"); n != 1 {
						t.Errorf("log says %d times that the database is back; want once:\n%s", n, log)
					}
					// Reads and blobs wait too.
					f.Fail(e.Err, 3)
					if got, err := w.Get(t.Context(), key); err != nil || string(got.Value) != "x" {
						t.Errorf("Get during an outage = %q, %v; want \"x\"", got.Value, err)
					}
					f.Fail(e.Err, 3)
					if err := w.PutBlob(t.Context(), key, []byte("b")); err != nil {
						t.Errorf("PutBlob during an outage = %v", err)
					}
				})
			}
		})
	}
}

// Beyond its bound an outage is given up on: the call returns the
// database's error, with its text, marked unavailable, having waited no
// longer than the bound; the next call fails at once until the database
// is back, and then works.
func TestOutageBeyondTheBoundStops(t *testing.T) {
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			s := k.open(t)
			for _, e := range storetest.TransientErrors(t) {
				t.Run(e.Name, func(t *testing.T) {
					clk, log := newFakeTime(), &bytes.Buffer{}
					f := storetest.NewFaulty(s)
					w := store.WaitOutages(f, outage(clk, 2*time.Minute, log))
					f.Fail(e.Err, -1)
					start := clk.Now()
					err := w.Update(t.Context(), "k", func(rec *store.Record) error { rec.Value = []byte("v"); return nil })
					if !errors.Is(err, e.Err) || !store.IsUnavailable(err) || err.Error() != e.Err.Error() {
						t.Fatalf("Update beyond the bound = %v; want %v itself, marked unavailable", err, e.Err)
					}
					if waited := clk.Now().Sub(start); waited > 2*time.Minute || waited < time.Minute {
						t.Errorf("waited %v; want up to the bound of 2m, and most of it", waited)
					}
					failedBefore, _ := f.Counts()
					if err := w.Update(t.Context(), "k", func(*store.Record) error { return nil }); !store.IsUnavailable(err) {
						t.Errorf("a call after the bound passed = %v; want it unavailable", err)
					}
					if failed, _ := f.Counts(); failed != failedBefore+1 {
						t.Errorf("a call after the bound passed tried %d times; want once", failed-failedBefore)
					}
					f.Heal()
					if err := w.Update(t.Context(), "k", func(rec *store.Record) error { rec.Value = []byte("v"); return nil }); err != nil {
						t.Errorf("Update once the database is back = %v", err)
					}
				})
			}
		})
	}
}

// What is not an outage is returned at once: a damaged SQLite file, a
// closed store, an invalid key, an error of fn.
func TestNotTransientIsNotRetried(t *testing.T) {
	damaged := &sqlite.DamagedError{Path: "x.db", Findings: []string{"database disk image is malformed"}}
	mine := errors.New("fn refused")
	for _, err := range []error{damaged, store.ErrClosed, store.ErrInvalidKey, mine, context.Canceled,
		fmt.Errorf("store: update \"k\": %w", os.ErrPermission)} {
		if store.IsTransient(err) {
			t.Errorf("IsTransient(%v) = true; want false", err)
		}
	}
	clk, log := newFakeTime(), &bytes.Buffer{}
	f := storetest.NewFaulty(openStore(t, filepath.Join(t.TempDir(), "x.db")))
	w := store.WaitOutages(f, outage(clk, time.Minute, log))
	f.Fail(damaged, -1)
	if err := w.Update(t.Context(), "k", func(*store.Record) error { return nil }); !errors.Is(err, damaged) || store.IsUnavailable(err) {
		t.Errorf("Update on a damaged database = %v; want the damage, at once", err)
	}
	f.Heal()
	if err := w.Update(t.Context(), "k", func(*store.Record) error { return mine }); err != mine {
		t.Errorf("Update whose fn fails = %v; want fn's error unchanged", err)
	}
	if failed, passed := f.Counts(); failed != 1 || passed != 1 {
		t.Errorf("calls failed %d, passed %d; want 1 and 1 (nothing retried)", failed, passed)
	}
	if log.Len() != 0 {
		t.Errorf("logged %q; want nothing (no outage)", log)
	}
}

// A call's wait limit (WithWaitLimit: a gateway request's max wait) ends
// its wait before the outage's bound does.
func TestOutageWaitLimit(t *testing.T) {
	clk, log := newFakeTime(), &bytes.Buffer{}
	f := storetest.NewFaulty(openStore(t, filepath.Join(t.TempDir(), "x.db")))
	w := store.WaitOutages(f, outage(clk, 2*time.Minute, log))
	f.Fail(storetest.TransientErrors(t)[0].Err, -1)
	start := clk.Now()
	ctx := store.WithWaitLimit(t.Context(), start.Add(10*time.Second))
	if _, err := w.Get(ctx, "k"); !store.IsUnavailable(err) {
		t.Fatalf("Get = %v; want unavailable", err)
	}
	if waited := clk.Now().Sub(start); waited > 10*time.Second {
		t.Errorf("waited %v; want at most the limit of 10s", waited)
	}
}

// A call whose context ends while it waits for the database returns at
// once, unavailable, and cancelled as far as errors.Is can tell.
func TestOutageWaitEndsWithTheContext(t *testing.T) {
	f := storetest.NewFaulty(openStore(t, filepath.Join(t.TempDir(), "x.db")))
	w := store.WaitOutages(f, store.NewOutage(store.OutageOptions{Timeout: time.Hour, Logger: slog.New(slog.DiscardHandler)}))
	ctx, cancel := context.WithCancel(t.Context())
	f.OnFail(cancel) // the caller gives up while the database is away
	f.Fail(storetest.TransientErrors(t)[0].Err, -1)
	_, err := w.Get(ctx, "k")
	if !store.IsUnavailable(err) || !errors.Is(err, context.Canceled) {
		t.Errorf("Get cancelled during an outage = %v; want it unavailable and cancelled", err)
	}
	if failed, _ := f.Counts(); failed != 1 {
		t.Errorf("tried %d times after the context ended; want once", failed)
	}
}
