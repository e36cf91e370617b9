package tasks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/tasks"
)

// Handlers are registered once, when the program starts.
func init() {
	tasks.Handle("example.report", report)
}

// report is not ready before its third round. Instead of sleeping it gives
// its worker back with Reschedule: the task returns to pending, survives
// restarts, and counts a reschedule, not a retry. (A handler whose HTTP
// client returns an error with RetryAt() gets the same, automatically.)
func report(ctx context.Context, t *tasks.Task) (json.RawMessage, error) {
	if t.RescheduleCount < 2 {
		return nil, tasks.Reschedule(0) // 0: behind every task already waiting
	}
	return json.RawMessage(`{"ready":true}`), nil
}

func Example() {
	dir, err := os.MkdirTemp("", "tasks-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	q, err := tasks.Open(ctx, filepath.Join(dir, "ratekeeper.db"), tasks.Options{})
	if err != nil {
		panic(err)
	}
	defer q.Close()

	id, err := q.Submit(ctx, "example.report", json.RawMessage(`{"day":"2025-06-01"}`), tasks.SubmitOptions{MaxReschedules: 10})
	if err != nil {
		panic(err)
	}
	workCtx, stop := context.WithCancel(ctx)
	worked := make(chan error)
	go func() { worked <- q.Work(workCtx, tasks.WorkOptions{WorkerID: "example"}) }()
	t, err := q.Await(ctx, id)
	stop()
	if err := <-worked; err != nil {
		panic(err)
	}
	if err != nil {
		panic(err)
	}
	fmt.Println(t.State, string(t.Result))
	fmt.Printf("reschedule_count: %d, max_reschedules: %d, retry_count: %d\n", t.RescheduleCount, t.MaxReschedules, t.RetryCount)
	history, err := q.History(ctx, id)
	if err != nil {
		panic(err)
	}
	for _, e := range history {
		fmt.Println(e)
	}
	// Output:
	// completed {"ready":true}
	// reschedule_count: 2, max_reschedules: 10, retry_count: 0
	// created
	// claimed by worker example (attempt 1)
	// rescheduled +0s (count 1)
	// claimed by worker example (attempt 2)
	// rescheduled +0s (count 2)
	// claimed by worker example (attempt 3)
	// completed
}

// A worker whose http tasks go through ratekeeper's rate-limit-aware
// client: tokens from the environment, pacing and quota state shared with
// every ratekeeper process on the database, and waits for quota beyond
// MaxWait turned into durable reschedules until the quota returns.
func ExampleOptions_rateLimitAwareClient() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	const db = "ratekeeper.db" // tasks and quota state; or a postgres:// URL for a fleet
	tr, err := ratekeeper.NewTransport(ratekeeper.Options{DB: db, MaxWait: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	defer tr.Close()
	q, err := tasks.Open(ctx, db, tasks.Options{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		panic(err)
	}
	defer q.Close()
	if err := q.Work(ctx, tasks.WorkOptions{Concurrency: 10}); err != nil {
		panic(err)
	}
}

// The built-in http task through ratekeeper's client: its request is
// paced with the client's others, and a wait for quota longer than the
// client's MaxWait reschedules the task until the quota returns instead of
// blocking the worker.
func ExampleQueue_Submit_http() {
	srv, _ := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: 100, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-example-1", Owner: "octocat"}}}}})
	api := httptest.NewServer(srv) // a simulated GitHub on loopback
	defer api.Close()

	dir, err := os.MkdirTemp("", "tasks-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	client := ratekeeper.NewClient(ratekeeper.Options{
		Providers: []string{"github=" + api.URL},
		Tokens:    map[string][]string{"github": {"tok-example-1"}},
		MaxWait:   30 * time.Second,
	})
	q, err := tasks.Open(ctx, filepath.Join(dir, "ratekeeper.db"), tasks.Options{HTTPClient: client})
	if err != nil {
		panic(err)
	}
	defer q.Close()

	input, _ := json.Marshal(map[string]string{"url": api.URL + "/repos/golang/go"})
	id, err := q.Submit(ctx, "http", input, tasks.SubmitOptions{})
	if err != nil {
		panic(err)
	}
	workCtx, stop := context.WithCancel(ctx)
	worked := make(chan error)
	go func() { worked <- q.Work(workCtx, tasks.WorkOptions{WorkerID: "example"}) }()
	t, err := q.Await(ctx, id)
	stop()
	if err := <-worked; err != nil {
		panic(err)
	}
	if err != nil {
		panic(err)
	}
	var result tasks.HTTPResult
	if err := json.Unmarshal(t.Result, &result); err != nil || result.Body == nil {
		panic(fmt.Sprint(err, string(t.Result)))
	}
	var repo struct {
		FullName string `json:"full_name"`
	}
	if err := json.Unmarshal([]byte(*result.Body), &repo); err != nil {
		panic(err)
	}
	fmt.Println(t.State, result.Status, repo.FullName, result.Headers.Get("X-Ratekeeper-Credential"))
	// Output:
	// completed 200 golang/go #1 …e-1
}
