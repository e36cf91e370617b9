package tasks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/tasks"
	"github.com/ratekeeper/ratekeeper/transport"
)

// TestWorkerRidesOutAQuotaStateOutage: for each class of transient error,
// on SQLite and PostgreSQL, a worker whose http tasks' client keeps its
// quota state in the database meets an outage of it (every reservation
// fails for a while): it does not take that for a fault of this machine
// and stop, as it did when the error reached the task; it waits, and every
// task completes once, with a 200.
func TestWorkerRidesOutAQuotaStateOutage(t *testing.T) {
	for _, k := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"SQLite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "w.db") }},
		{"PostgreSQL", func(t *testing.T) string { return storetest.NewPostgresDatabase(t, "rk_outage_") }},
	} {
		t.Run(k.name, func(t *testing.T) {
			for _, e := range storetest.TransientErrors(t) {
				t.Run(e.Name, func(t *testing.T) { workThroughOutage(t, k.dsn(t), e.Err) })
			}
		})
	}
}

func workThroughOutage(t *testing.T, dsn string, outageErr error) {
	ctx := context.Background()
	api, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: 1000, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-worker-outage", Owner: "alice"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	defer srv.Close()

	db, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	faulty := storetest.NewFaulty(db)
	clk := storetest.NewInstantWaits(time.Now())
	st := quotastate.New(store.WaitOutages(faulty, store.NewOutage(store.OutageOptions{Now: clk.Now, After: clk.After})), nil)
	defer st.Close(ctx)
	p, err := provider.New("github", provider.GitHub, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		t.Fatal(err)
	}
	tr, err := transport.New(transport.Options{
		Providers:      reg,
		Pools:          map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-worker-outage", "test"))},
		State:          st,
		Base:           tasks.WireTransport(nil),
		SkipValidation: true,
		DisableCache:   true,
		MaxWait:        time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()

	q, err := tasks.Open(ctx, dsn, tasks.Options{HTTPClient: &http.Client{Transport: tr}, WireMarked: true, BodyDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	const n = 20
	var ids []int64
	for i := range n {
		id, err := q.Submit(ctx, tasks.HTTPType, json.RawMessage(fmt.Sprintf(`{"url":%q}`, fmt.Sprintf("%s/repos/o/r%d", srv.URL, i))), tasks.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	faulty.Fail(outageErr, 40) // the first reservations meet a database that is away

	workCtx, stop := context.WithCancel(ctx)
	awaitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	worked := make(chan error, 1)
	go func() {
		worked <- q.Work(workCtx, tasks.WorkOptions{Concurrency: 4, WorkerID: "outage-worker"})
		cancel() // a worker that stops completes nothing more
	}()
	for _, id := range ids {
		task, err := q.Await(awaitCtx, id)
		if err != nil {
			select {
			case werr := <-worked:
				t.Fatalf("the worker stopped during the outage: %v", werr)
			default:
			}
			t.Fatalf("task %d: %v", id, err)
		}
		if task.State != tasks.StateCompleted || task.Attempt != 1 {
			t.Errorf("task %d: %s after %d attempts; want completed at the first", id, task.State, task.Attempt)
		}
	}
	if failed, _ := faulty.Counts(); failed != 40 {
		t.Errorf("the database failed %d calls; want the outage's 40 met", failed)
	}
	stop()
	if err := <-worked; err != nil {
		t.Errorf("Work = %v; want nil", err)
	}
	if s := api.Stats(); s.Total.Requests != n {
		t.Errorf("%d requests reached the server; want %d, one a task", s.Total.Requests, n)
	}
}
