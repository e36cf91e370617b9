package tasks

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/ratekeeper/ratekeeper/store/storetest"
)

// A worker whose writes of finished tasks fail for longer than River's
// completer tries (three tries, then it drops the batch and the task
// stays running until River's rescuer, minutes later) waits the outage
// out like every other call of the queue: the task completes, its
// request sent once.
func TestWorkerWaitsOutAnOutageOfItsCompletions(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		var sent atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			sent.Add(1)
			fmt.Fprint(w, "ok")
		}))
		defer srv.Close()

		fc := &failingCompletions{}
		clk := storetest.NewInstantWaits(time.Now())
		opts := testOptions()
		opts.DBOutageTimeout = time.Minute
		opts.outageNow, opts.outageAfter = clk.Now, clk.After
		opts.completerFaults = func(e riverdriver.Executor) riverdriver.Executor { fc.Executor = e; return fc }
		q := openQueue(t, dsn, opts)

		fc.fail(storetest.TransientErrors(t)[0].Err, 5) // more than River's three tries
		id := mustSubmit(t, q, HTTPType, `{"url":"`+srv.URL+`/a"}`, SubmitOptions{})
		defer startWorker(t, q, WorkOptions{WorkerID: "w-completions"})()
		if got := mustAwait(t, q, id); got.State != StateCompleted {
			t.Errorf("task = %+v, want completed", got)
		}
		if n := sent.Load(); n != 1 {
			t.Errorf("request sent %d times, want once", n)
		}
		if n := fc.failed(); n != 5 {
			t.Errorf("%d writes of the completion failed, want the outage's 5", n)
		}
	})
}

// failingCompletions fails the next n writes of finished tasks with err.
type failingCompletions struct {
	riverdriver.Executor
	mu      sync.Mutex
	err     error
	left    int
	nFailed int
}

func (f *failingCompletions) fail(err error, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err, f.left = err, n
}

func (f *failingCompletions) failed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nFailed
}

func (f *failingCompletions) JobSetStateIfRunningMany(ctx context.Context, params *riverdriver.JobSetStateIfRunningManyParams) ([]*rivertype.JobRow, error) {
	f.mu.Lock()
	if f.left > 0 {
		f.left--
		f.nFailed++
		f.mu.Unlock()
		return nil, f.err
	}
	f.mu.Unlock()
	return f.Executor.JobSetStateIfRunningMany(ctx, params)
}
