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
// their ids. It is for a caller that can prove a worker's process ended —
// `ratekeeper fetch` holds the lock its killed predecessor held — and so
// need not wait for River's rescuer, which must assume that a silent
// worker may still be working and waits out the task's timeout (then up
// to a minute more). Reclaiming the task of a live worker would run it
// twice: never guess.
//
// The attempt is recorded as reclaimed, with reason, and counts neither
// as a retry nor as a reschedule: the task did nothing wrong. The task
// keeps its place in line (its available time is unchanged). A task whose
// cancel was requested while it ran is cancelled at its next claim.
func (q *Queue) Reclaim(ctx context.Context, reason string, gone func(worker string) bool) ([]int64, error) {
	ids, err := q.b.reclaim(ctx, reason, gone, time.Now())
	if err != nil {
		return ids, fmt.Errorf("reclaim tasks in %s: %w", q.name, err)
	}
	return ids, nil
}

func (b *riverBackend[TD, TTx]) reclaim(ctx context.Context, reason string, gone func(string) bool, now time.Time) ([]int64, error) {
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
			if worker == "" || !gone(worker) {
				continue
			}
			done, err := b.reclaimRow(ctx, row, worker, reason, now)
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

// reclaimRow makes the running row available again as River's snooze
// would, and records the attempt's claim and its end, in one transaction.
// It reports false when the row changed since it was read (the task is no
// longer that worker's attempt).
func (b *riverBackend[TD, TTx]) reclaimRow(ctx context.Context, row *rivertype.JobRow, worker, reason string, now time.Time) (bool, error) {
	patch, events, err := reclaimed(row, worker, reason, now)
	if err != nil {
		return false, err
	}
	// A snooze in River's terms: the attempt is given back (attempt − 1)
	// and counted in metadata.snoozes; our record says it was an
	// interruption, not a reschedule. The guard is the claim itself: the
	// same attempt by the same (gone) worker, still running.
	// (SQLite's JSON path is a parameter: its $ would read as one.)
	query := `UPDATE river_job SET state = 'available', attempt = attempt - 1, metadata = json_patch(metadata, json($1))
WHERE id = $2 AND state = 'running' AND attempt = $3 AND json_extract(attempted_by, $5) = $4 RETURNING id`
	args := []any{string(patch), row.ID, row.Attempt, worker, "$[#-1]"}
	if b.postgres {
		query = `UPDATE river_job SET state = 'available', attempt = attempt - 1, metadata = metadata || $1::jsonb
WHERE id = $2 AND state = 'running' AND attempt = $3 AND attempted_by[array_length(attempted_by, 1)] = $4 RETURNING id`
		args = args[:4]
	}
	done := false
	err = b.inTx(ctx, func(_ TTx, r runner) error {
		rows, err := r.query(ctx, query, args...)
		if err != nil {
			return err
		}
		done = rows.Next()
		rows.Close()
		if err := rows.Err(); err != nil || !done {
			return err
		}
		return insertEvents(ctx, r, events)
	})
	return done && err == nil, err
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
