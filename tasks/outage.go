package tasks

import (
	"context"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/ratekeeper/ratekeeper/store"
)

// outageBackend runs every call of a backend on the database through one
// store.Outage: a call that meets a transient error (IsTransient: the
// database restarting, a lost connection, SQLite's write lock held
// elsewhere) is made again until the database is back or the outage is
// older than its bound. Each call is one transaction or one read, rolled
// back when it fails, so making it again records nothing twice; a
// submission that commits but loses its answer is the exception a
// UniqueKey makes harmless.
type outageBackend struct {
	backend
	o *store.Outage
}

func (w *outageBackend) insert(ctx context.Context, specs []insertSpec, created func(rows []*rivertype.JobRow, dup []bool) []Event) (out []Submitted, err error) {
	err = w.o.Do(ctx, func(ctx context.Context) error {
		out, err = w.backend.insert(ctx, specs, created)
		return err
	})
	return out, err
}

func (w *outageBackend) get(ctx context.Context, id int64) (row *rivertype.JobRow, err error) {
	err = w.o.Do(ctx, func(ctx context.Context) error {
		row, err = w.backend.get(ctx, id)
		return err
	})
	return row, err
}

func (w *outageBackend) getMany(ctx context.Context, ids []int64) (rows []*rivertype.JobRow, err error) {
	err = w.o.Do(ctx, func(ctx context.Context) error {
		rows, err = w.backend.getMany(ctx, ids)
		return err
	})
	return rows, err
}

func (w *outageBackend) list(ctx context.Context, f Filter, limit int) (rows []*rivertype.JobRow, err error) {
	err = w.o.Do(ctx, func(ctx context.Context) error {
		rows, err = w.backend.list(ctx, f, limit)
		return err
	})
	return rows, err
}

func (w *outageBackend) cancel(ctx context.Context, id int64, now time.Time, events func(before, after *rivertype.JobRow) []Event) (before, after *rivertype.JobRow, err error) {
	err = w.o.Do(ctx, func(ctx context.Context) error {
		before, after, err = w.backend.cancel(ctx, id, now, events)
		return err
	})
	return before, after, err
}

func (w *outageBackend) events(ctx context.Context, id int64) (evs []Event, err error) {
	err = w.o.Do(ctx, func(ctx context.Context) error {
		evs, err = w.backend.events(ctx, id)
		return err
	})
	return evs, err
}

func (w *outageBackend) workers(ctx context.Context) (rows []workerInfo, nowUS int64, err error) {
	err = w.o.Do(ctx, func(ctx context.Context) error {
		rows, nowUS, err = w.backend.workers(ctx)
		return err
	})
	return rows, nowUS, err
}

func (w *outageBackend) reclaim(ctx context.Context, judged func(worker string) (workerVerdict, bool), now time.Time) (ids []int64, err error) {
	err = w.o.Do(ctx, func(ctx context.Context) error {
		ids, err = w.backend.reclaim(ctx, judged, now)
		return err
	})
	return ids, err
}
