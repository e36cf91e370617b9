package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Reclaim puts back to pending, at once, the running tasks whose latest
// attempt was claimed by a worker that gone reports as gone, and returns
// their ids. It is for a caller that can prove a worker's process ended
// by its own means — `ratekeeper fetch` holds the lock its killed
// predecessor held — before any worker of its starts. (Work itself takes
// back the tasks of the workers whose rows say they are gone: see
// HeartbeatTimeout.) Reclaiming the task of a live worker would run it
// twice: never guess.
//
// The attempt is recorded as reclaimed, with reason, and counts neither
// as a retry nor as a reschedule: the task did nothing wrong. The task
// keeps its place in line (its available time is unchanged). A task whose
// cancel was requested while it ran is cancelled at its next claim.
func (q *Queue) Reclaim(ctx context.Context, reason string, gone func(worker string) bool) ([]int64, error) {
	ids, err := q.b.reclaim(ctx, func(worker string) (workerVerdict, bool) {
		return workerVerdict{gone: true, reason: reason}, gone(worker)
	}, time.Now())
	if err != nil {
		return ids, fmt.Errorf("reclaim tasks in %s: %w", q.name, err)
	}
	return ids, nil
}

// reclaim takes back every running task whose latest claim's worker
// judged says is gone. A verdict that carries a worker row (row.ID set)
// takes a task back only while that row is as it was judged.
func (b *riverBackend[TD, TTx]) reclaim(ctx context.Context, judged func(worker string) (workerVerdict, bool), now time.Time) ([]int64, error) {
	const page = 1000
	var (
		ids   []int64
		after int64
	)
	for {
		p := river.NewJobListParams().Where(oursSQL).States(rivertype.JobStateRunning).
			OrderBy(river.JobListOrderByID, river.SortOrderAsc).First(page).
			Where("id > @after_id", river.NamedArgs{"after_id": after})
		res, err := b.client.JobList(ctx, p)
		if err != nil {
			return ids, err
		}
		for _, row := range res.Jobs {
			after = row.ID
			worker := attemptedBy(row, 0)
			v, ok := judged(worker)
			if worker == "" || !ok {
				continue
			}
			var done bool
			err := b.inTx(ctx, func(_ TTx, r runner) (err error) {
				done, err = b.reclaimIn(ctx, r, row, worker, v, now)
				return err
			})
			if err != nil {
				return ids, fmt.Errorf("task %d: %w", row.ID, err)
			}
			if done {
				ids = append(ids, row.ID)
			}
		}
		if len(res.Jobs) < page {
			return ids, nil
		}
	}
}

// reclaimIn makes the running row available again as River's snooze
// would, and records the attempt's claim and its end, through r (a
// transaction). It reports false when the row changed since it was read
// (the task is no longer that worker's attempt), or when the worker's row
// changed since it was judged gone.
func (b *riverBackend[TD, TTx]) reclaimIn(ctx context.Context, r runner, row *rivertype.JobRow, worker string, v workerVerdict, now time.Time) (bool, error) {
	patch, events, err := reclaimed(row, worker, v.reason, now)
	if err != nil {
		return false, err
	}
	// A snooze in River's terms: the attempt is given back (attempt − 1)
	// and counted in metadata.snoozes; our record says it was an
	// interruption, not a reschedule. The guard is the claim itself: the
	// same attempt by the same (gone) worker, still running.
	// (SQLite's JSON path is a parameter: its $ would read as one.)
	query := `UPDATE river_job SET state = 'available', attempt = attempt - 1, metadata = json_patch(metadata, json($1))
WHERE id = $2 AND state = 'running' AND attempt = $3 AND json_extract(attempted_by, $5) = $4`
	args := []any{string(patch), row.ID, row.Attempt, worker, "$[#-1]"}
	if b.postgres {
		query = `UPDATE river_job SET state = 'available', attempt = attempt - 1, metadata = metadata || $1::jsonb
WHERE id = $2 AND state = 'running' AND attempt = $3 AND attempted_by[array_length(attempted_by, 1)] = $4`
		args = args[:4]
	}
	if v.row.ID != "" {
		// The worker's row must still be the one judged gone: a worker of
		// another machine whose heartbeat came back, or a new process
		// that took the same name, keeps its tasks.
		query += sameRowSQL(len(args) + 1)
		args = append(args, v.row.ID, v.row.Holder, v.row.SeenUS)
	}
	rows, err := r.query(ctx, query+" RETURNING id", args...)
	if err != nil {
		return false, err
	}
	done := rows.Next()
	rows.Close()
	if err := rows.Err(); err != nil || !done {
		return false, err
	}
	return true, insertEvents(ctx, r, events)
}

// reclaimed works out what reclaiming the running row, claimed by worker,
// writes: the metadata patch (River's snooze count and our record) and the
// events of the attempt. Pure.
func reclaimed(row *rivertype.JobRow, worker, reason string, now time.Time) (json.RawMessage, []Event, error) {
	t, rec, err := taskFromRow(row)
	if err != nil {
		return nil, nil, err
	}
	meta, _, err := decodeMeta(row)
	if err != nil {
		return nil, nil, err
	}
	claimedAt := now
	if row.AttemptedAt != nil {
		claimedAt = *row.AttemptedAt
	}
	events := claimEvents(row, t, &rec, claimedAt)
	events = append(events, Event{TaskID: t.ID, At: now, Kind: EventReclaimed, Attempt: t.Attempt, Worker: worker,
		Message: reason, RescheduleCount: t.RescheduleCount, RetryCount: rec.Retries, Key: fmt.Sprintf("end-%d", t.Attempt)})
	rec.Interrupted++
	rec.Claims = t.Attempt
	rec.UpdatedAt = now
	if rec.Outbox == nil {
		rec.Outbox = []Event{}
	}
	patch, err := json.Marshal(map[string]any{"snoozes": meta.Snoozes + 1, "output": rec})
	return patch, events, err
}
