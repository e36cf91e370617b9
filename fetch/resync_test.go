package fetch_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/sim"
)

// resync is what re-syncing a batch cost and gave: requests charged (the
// "who am I" requests apart), lines repeating the previous answer.
type resync struct {
	charged, whoAmI, unchanged, identical int
	elapsed                               time.Duration
}

func text(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}

// runResync fetches n repositories with two tokens, changes `changed` of
// them, and fetches the list again with --since the first output through
// a new client whose tokens are two others of the same users (rotated).
func runResync(tb testing.TB, n, changed int) resync {
	tb.Helper()
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: sim.DialectGitHub, Prefix: "/github",
		Limit: 100_000, Window: time.Hour, Secondary: &sim.SecondaryConfig{}, Tokens: []sim.TokenConfig{
			{Token: "tok-alice-1", Owner: "alice"}, {Token: "tok-bob-1", Owner: "bob"},
			{Token: "tok-alice-2", Owner: "alice"}, {Token: "tok-bob-2", Owner: "bob"}}}}})
	if err != nil {
		tb.Fatal(err)
	}
	var whoAmI atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/github/user" {
			whoAmI.Add(1)
		}
		srv.ServeHTTP(w, r)
	}))
	defer ts.Close()
	var urls []string
	for i := range n {
		urls = append(urls, fmt.Sprintf("%s/github/repos/sync/repo-%d", ts.URL, i))
	}
	dir := tb.TempDir()
	run := func(tokens []string, prev []byte) (fetch.Summary, []byte) {
		tr, err := ratekeeper.NewTransport(ratekeeper.Options{Providers: []string{"github=" + ts.URL + "/github"},
			Tokens: map[string][]string{"github": tokens}, MaxWait: 30 * time.Second})
		if err != nil {
			tb.Fatal(err)
		}
		defer tr.Close()
		targets, err := fetch.Plan(fetch.ArgEntries(urls), "arguments", false, tr.Registry())
		if err != nil {
			tb.Fatal(err)
		}
		if prev != nil {
			p, err := fetch.ReadPrevious(bytes.NewReader(prev))
			if err != nil {
				tb.Fatal(err)
			}
			if k := fetch.Resync(targets, p); k != n {
				tb.Fatalf("%d of %d targets revalidate", k, n)
			}
		}
		var out bytes.Buffer
		sum, err := fetch.Run(context.Background(), targets, fetch.Options{DSN: filepath.Join(dir, "rk.db"),
			Client: &http.Client{Transport: tr}, Output: fetch.NewStream(&out, "stdout"), Concurrency: 20,
			BodyDir: filepath.Join(dir, "bodies"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil || sum.Written != n || sum.Failed != 0 {
			tb.Fatalf("%+v, %v", sum, err)
		}
		return sum, out.Bytes()
	}
	_, first := run([]string{"tok-alice-1", "tok-bob-1"}, nil)
	for i := range changed {
		if err := srv.Touch(fmt.Sprintf("/github/repos/sync/repo-%d", i*(n/changed))); err != nil {
			tb.Fatal(err)
		}
	}
	before, asked := srv.Stats().Total.Charged, whoAmI.Load()
	start := time.Now()
	sum, second := run([]string{"tok-alice-2", "tok-bob-2"}, first)
	res := resync{whoAmI: int(whoAmI.Load() - asked), unchanged: sum.Unchanged, elapsed: time.Since(start)}
	res.charged = int(srv.Stats().Total.Charged-before) - res.whoAmI
	old := map[string]fetch.Record{}
	for _, r := range parseRecords(tb, first) {
		old[r.URL] = r
	}
	for _, r := range parseRecords(tb, second) {
		p := old[r.URL]
		same := r.Status == p.Status && r.ETag == p.ETag && r.SHA256 == p.SHA256 && r.Size == p.Size &&
			text(r.Body) == text(p.Body) && r.BodyFile == p.BodyFile
		if r.NotModified && same {
			res.identical++
		}
		if r.NotModified != same {
			tb.Errorf("%s: not_modified %v but the answer is the same: %v", r.URL, r.NotModified, same)
		}
	}
	return res
}

// A re-sync with rotated tokens pays only for what changed, and every
// unchanged line repeats the previous run's answer.
func TestResyncPaysOnlyForChange(t *testing.T) {
	got := runResync(t, 60, 6)
	if got.charged != 6 || got.unchanged != 54 || got.identical != 54 || got.whoAmI > 2 {
		t.Errorf("%+v: want 6 charged (and at most a \"who am I\" per token), 54 unchanged lines identical to the previous run's", got)
	}
}

// BenchmarkResync: 1,000 URLs of which 30 changed, re-synced with tokens
// rotated since the first run. A perfect client is charged 30.
//
//	go test -run '^$' -bench Resync -benchtime 1x ./fetch/
func BenchmarkResync(b *testing.B) {
	for range b.N {
		got := runResync(b, 1000, 30)
		b.ReportMetric(float64(got.charged), "charged")
		b.ReportMetric(float64(got.whoAmI), "who-am-I")
		b.ReportMetric(float64(got.unchanged), "unchanged")
		b.ReportMetric(float64(got.identical), "identical-lines")
		b.ReportMetric(got.elapsed.Seconds(), "resync-s")
	}
}
