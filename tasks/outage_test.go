package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riverqueue/river/rivertype"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/storetest"
)

// faultyBackend fails the calls of a backend on demand, as a database that
// is away would, without reaching it.
type faultyBackend struct {
	backend
	mu     sync.Mutex
	err    error
	left   int
	failed int
}

func (f *faultyBackend) fail(err error, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err, f.left = err, n
}

func (f *faultyBackend) fault() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil || f.left == 0 {
		return nil
	}
	f.left--
	f.failed++
	return f.err
}

func (f *faultyBackend) insert(ctx context.Context, specs []insertSpec, created func([]*rivertype.JobRow, []bool) []Event) ([]Submitted, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	return f.backend.insert(ctx, specs, created)
}

func (f *faultyBackend) getMany(ctx context.Context, ids []int64) ([]*rivertype.JobRow, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	return f.backend.getMany(ctx, ids)
}

func (f *faultyBackend) list(ctx context.Context, fl Filter, limit int) ([]*rivertype.JobRow, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	return f.backend.list(ctx, fl, limit)
}

// TestQueueWaitsOutAnOutage: for each class of transient error, on both
// databases, what a batch (fetch) does with the queue while the database
// is away — submit, read its tasks back, list them — waits for it and
// succeeds, each submission recorded once; an outage longer than the
// bound is given up on with the database's own error.
func TestQueueWaitsOutAnOutage(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		for _, e := range storetest.TransientErrors(t) {
			t.Run(e.Name, func(t *testing.T) {
				ctx := context.Background()
				fb := &faultyBackend{}
				clk := storetest.NewInstantWaits(time.Now())
				opts := testOptions()
				opts.DBOutageTimeout = time.Minute
				opts.outageNow, opts.outageAfter = clk.Now, clk.After
				opts.faults = func(b backend) backend { fb.backend = b; return fb }
				q := openQueue(t, dsn, opts)

				fb.fail(e.Err, 5)
				id, err := q.Submit(ctx, HTTPType, json.RawMessage(`{"url":"https://example.com/a"}`), SubmitOptions{UniqueKey: e.Name})
				if err != nil {
					t.Fatalf("Submit during an outage = %v; want it to wait the outage out", err)
				}
				fb.fail(e.Err, 5)
				got, err := q.GetMany(ctx, []int64{id})
				if err != nil || len(got) != 1 || got[0].ID != id {
					t.Fatalf("GetMany during an outage = %v, %v; want task %d", got, err, id)
				}
				fb.fail(e.Err, 5)
				all, err := q.List(ctx, Filter{Type: HTTPType})
				if err != nil {
					t.Fatalf("List during an outage = %v", err)
				}
				n := 0
				for _, tk := range all {
					if tk.UniqueKey == e.Name {
						n++
					}
				}
				if n != 1 {
					t.Errorf("%d tasks with the submission's key; want it recorded once", n)
				}
				if fb.failed != 15 {
					t.Errorf("the database failed %d calls; want the 15 of the outages", fb.failed)
				}

				fb.fail(e.Err, -1)
				_, err = q.GetMany(ctx, []int64{id})
				if !store.IsUnavailable(err) || !strings.HasSuffix(err.Error(), ": "+e.Err.Error()) {
					t.Errorf("GetMany beyond the bound = %v; want the database's error, %v", err, e.Err)
				}
				fb.fail(nil, 0)
				if _, err := q.GetMany(ctx, []int64{id}); err != nil {
					t.Errorf("GetMany once the database is back = %v", err)
				}
			})
		}
	})
}

// rawBackend is q's backend below the outage's wait, for tests that run
// SQL on the database directly.
func rawBackend(q *Queue) backend {
	if o, ok := q.b.(*outageBackend); ok {
		return o.backend
	}
	return q.b
}

// Once a dial was refused, redialRefused also waits out the server's
// "starting up" (57P03), which comes after a dial succeeds, by asking
// ready before it hands a connection over; the first session accepted
// ends that, so later dials ask nothing.
func TestRedialWaitsOutStartingUp(t *testing.T) { synctest.Test(t, redialWaitsOutStartingUp) }

func redialWaitsOutStartingUp(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	startingUp := &pgconn.PgError{Severity: "FATAL", Code: "57P03", Message: "the database system is starting up"}
	dials, probes := 0, 0
	var reached atomic.Bool
	reached.Store(true)
	dial := redialRefused(func(context.Context, string, string) (net.Conn, error) {
		dials++
		if dials == 1 {
			return nil, refused
		}
		c, _ := net.Pipe()
		return c, nil
	}, &reached, func(context.Context) error {
		probes++
		if probes < 3 {
			return fmt.Errorf("failed to connect: server error: %w", startingUp)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := dial(ctx, "tcp", "127.0.0.1:5432")
	if err != nil || dials != 4 || probes != 3 {
		t.Fatalf("across a restart: %v after %d dials and %d probes; want a connection at the 4th dial, once the 3rd probe was accepted", err, dials, probes)
	}
	conn.Close()
	conn, err = dial(ctx, "tcp", "127.0.0.1:5432")
	if err != nil || dials != 5 || probes != 3 {
		t.Fatalf("after the restart: %v, %d dials, %d probes; want a connection and no probe", err, dials, probes)
	}
	conn.Close()
	// Without a deadline, "starting up" is returned at once, as a refusal is.
	dials, probes = 0, 0
	if _, err := dial(context.Background(), "tcp", "127.0.0.1:5432"); !errors.Is(err, syscall.ECONNREFUSED) || dials != 1 {
		t.Fatalf("without a deadline: %v after %d dials; want the refusal at once", err, dials)
	}
	if _, err := dial(context.Background(), "tcp", "127.0.0.1:5432"); !errors.As(err, new(*pgconn.PgError)) || probes != 1 {
		t.Errorf("without a deadline, starting up: %v after %d probes; want 57P03 at once", err, probes)
	}
}

// redialRefused dials again while the server refuses, within the
// caller's deadline only, once the database was reached, and returns any
// other error at once; before the database was ever reached (a wrong URL,
// a server not started) it fails at once.
func TestRedialRefused(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	dials := 0
	var reached atomic.Bool
	dial := redialRefused(func(context.Context, string, string) (net.Conn, error) {
		dials++
		if dials < 3 {
			return nil, refused
		}
		c, _ := net.Pipe()
		return c, nil
	}, &reached, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := dial(ctx, "tcp", "127.0.0.1:5432"); !errors.Is(err, syscall.ECONNREFUSED) || dials != 1 {
		t.Fatalf("before the database was reached: %v after %d dials; want the refusal at once", err, dials)
	}
	reached.Store(true)
	dials = 0
	conn, err := dial(ctx, "tcp", "127.0.0.1:5432")
	if err != nil || dials != 3 {
		t.Fatalf("with a deadline: %v after %d dials; want a connection at the third", err, dials)
	}
	conn.Close()

	dials = 0
	if _, err := dial(context.Background(), "tcp", "127.0.0.1:5432"); !errors.Is(err, syscall.ECONNREFUSED) || dials != 1 {
		t.Errorf("without a deadline: %v after %d dials; want the refusal at once", err, dials)
	}
	other := errors.New("no route to host")
	dial = redialRefused(func(context.Context, string, string) (net.Conn, error) { dials++; return nil, other }, &reached, nil)
	dials = 0
	if _, err := dial(ctx, "tcp", "127.0.0.1:5432"); err != other || dials != 1 {
		t.Errorf("another error: %v after %d dials; want it at once", err, dials)
	}
}
