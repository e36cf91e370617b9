package tasks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/holder"
)

// Worker liveness. Every worker keeps a row in ratekeeper_task_workers:
// its name (River's client ID, which River writes into every task it
// claims, in the claiming UPDATE), the process that runs it (a holder:
// host, boot, PID, start), the types it handles, and a heartbeat renewed
// every HeartbeatInterval on the database's clock. From that row any
// process can tell a worker that is gone:
//
//   - a worker of this machine is gone when its process is (the process
//     table says so, holder.Gone): at once after a kill -9;
//   - a worker of another machine, or one that named no process, is gone
//     when its heartbeat is older than HeartbeatTimeout.
//
// A worker that starts, and every running worker at each heartbeat, takes
// back the running tasks of the workers that are gone (as Reclaim does:
// nothing counted, the task keeps its place in line) and forgets their
// rows. List and Get mark such tasks (Task.WorkerGone), and Cancel
// cancels them at once. River's rescuer (Options.RescueStuckAfter) is
// left with the tasks of workers that recorded no row.
const (
	// HeartbeatInterval is how often a worker renews its heartbeat.
	HeartbeatInterval = 10 * time.Second
	// HeartbeatTimeout is how long a worker of another machine may go
	// without renewing its heartbeat before it counts as gone and its
	// running tasks are taken back: six missed renewals, so that a
	// database slow for a while does not make live workers' tasks run
	// twice.
	HeartbeatTimeout = time.Minute
)

// workerInfo is a row of ratekeeper_task_workers.
type workerInfo struct {
	ID     string
	Types  []string
	Holder string // holder.ID.String() of its process; "" for rows of older versions
	SeenUS int64  // last heartbeat, microseconds since the epoch on the database's clock
}

// workerVerdict is what a worker's row says of it.
type workerVerdict struct {
	gone bool
	// reason says why it is gone, for histories and lists.
	reason string
	// row is the row judged: a take-back happens only while the row is
	// still the same (same process, same heartbeat).
	row workerInfo
}

// processTable tells which holders are of this machine and which of
// those are gone; holder's functions in production.
type processTable struct {
	local func(string) bool
	gone  func(string) bool
}

var thisMachine = processTable{local: holder.Local, gone: holder.Gone}

// judge says whether worker w is gone at nowUS (the database's clock).
// Pure but for what procs reads.
func judgeWorker(w workerInfo, nowUS int64, procs processTable) workerVerdict {
	v := workerVerdict{row: w}
	if w.Holder != "" && procs.local(w.Holder) {
		if procs.gone(w.Holder) {
			v.gone, v.reason = true, "its process has ended"
			if id, ok := holder.Parse(w.Holder); ok {
				v.reason = fmt.Sprintf("its process (PID %d) has ended", id.PID)
			}
		}
		// A live process of this machine is never gone, however long its
		// heartbeat has been silent (a stopped process, a stalled disk).
		return v
	}
	silent := time.Duration(nowUS-w.SeenUS) * time.Microsecond
	if silent > HeartbeatTimeout {
		v.gone = true
		v.reason = fmt.Sprintf("it has renewed no heartbeat for %s", silent.Round(time.Second))
		if id, ok := holder.Parse(w.Holder); ok {
			v.reason += " (a worker on " + id.Host + ")"
		}
	}
	return v
}

// judgeAll judges every row.
func judgeWorkers(rows []workerInfo, nowUS int64, procs processTable) map[string]workerVerdict {
	out := make(map[string]workerVerdict, len(rows))
	for _, w := range rows {
		out[w.ID] = judgeWorker(w, nowUS, procs)
	}
	return out
}

// live returns the rows whose workers are not gone.
func live(rows []workerInfo, verdicts map[string]workerVerdict) []workerInfo {
	var out []workerInfo
	for _, w := range rows {
		if !verdicts[w.ID].gone {
			out = append(out, w)
		}
	}
	return out
}

// nowUSSQL is the database's clock in microseconds since the epoch: the
// one clock every machine of a fleet reads alike.
func nowUSSQL(postgres bool) string {
	if postgres {
		return "(extract(epoch from clock_timestamp()) * 1000000)::bigint"
	}
	return "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)"
}

const workerColumns = "worker_id, types, holder, seen_at_us"

// readWorkers returns the rows of ratekeeper_task_workers (only worker id
// when id is not "") and the database's clock.
func readWorkers(ctx context.Context, r runner, postgres bool, id string) ([]workerInfo, int64, error) {
	q := "SELECT " + workerColumns + ", " + nowUSSQL(postgres) + " FROM ratekeeper_task_workers"
	var args []any
	if id != "" {
		q += " WHERE worker_id = $1"
		args = append(args, id)
	}
	rows, err := r.query(ctx, q+" ORDER BY worker_id", args...)
	if err != nil {
		return nil, 0, fmt.Errorf("read task workers: %w", err)
	}
	defer rows.Close()
	var (
		out   []workerInfo
		nowUS int64
	)
	for rows.Next() {
		var (
			w     workerInfo
			types string
		)
		if err := rows.Scan(&w.ID, &types, &w.Holder, &w.SeenUS, &nowUS); err != nil {
			return nil, 0, fmt.Errorf("read task workers: %w", err)
		}
		w.Types = strings.Split(types, ",")
		out = append(out, w)
	}
	return out, nowUS, rows.Err()
}

// announceWorker records that worker id, run by process self, handles
// types and is alive now.
func announceWorker(ctx context.Context, r runner, postgres bool, id, self string, types []string) error {
	now := nowUSSQL(postgres)
	return r.exec(ctx, `INSERT INTO ratekeeper_task_workers (worker_id, types, holder, started_at_us, seen_at_us) VALUES ($1, $2, $3, `+now+`, `+now+`)
ON CONFLICT (worker_id) DO UPDATE SET types = excluded.types, holder = excluded.holder, started_at_us = excluded.started_at_us, seen_at_us = excluded.seen_at_us`,
		id, strings.Join(types, ","), self)
}

