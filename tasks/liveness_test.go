package tasks

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/holder"
)

func TestJudgeWorker(t *testing.T) {
	procs := processTable{
		local: func(s string) bool { return strings.HasPrefix(s, "here/") },
		gone:  func(s string) bool { return strings.HasSuffix(s, "/ended") },
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) int64 { return now.Add(-d).UnixMicro() }
	for _, c := range []struct {
		name   string
		w      workerInfo
		reason string // "" for not gone
	}{
		{"this machine, process runs, heartbeat long silent", workerInfo{Holder: "here/b/7/s", SeenUS: ago(time.Hour)}, ""},
		{"this machine, process ended a moment ago", workerInfo{Holder: "here/b/7/ended", SeenUS: ago(time.Second)}, "its process (PID 7) has ended"},
		{"another machine, heartbeat fresh", workerInfo{Holder: "there/b/7/s", SeenUS: ago(50 * time.Second)}, ""},
		{"another machine, heartbeat at the limit", workerInfo{Holder: "there/b/7/s", SeenUS: ago(HeartbeatTimeout)}, ""},
		{"another machine, heartbeat silent too long", workerInfo{Holder: "there/b/7/s", SeenUS: ago(HeartbeatTimeout + time.Second)},
			"it has renewed no heartbeat for 1m1s (a worker on there)"},
		{"an older version's row, silent", workerInfo{SeenUS: ago(2 * time.Minute)}, "it has renewed no heartbeat for 2m0s"},
		{"an older version's row, fresh", workerInfo{SeenUS: ago(time.Second)}, ""},
	} {
		v := judgeWorker(c.w, now.UnixMicro(), procs)
		if v.gone != (c.reason != "") || v.reason != c.reason {
			t.Errorf("%s: gone %v, %q; want %q", c.name, v.gone, v.reason, c.reason)
		}
	}
}

// endedProcess returns the holder of a process of this machine that has
// ended.
func endedProcess(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	me := holder.Self()
	return holder.ID{Host: me.Host, Boot: me.Boot, PID: cmd.ProcessState.Pid()}.String()
}

// otherMachine is the holder of a process of another machine.
const otherMachine = "elsewhere.example/boot/4242/99"

// recordWorker writes a worker row as a worker run by process h would
// have, its last heartbeat at seen.
func recordWorker(t *testing.T, q *Queue, id, h string, seen time.Time) {
	t.Helper()
	b := rawBackend(q).(interface{ pool() runner })
	if err := b.pool().exec(ctxT(t), "INSERT INTO ratekeeper_task_workers (worker_id, types, holder, started_at_us, seen_at_us) VALUES ($1, 't.g', $2, $3, $3)",
		id, h, seen.UnixMicro()); err != nil {
		t.Fatal(err)
	}
}

// claimAs makes task id running, claimed by worker, as River's claim does.
func claimAs(t *testing.T, q *Queue, dsn string, id int64, worker string) {
	t.Helper()
	b := rawBackend(q).(interface{ pool() runner })
	claim := "UPDATE river_job SET state = 'running', attempt = attempt + 1, attempted_at = datetime('now', 'subsec'), attempted_by = json_array($2) WHERE id = $1"
	if strings.HasPrefix(dsn, "postgres") {
		claim = "UPDATE river_job SET state = 'running', attempt = attempt + 1, attempted_at = now(), attempted_by = ARRAY[$2::text] WHERE id = $1"
	}
	if err := b.pool().exec(ctxT(t), claim, id, worker); err != nil {
		t.Fatal(err)
	}
}

