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
		defer startWorker(t, q, WorkOptions{WorkerID: "w-completions"})()
		// Each write fails at once (a dial refused), or meets its deadline
		// (a dial that waited within it for the server, as redialRefused
		// does), more times than River's three tries.
		for i, failure := range []error{storetest.TransientErrors(t)[0].Err, context.DeadlineExceeded} {
			fc.fail(failure, 5)
			id := mustSubmit(t, q, HTTPType, fmt.Sprintf(`{"url":"%s/%d"}`, srv.URL, i), SubmitOptions{})
			if got := mustAwait(t, q, id); got.State != StateCompleted {
				t.Errorf("%v: task = %+v, want completed", failure, got)
			}
			if n := sent.Load(); n != int32(i+1) {
				t.Errorf("%v: %d requests sent for %d tasks, want each once", failure, n, i+1)
			}
			if n := fc.failed(); n != 5*(i+1) {
				t.Errorf("%v: %d writes of completions failed, want the outages' %d", failure, n, 5*(i+1))
			}
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