// renewHeartbeat renews worker id's heartbeat and reports whether its row
// was still there for process self: false means another process judged it
// gone, took back its tasks and forgot it.
func renewHeartbeat(ctx context.Context, r runner, postgres bool, id, self string) (bool, error) {
	rows, err := r.query(ctx, "UPDATE ratekeeper_task_workers SET seen_at_us = "+nowUSSQL(postgres)+
		" WHERE worker_id = $1 AND holder = $2 RETURNING worker_id", id, self)
	if err != nil {
		return false, err
	}
	found := rows.Next()
	rows.Close()
	return found, rows.Err()
}

// forgetWorker removes the row w, only if it is still as judged (a worker
// that renewed its heartbeat since, or a new process under the same name,
// keeps its row).
func forgetWorker(ctx context.Context, r runner, w workerInfo) error {
	return r.exec(ctx, "DELETE FROM ratekeeper_task_workers WHERE worker_id = $1 AND holder = $2 AND seen_at_us = $3", w.ID, w.Holder, w.SeenUS)
}

// sameRowSQL is the condition, on a task update, that worker row w is
// still as judged; its parameters are numbered from n.
func sameRowSQL(n int) string {
	return fmt.Sprintf(" AND EXISTS (SELECT 1 FROM ratekeeper_task_workers WHERE worker_id = $%d AND holder = $%d AND seen_at_us = $%d)", n, n+1, n+2)
}

// ErrWorkerIDInUse: Work was given the name of a worker that still runs.
var ErrWorkerIDInUse = errors.New("worker id in use")

// working holds the (database, worker id) pairs this process works now,
// so that a second Work under a name this process already uses is
// refused like one of another process.
var working sync.Map

// enter makes worker id, run by process self, one of the database's
// workers: it refuses a name a live worker uses, takes back the tasks of
// the workers that are gone (an earlier process under this very name
// among them: its tasks must be taken back before this worker's row
// makes them look like its own), and records the worker. It returns the
// function that removes the worker when it stops.
func (b *riverBackend[TD, TTx]) enter(ctx context.Context, q *Queue, id, self string, types []string) (leave func(), err error) {
	key := q.name + "\x00" + id
	if _, dup := working.LoadOrStore(key, true); dup {
		return nil, fmt.Errorf("%w: this process already runs worker %q on %s", ErrWorkerIDInUse, id, q.name)
	}
	defer func() {
		if err != nil {
			working.Delete(key)
		}
	}()
	rows, nowUS, err := readWorkers(ctx, b.pool(), b.postgres, id)
	if err != nil {
		return nil, err
	}
	for _, w := range rows {
		if v := judgeWorker(w, nowUS, thisMachine); !v.gone && w.Holder != self {
			return nil, fmt.Errorf("%w: worker %q runs on %s (its heartbeat is %s old); give each worker its own id",
				ErrWorkerIDInUse, id, describeHolder(w.Holder), (time.Duration(nowUS-w.SeenUS) * time.Microsecond).Round(time.Second))
		}
	}
	if _, err := b.takeBack(ctx, q, self); err != nil {
		return nil, err
	}
	if err := announceWorker(ctx, b.pool(), b.postgres, id, self, types); err != nil {
		return nil, fmt.Errorf("record worker %s: %w", id, err)
	}
	return func() {
		bye, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = forgetOwn(bye, b.pool(), id, self)
		working.Delete(key)
	}, nil
}

// forgetOwn removes worker id's row if process self still holds it.
func forgetOwn(ctx context.Context, r runner, id, self string) error {
	return r.exec(ctx, "DELETE FROM ratekeeper_task_workers WHERE worker_id = $1 AND holder = $2", id, self)
}

// describeHolder names a holder's process for a message.
func describeHolder(s string) string {
	id, ok := holder.Parse(s)
	if !ok {
		return "a process of an older version"
	}
	return fmt.Sprintf("PID %d on %s", id.PID, id.Host)
}

// takeBack returns to pending, at once, the running tasks of every worker
// that is gone but self's, and forgets those workers. It returns the ids
// of the tasks taken back.
func (b *riverBackend[TD, TTx]) takeBack(ctx context.Context, q *Queue, self string) ([]int64, error) {
	rows, nowUS, err := readWorkers(ctx, b.pool(), b.postgres, "")
	if err != nil {
		return nil, err
	}
	gone := map[string]workerVerdict{}
	for id, v := range judgeWorkers(rows, nowUS, thisMachine) {
		if v.gone && v.row.Holder != self {
			gone[id] = v
		}
	}
	if len(gone) == 0 {
		return nil, nil
	}
	ids, err := b.reclaim(ctx, func(worker string) (workerVerdict, bool) {
		v, ok := gone[worker]
		return v, ok
	}, time.Now())
	if err != nil {
		return ids, fmt.Errorf("take back the tasks of workers that are gone: %w", err)
	}
	for _, v := range gone {
		if err := forgetWorker(ctx, b.pool(), v.row); err != nil {
			return ids, fmt.Errorf("forget worker %s: %w", v.row.ID, err)
		}
	}
	if len(ids) > 0 {
		// A warning: a worker died with work in hand.
		q.metrics.takenBack.Add(float64(len(ids)))
		var names []string
		for _, v := range gone {
			names = append(names, v.row.ID+" ("+v.reason+")")
		}
		slices.Sort(names)
		q.opts.Logger.Warn("tasks: took back at once the running tasks of workers that are gone", "tasks", len(ids), "workers", strings.Join(names, ", "))
	}
	return ids, nil
}