func workerIDs(t *testing.T, q *Queue) []string {
	t.Helper()
	rows, _, err := q.b.workers(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, w := range rows {
		ids = append(ids, w.ID)
	}
	return ids
}

// A worker that starts takes back at once the running tasks of the
// workers that are gone — one of this machine whose process ended, one of
// another machine silent for longer than HeartbeatTimeout — and of no
// other: not those of a live process here, however silent, nor those of
// another machine that renews its heartbeat.
func TestWorkerTakesBackTheTasksOfGoneWorkersAtStart(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		h := &scripted{steps: []step{succeed(`"ok"`)}}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.g": h.handle}))
		now := time.Now()
		workers := []struct {
			id, holder string
			seen       time.Time
		}{
			{"w-ended", endedProcess(t), now},
			{"w-silent", otherMachine, now.Add(-HeartbeatTimeout - 5*time.Second)},
			{"w-remote", otherMachine, now.Add(-5 * time.Second)},
			{"w-here", holder.Self().String(), now.Add(-time.Hour)},
		}
		task := map[string]int64{}
		for _, w := range workers {
			recordWorker(t, q, w.id, w.holder, w.seen)
			task[w.id] = mustSubmit(t, q, "t.g", `{"of":"`+w.id+`"}`, SubmitOptions{})
			claimAs(t, q, dsn, task[w.id], w.id)
		}
		list, err := q.List(ctxT(t), Filter{State: StateRunning})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range list {
			gone := tk.Worker == "w-ended" || tk.Worker == "w-silent"
			if (tk.WorkerGone != "") != gone {
				t.Errorf("task of %s: WorkerGone %q, want it said: %v", tk.Worker, tk.WorkerGone, gone)
			}
		}

		startWorker(t, q, WorkOptions{WorkerID: "w-new"})
		for worker, reason := range map[string]string{"w-ended": "its process (PID ", "w-silent": "it has renewed no heartbeat for 1m"} {
			done := mustAwait(t, q, task[worker])
			if done.State != StateCompleted || done.Attempt != 2 || done.RetryCount != 0 || done.RescheduleCount != 0 {
				t.Errorf("task of %s = %+v, want completed on attempt 2 with nothing counted", worker, done)
			}
			evs := history(t, q, task[worker], EventCompleted)
			wantKinds(t, evs, EventCreated, EventClaimed, EventReclaimed, EventClaimed, EventCompleted)
			if !strings.Contains(evs[2].String(), "by worker "+worker+" taken back: "+reason) || evs[3].Worker != "w-new" {
				t.Errorf("task of %s: %s / %s", worker, evs[2], evs[3])
			}
		}
		for _, worker := range []string{"w-remote", "w-here"} {
			got, err := q.Get(ctxT(t), task[worker])
			if err != nil {
				t.Fatal(err)
			}
			if got.State != StateRunning || got.Worker != worker || got.WorkerGone != "" {
				t.Errorf("task of live worker %s = %+v, want still running", worker, got)
			}
		}
		if ids := strings.Join(workerIDs(t, q), " "); ids != "w-here w-new w-remote" {
			t.Errorf("workers %s, want the gone ones forgotten", ids)
		}
	})
}

// Cancelling a running task whose worker is gone takes effect at once;
// one whose worker lives is asked to stop.
func TestCancelOfAGoneWorkersTaskIsAtOnce(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		q := openQueue(t, dsn, testOptions())
		recordWorker(t, q, "w-ended", endedProcess(t), time.Now())
		recordWorker(t, q, "w-remote", otherMachine, time.Now())
		orphan := mustSubmit(t, q, "t.g", `{}`, SubmitOptions{})
		claimAs(t, q, dsn, orphan, "w-ended")
		live := mustSubmit(t, q, "t.g", `{}`, SubmitOptions{})
		claimAs(t, q, dsn, live, "w-remote")

		got, err := q.Cancel(ctxT(t), orphan)
		if err != nil || got.State != StateCancelled {
			t.Fatalf("Cancel = %+v, %v; want cancelled at once", got, err)
		}
		wantKinds(t, history(t, q, orphan, EventCancelled), EventCreated, EventClaimed, EventReclaimed, EventCancelled)
		if got, err := q.Cancel(ctxT(t), live); err != nil || got.State != StateRunning {
			t.Fatalf("Cancel of a live worker's task = %+v, %v; want still running, cancel requested", got, err)
		}
	})
}

