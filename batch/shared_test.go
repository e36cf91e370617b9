package batch_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/batch"
	"github.com/ratekeeper/ratekeeper/sim"
)

// With Options.DB the batch decides on the quota every process shares: a
// search another process spent makes the batch's search wait, while its
// core request goes.
func TestSharedStateDecides(t *testing.T) {
	srv, err := sim.New(sim.Config{Seed: 1, APIs: []sim.APIConfig{{Dialect: "github", Limit: 100, Window: time.Hour,
		Resources: map[string]sim.ResourceConfig{"search": {Limit: 1, Window: time.Hour}},
		Tokens:    []sim.TokenConfig{{Token: "tok-shared-1", Owner: "alice"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(srv)
	defer api.Close()
	opts := ratekeeper.Options{
		Providers: []string{"github=" + api.URL},
		Tokens:    map[string][]string{"github": {"tok-shared-1"}},
		DB:        filepath.Join(t.TempDir(), "quota.db"),
	}
	other, err := ratekeeper.NewTransport(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	resp, err := (&http.Client{Transport: other}).Get(api.URL + "/search/repositories?q=other")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	mine, err := ratekeeper.NewTransport(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFinished()
	b := ratekeeper.NewBatch(mine, ratekeeper.BatchOptions{InFlight: 2, OnResult: f.onResult})
	// The search waits an hour: once it waits for that, look, and stop.
	var progress batch.Progress
	go func() {
		defer cancel()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			p := b.Progress()
			if len(p.Waiting) == 1 && !p.Waiting[0].OnAnswer && p.Done == 1 {
				progress = p
				return
			}
		}
	}()
	b.Add(get(t, api.URL+"/search/repositories?q=mine"), ratekeeper.BatchKey("search"))
	b.Add(get(t, api.URL+"/repos/o/r"), ratekeeper.BatchKey("core"), ratekeeper.BatchPriority(3))
	if err := b.Run(ctx); err == nil {
		t.Fatal("Run ended without the cancel")
	}
	if r := f.res["core"]; r.Err != nil || r.Response.StatusCode != http.StatusOK {
		t.Errorf("core: %v", r.Err)
	}
	if len(progress.Waiting) != 1 || progress.Waiting[0].Resource != "search" || time.Until(progress.Waiting[0].Until) < 50*time.Minute {
		t.Errorf("progress %+v; want the search waiting for the hour the other process's search began", progress)
	}
	if r := f.res["search"]; r.Err == nil || r.Waits == 0 {
		t.Errorf("search: %v after %d waits; want it cancelled while it waited", r.Err, r.Waits)
	}
	st, _ := srv.Stats().BucketFor("github", "alice", "search")
	if st.Charged != 1 || st.PrimaryViolations != 0 {
		t.Errorf("search charged %d with %d refusals; want the other's 1 and none", st.Charged, st.PrimaryViolations)
	}
}
