package fetch_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/fetch"
)

// finalSnapshot keeps the snapshot a run finishes with.
type finalSnapshot struct {
	mu    sync.Mutex
	final fetch.Snapshot
}

func (f *finalSnapshot) Update(fetch.Snapshot) {}

func (f *finalSnapshot) Finish(s fetch.Snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.final = s
}

// TestFinalLinesShowTheLastAnswers: the per-credential lines a run ends
// with show the quota as the server last said it, not as the first look
// at the credentials found it (however recently that was).
func TestFinalLinesShowTheLastAnswers(t *testing.T) {
	s := githubSim(t, "tok-alice-1")
	tr := client(t, githubOpts(s.URL))
	out := filepath.Join(t.TempDir(), "results.jsonl")
	progress := &finalSnapshot{}
	run(t, sqliteDSN(t), tr, plan(t, tr, false, repoURLs(s.URL, 12)...), openJournal(t, out), func(o *fetch.Options) {
		o.Progress, o.Status, o.Providers = progress, tr.Status, []string{"github"}
		o.StatusInterval = time.Hour // read once at the first look, then only at the end
	})

	// The server's word (GET /rate_limit is free).
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/github/rate_limit", nil)
	req.Header.Set("Authorization", "token tok-alice-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var server struct {
		Resources struct {
			Core struct{ Limit, Remaining int64 }
		}
	}
	json.NewDecoder(resp.Body).Decode(&server)
	resp.Body.Close()

	progress.mu.Lock()
	defer progress.mu.Unlock()
	if len(progress.final.Credentials) != 1 {
		t.Fatalf("final credentials %+v", progress.final.Credentials)
	}
	shown := "none"
	for _, r := range progress.final.Credentials[0].Resources {
		if r.Resource == "core" && r.Remaining != nil && r.Limit != nil {
			if *r.Remaining == server.Resources.Core.Remaining && *r.Limit == server.Resources.Core.Limit {
				return
			}
			shown = fetch.FormatCredential(progress.final.Credentials[0])
		}
	}
	t.Errorf("final line %s; the server says core %d/%d", shown, server.Resources.Core.Remaining, server.Resources.Core.Limit)
}