// A name a live worker uses is refused; the name of a worker whose
// process ended is taken over, after its tasks were taken back (else they
// would look like the new worker's own).
func TestWorkerNamesAreOnePerLiveWorker(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		h := &scripted{steps: []step{succeed(`"ok"`)}}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.g": h.handle}))
		recordWorker(t, q, "w-remote", otherMachine, time.Now())
		err := q.Work(ctxT(t), WorkOptions{WorkerID: "w-remote"})
		if !errors.Is(err, ErrWorkerIDInUse) || !strings.Contains(err.Error(), "PID 4242 on elsewhere.example") {
			t.Fatalf("Work under a live worker's name: %v, want ErrWorkerIDInUse naming its process", err)
		}

		recordWorker(t, q, "w-1", endedProcess(t), time.Now())
		id := mustSubmit(t, q, "t.g", `{}`, SubmitOptions{})
		claimAs(t, q, dsn, id, "w-1")
		stop := startWorker(t, q, WorkOptions{WorkerID: "w-1"})
		evs := history(t, q, id, EventCompleted)
		wantKinds(t, evs, EventCreated, EventClaimed, EventReclaimed, EventClaimed, EventCompleted)

		ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
		defer cancel()
		if err := q.Work(ctx, WorkOptions{WorkerID: "w-1"}); !errors.Is(err, ErrWorkerIDInUse) {
			t.Fatalf("a second Work under the name this process works: %v, want ErrWorkerIDInUse", err)
		}
		stop()
		if ids := strings.Join(workerIDs(t, q), " "); ids != "w-remote" {
			t.Errorf("workers after the stop: %s, want w-1 gone", ids)
		}
	})
}

// A running worker takes back, at its next heartbeat, the tasks of a
// worker that has gone since it started.
func TestRunningWorkerTakesBackAtItsHeartbeat(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		h := &scripted{steps: []step{succeed(`"ok"`)}}
		opts := withHandlers(map[string]HandlerFunc{"t.g": h.handle})
		opts.heartbeatEvery = 20 * time.Millisecond
		q := openQueue(t, dsn, opts)
		// Claimed before the worker starts, by a worker it knows nothing
		// of yet: nothing to take back at its start.
		id := mustSubmit(t, q, "t.g", `{}`, SubmitOptions{})
		claimAs(t, q, dsn, id, "w-ended")
		startWorker(t, q, WorkOptions{WorkerID: "w-live"})
		eventually(t, func() (bool, string) {
			ids := workerIDs(t, q)
			return len(ids) == 1, strings.Join(ids, " ")
		})
		recordWorker(t, q, "w-ended", endedProcess(t), time.Now())
		if done := mustAwait(t, q, id); done.State != StateCompleted || done.Worker != "w-live" {
			t.Fatalf("task = %+v, want completed by w-live", done)
		}
	})
}

// A worker whose row another process removed (it was judged gone: its
// heartbeat went unrenewed too long) stops, saying why.
func TestWorkerTakenForGoneStops(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		opts := testOptions()
		opts.heartbeatEvery = 20 * time.Millisecond
		q := openQueue(t, dsn, opts)
		done := make(chan error, 1)
		go func() { done <- q.Work(ctxT(t), WorkOptions{WorkerID: "w-z"}) }()
		eventually(t, func() (bool, string) {
			ids := workerIDs(t, q)
			return len(ids) == 1, strings.Join(ids, " ")
		})
		b := rawBackend(q).(interface{ pool() runner })
		if err := b.pool().exec(ctxT(t), "DELETE FROM ratekeeper_task_workers"); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "took it for gone") {
				t.Fatalf("Work = %v, want it stopped as taken for gone", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the worker did not stop")
		}
	})
}
