package tasks

import (
	"context"
	"errors"
	"time"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/ratekeeper/ratekeeper/store"
)

// River's completer writes the outcomes of finished attempts in batches,
// and gives a batch three tries of at most 10 s each, about 7 s of sleep
// between them; then it drops the batch. A dropped batch's tasks stay
// running in the database though their handlers are done: nothing in
// this process writes them again, their worker is alive (so no take-back
// sees them), and only River's rescuer runs them again, RescueStuckAfter
// after their claim (2.5 minutes for fetch's default timeout) and on the
// leader only. A PostgreSQL away for 20 s on a loaded machine was enough:
// a fetch waited on its last tasks for minutes after the database was
// back. So the worker's client writes completions through the queue's
// outage wait: a try that meets a transient error is made again until
// the database is back or the outage outlasts DBOutageTimeout, as every
// other call of the queue is. Writing a batch again is safe: River sets
// a task's state only while it is still running, attempt for attempt.

// completeTryTimeout bounds one try of writing a batch, as River's own
// tries are bounded.
const completeTryTimeout = 10 * time.Second

// completerDriver is the worker client's driver: River's own, but for
// the executor its services get, whose batch completions wait out
// outages.
type completerDriver[TTx any] struct {
	riverdriver.Driver[TTx]
	exec riverdriver.Executor
}

func (d completerDriver[TTx]) GetExecutor() riverdriver.Executor { return d.exec }

// withOutageCompletions returns driver with its executor's batch
// completions made through o; faults, when not nil, wraps the executor
// below the wait (tests).
func withOutageCompletions[TTx any](driver riverdriver.Driver[TTx], o *store.Outage, faults func(riverdriver.Executor) riverdriver.Executor) riverdriver.Driver[TTx] {
	if o == nil {
		return driver
	}
	exec := driver.GetExecutor()
	if faults != nil {
		exec = faults(exec)
	}
	return completerDriver[TTx]{Driver: driver, exec: outageExecutor{Executor: exec, o: o}}
}

// outageExecutor waits out outages in JobSetStateIfRunningMany, the
// completer's write; every other call is River's own.
type outageExecutor struct {
	riverdriver.Executor
	o *store.Outage
}

func (e outageExecutor) JobSetStateIfRunningMany(ctx context.Context, params *riverdriver.JobSetStateIfRunningManyParams) (rows []*rivertype.JobRow, err error) {
	// River's deadline for its try would end the wait: the wait has its
	// own bound, and each try a deadline like River's.
	base := context.WithoutCancel(ctx)
	try := func(ctx context.Context) error {
		tctx, cancel := context.WithTimeout(ctx, completeTryTimeout)
		defer cancel()
		rows, err = e.Executor.JobSetStateIfRunningMany(tctx, params)
		return err
	}
	// A try that meets its deadline is the database away too: while the
	// server is down a dial waits within the deadline (redialRefused), and
	// pgx then answers the deadline, not the refusal, which the outage
	// does not take for transient. Such tries are made again, up to the
	// outage's bound in all.
	for stalls := 0; ; stalls++ {
		err = e.o.Do(base, try)
		if !errors.Is(err, context.DeadlineExceeded) || e.o.Timeout() < 0 ||
			time.Duration(stalls+1)*completeTryTimeout >= e.o.Timeout() {
			return rows, err
		}
	}
}
