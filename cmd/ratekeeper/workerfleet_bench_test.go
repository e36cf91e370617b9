package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// BenchmarkWorkerFleet runs FetchFleet's batch (1,500 URLs, 9 tokens of 6
// users, 60 per user per fixed 5 s window, 20 ms answers) as http tasks
// submitted to one database and worked by 8 `ratekeeper tasks worker`
// processes started together, 50 ms after a window opens, each with the
// default --concurrency (10 requests in flight, 80 tasks claimed). It is
// the fleet of the durable face: each worker claims 8 tasks per request
// in flight, so 8 workers may claim up to 640 of the batch's tasks while
// one window serves 360, and the rest wait in their scheduler or sleep
// durably. The makespan runs from the start to the last task's recorded
// completion (River records it up to 250 ms after the answer); the ideal
// is FetchFleet's for 80 in flight (19.97 s). It fails unless every task
// completed with a 200 and the server served each URL once.
//
//	go test ./cmd/ratekeeper -run '^$' -bench WorkerFleet -benchtime 1x -count 3
func BenchmarkWorkerFleet(b *testing.B) {
	for _, c := range []struct {
		name string
		db   func(b *testing.B) string
	}{
		{"sqlite-8", func(b *testing.B) string { return filepath.Join(b.TempDir(), "rk.db") }},
		{"postgres-8", func(b *testing.B) string {
			return storetest.NewPostgresDatabaseOn(b, fleetPostgresBase(b), "rk_wfleet_")
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				s := startFitSim(b, fleetOwners, fleetLimit, fleetWindow)
				r := workerFleet(b, s, c.db(b), fleetProcs)
				r.report(b, s, fleetIdeal(fleetProcs*fitWorkers))
			}
		})
	}
}

// workerFleet submits the batch as http tasks to db, starts procs task
// workers together just after a window opens, and returns once every
// task has completed, the workers stopped.
func workerFleet(b *testing.B, s *fitSim, db string, procs int) fleetRun {
	dir := b.TempDir()
	var inputs strings.Builder
	for u := range fleetURLs {
		raw, err := json.Marshal(tasks.HTTPInput{URL: fmt.Sprintf("%s/repos/o/r%03d", s.URL, u)})
		if err != nil {
			b.Fatal(err)
		}
		inputs.Write(raw)
		inputs.WriteByte('\n')
	}
	input := filepath.Join(dir, "tasks.jsonl")
	if err := os.WriteFile(input, []byte(inputs.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	mustRun(b, nil, "tasks", "--db", db, "submit", "-t", "http", "--jsonl", "-i", "@"+input)
	q := openTasks(b, db)

	env := []string{"GITHUB_TOKEN=" + strings.Join(s.tokens, ",")}
	r := fleetRun{ends: make([]time.Time, procs)}
	r.start = atWindowStart(fleetWindow)
	ps := make([]*process, procs)
	pids := make([]int, procs)
	for i := range procs {
		ps[i] = startProcess(b, env, "tasks", "worker", "--db", db, "--provider", "github="+s.URL,
			"--concurrency", fmt.Sprint(fitWorkers))
		pids[i] = ps[i].cmd.Process.Pid
	}
	stopWatch := watchSockets(pids)
	// Wait on the simulator, not the database: reading the tasks while
	// the workers run would take from their CPU.
	for deadline := time.Now().Add(3 * time.Minute); s.srv.Stats().Total.Charged < fleetURLs; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("the server charged %d of %d after 3 minutes\n%s", s.srv.Stats().Total.Charged, fleetURLs, allOutput(ps))
		}
	}
	all := awaitAllFinal(b, q, func() string { return allOutput(ps) })
	r.sender = stopWatch()
	for i, p := range ps {
		p.stop(b)
		r.ends[i] = time.Now()
	}
	for _, t := range all {
		var res tasks.HTTPResult
		if t.State != tasks.StateCompleted || json.Unmarshal(t.Result, &res) != nil || res.Status != 200 {
			b.Errorf("task %d: %s %s", t.ID, t.State, t.Result)
			continue
		}
		if t.FinishedAt != nil && t.FinishedAt.After(r.end) {
			r.end = *t.FinishedAt
		}
	}
	if len(all) != fleetURLs {
		b.Errorf("%d tasks, want %d", len(all), fleetURLs)
	}
	served := map[string]int{}
	for _, q := range s.requests() {
		if q.status == 200 {
			served[q.path]++
		}
	}
	for u := range fleetURLs {
		if h := served[fmt.Sprintf("/github/repos/o/r%03d", u)]; h != 1 {
			b.Errorf("URL %d served %d times, want once", u, h)
		}
	}
	// The processes' ends are when the benchmark stopped them: the
	// makespan is the tasks' (r.end), not theirs.
	for i := range r.ends {
		r.ends[i] = r.end
	}
	return r
}
