package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratekeeper/ratekeeper/store"
)

// Faulty is a store.Store that fails on demand: while Fail's error is set,
// every call on the database returns it without reaching the store below
// (as a database that is away would), and counts it. It offers Snapshot,
// Clock and Notifier as the store below does, so that a quota state over
// it works as over the store itself. Tests inject database outages with
// it, deterministically, instead of restarting a server.
type Faulty struct {
	store.Store

	mu     sync.Mutex
	err    error
	left   int // calls still to fail; <0: until Heal
	failed int
	passed int
	onFail func() // called at each failed call, without the lock
}

// NewFaulty returns s behind a Faulty that does not fail yet.
func NewFaulty(s store.Store) *Faulty { return &Faulty{Store: s} }

// Fail makes the next n calls fail with err (n < 0: every call until
// Heal).
func (f *Faulty) Fail(err error, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err, f.left = err, n
}

// Heal makes calls reach the store again.
func (f *Faulty) Heal() { f.Fail(nil, 0) }

// OnFail sets a function called at each failed call (a test's clock may
// advance there).
func (f *Faulty) OnFail(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onFail = fn
}

// Counts returns how many calls failed and how many reached the store.
func (f *Faulty) Counts() (failed, passed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed, f.passed
}

// fault returns the error the current call fails with, nil to let it
// through.
func (f *Faulty) fault() error {
	f.mu.Lock()
	err := f.err
	if err == nil || f.left == 0 {
		f.passed++
		f.mu.Unlock()
		return nil
	}
	if f.left > 0 {
		f.left--
	}
	f.failed++
	on := f.onFail
	f.mu.Unlock()
	if on != nil {
		on()
	}
	return err
}

func (f *Faulty) Update(ctx context.Context, key string, fn func(rec *store.Record) error) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Store.Update(ctx, key, fn)
}

func (f *Faulty) UpdateMany(ctx context.Context, keys []string, fn func(recs []*store.Record) error) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Store.UpdateMany(ctx, keys, fn)
}

func (f *Faulty) Get(ctx context.Context, key string) (store.Record, error) {
	if err := f.fault(); err != nil {
		return store.Record{}, err
	}
	return f.Store.Get(ctx, key)
}

func (f *Faulty) List(ctx context.Context, prefix string) ([]store.Record, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	return f.Store.List(ctx, prefix)
}

// GetMany implements store.Snapshot when the store below does; otherwise
// it reads each key with Get.
func (f *Faulty) GetMany(ctx context.Context, keys []string) ([]store.Record, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	if sn, ok := f.Store.(store.Snapshot); ok {
		return sn.GetMany(ctx, keys)
	}
	out := make([]store.Record, len(keys))
	for i, k := range keys {
		r, err := f.Store.Get(ctx, k)
		switch {
		case errors.Is(err, store.ErrNotFound):
			r = store.Record{Key: k}
		case err != nil:
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// DatabaseNow implements store.Clock (the system's clock when the store
// below has none).
func (f *Faulty) DatabaseNow(ctx context.Context) (time.Time, error) {
	if err := f.fault(); err != nil {
		return time.Time{}, err
	}
	if c, ok := f.Store.(store.Clock); ok {
		return c.DatabaseNow(ctx)
	}
	return time.Now(), nil
}

// News implements store.Newsboard, the store below's (0 without one): a
// count in memory, which no outage of the database stops.
func (f *Faulty) News() uint64 { return store.NewsOf(f.Store) }

// Listen implements store.Notifier when the store below does; otherwise
// it hears nothing until ctx ends.
func (f *Faulty) Listen(ctx context.Context, channel string, fn func(payload string), waiting func() bool) error {
	if n, ok := f.Store.(store.Notifier); ok {
		return n.Listen(ctx, channel, fn, waiting)
	}
	<-ctx.Done()
	return ctx.Err()
}

func (f *Faulty) GetBlob(ctx context.Context, key string) ([]byte, bool, error) {
	if err := f.fault(); err != nil {
		return nil, false, err
	}
	return f.Store.GetBlob(ctx, key)
}

func (f *Faulty) PutBlob(ctx context.Context, key string, value []byte) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Store.PutBlob(ctx, key, value)
}

func (f *Faulty) DeleteBlob(ctx context.Context, key string) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Store.DeleteBlob(ctx, key)
}

func (f *Faulty) TouchBlob(ctx context.Context, key string) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Store.TouchBlob(ctx, key)
}

// NamedError is one class of database error, by name.
type NamedError struct {
	Name string
	Err  error
}

// TransientErrors returns one error of each class a database outage
// produces, as the drivers report them: SQLite's busy and locked (made by
// SQLite itself on a file in a temporary directory), PostgreSQL's
// connection refused (a real dial to a closed port), connection reset,
// admin shutdown (57P01), cannot connect now (57P03) and serialization
// failure (40001) (the errors pgx builds from the server's answer).
func TransientErrors(t testing.TB) []NamedError {
	t.Helper()
	busy, locked := sqliteErrors(t)
	return []NamedError{
		{"SQLiteBusy", busy},
		{"SQLiteLocked", locked},
		{"ConnectionRefused", refused(t)},
		{"ConnectionReset", fmt.Errorf("failed to receive message: %w",
			&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)})},
		{"AdminShutdown57P01", &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}},
		{"CannotConnectNow57P03", fmt.Errorf("failed to connect to `user=postgres database=postgres`: %w",
			&pgconn.PgError{Severity: "FATAL", Code: "57P03", Message: "the database system is shutting down"})},
		{"SerializationFailure40001", &pgconn.PgError{Severity: "ERROR", Code: "40001", Message: "could not serialize access due to concurrent update"}},
	}
}

// sqliteErrors makes SQLite report busy (a second connection asks for the
// write lock another holds, without a busy timeout) and locked (a
// connection drops a table it is still reading).
func sqliteErrors(t testing.TB) (busy, locked error) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lock.db")
	open := func() *sql.DB {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		return db
	}
	a, b := open(), open()
	defer a.Close()
	defer b.Close()
	if _, err := a.ExecContext(ctx, "CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}
	tx, err := a.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, busy = b.ExecContext(ctx, "INSERT INTO t VALUES (3)")
	if busy == nil {
		t.Fatal("SQLite let a second writer in while the first held the write lock")
	}
	rows, err := tx.QueryContext(ctx, "SELECT x FROM t")
	if err != nil {
		t.Fatal(err)
	}
	rows.Next()
	_, locked = tx.ExecContext(ctx, "DROP TABLE t")
	rows.Close()
	_ = tx.Rollback()
	if locked == nil {
		t.Fatal("SQLite dropped a table a statement of the same connection was reading")
	}
	return busy, locked
}

// refused dials PostgreSQL at a loopback port nobody listens on.
func refused(t testing.TB) error {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable&connect_timeout=5")
	if err == nil {
		conn.Close(ctx)
		t.Fatalf("connected to %s, where nobody listens", addr)
	}
	return err
}

// InstantWaits is a store.Outage clock (Now and After) whose waits return
// at once, moving its now by the wait: an outage's backoff runs in no real
// time, its bound still counted.
type InstantWaits struct {
	mu  sync.Mutex
	now time.Time
}

// NewInstantWaits returns an InstantWaits starting at now.
func NewInstantWaits(now time.Time) *InstantWaits { return &InstantWaits{now: now} }

// Now is the clock's time.
func (c *InstantWaits) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After moves the clock by d and returns a channel that has fired.
func (c *InstantWaits) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return ch
}
