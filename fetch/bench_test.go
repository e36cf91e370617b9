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
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/sim"
)

// benchFetch runs batches of n URLs against api, a fresh database and
// output each time (opening, migrating and submitting included), and
// reports URLs/s, reschedules per URL and the server's violations.
//
// An empty policy sends the requests with a plain http.Client instead of
// the rate-keeping one: what the batch machinery alone can do.
//
// With stateInDB the client keeps its quota state and cache in the batch's
// database too, as `ratekeeper fetch --db` does.
func benchFetch(b *testing.B, dsn func(b *testing.B) string, api sim.APIConfig, tokens []string, policy string, maxWait time.Duration, n, concurrency int, stateInDB ...bool) {
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{api}})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	var urls []string
	for i := range n {
		urls = append(urls, fmt.Sprintf("%s/github/repos/bench/repo-%d", ts.URL, i))
	}
	var elapsed time.Duration
	reschedules := 0
	for i := 0; b.Loop(); i++ {
		db := dsn(b)
		opts := ratekeeper.Options{
			Providers: []string{"github=" + ts.URL + "/github"},
			Tokens:    map[string][]string{"github": tokens},
			Policy:    policy, MaxWait: maxWait,
		}
		if len(stateInDB) > 0 && stateInDB[0] {
			opts.DB = db
		}
		tr, err := ratekeeper.NewTransport(opts)
		if err != nil {
			b.Fatal(err)
		}
		targets, err := fetch.Plan(fetch.ArgEntries(urls), "arguments", false, tr.Registry())
		if err != nil {
			b.Fatal(err)
		}
		client := &http.Client{Transport: tr}
		if policy == "" {
			client = &http.Client{}
		}
		var out bytes.Buffer
		start := time.Now()
		sum, err := fetch.Run(context.Background(), targets, fetch.Options{
			DSN:         db,
			Client:      client,
			Output:      fetch.NewStream(&out, "stdout"),
			Concurrency: concurrency,
			Timeout:     maxWait + 30*time.Second,
			Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		elapsed += time.Since(start)
		tr.Close()
		if err != nil || sum.Failed != 0 || sum.Written != n {
			b.Fatalf("run %d: %+v, %v", i, sum, err)
		}
		for _, r := range parseRecords(b, out.Bytes()) {
			reschedules += r.Reschedules
		}
	}
	runs := float64(b.N)
	b.ReportMetric(float64(n)*runs/elapsed.Seconds(), "URLs/s")
	b.ReportMetric(float64(reschedules)/(float64(n)*runs), "reschedules/URL")
	b.ReportMetric(float64(srv.Stats().Total.Violations), "violations")
}

func benchSQLite(b *testing.B) string { return filepath.Join(b.TempDir(), "bench.db") }

// BenchmarkFetchUnbound: quota that does not bind — a large limit, and
// four owners, so that GitHub's secondary limit the client keeps (900
// points per endpoint per minute and owner) allows the 2,000 URLs in one
// burst: what fetch itself costs per URL.
func BenchmarkFetchUnbound(b *testing.B) {
	tokens := []string{"tok-alice-1", "tok-bob-1", "tok-carol-1", "tok-dave-1"}
	var tc []sim.TokenConfig
	for _, tok := range tokens {
		tc = append(tc, sim.TokenConfig{Token: tok})
	}
	api := sim.APIConfig{Dialect: sim.DialectGitHub, Prefix: "/github", Limit: 1_000_000, AnonymousLimit: 1_000_000, Window: time.Hour,
		Tokens: tc, Secondary: &sim.SecondaryConfig{}}
	pg := func(b *testing.B) string { return postgresDSN(b) }
	for _, c := range []int{10, 50} {
		b.Run(fmt.Sprintf("sqlite/concurrency=%d", c), func(b *testing.B) {
			benchFetch(b, benchSQLite, api, tokens, "greedy", 30*time.Second, 2000, c)
		})
		b.Run(fmt.Sprintf("sqlite/state-in-db/concurrency=%d", c), func(b *testing.B) {
			benchFetch(b, benchSQLite, api, tokens, "greedy", 30*time.Second, 2000, c, true)
		})
		b.Run(fmt.Sprintf("sqlite/plain-client/concurrency=%d", c), func(b *testing.B) {
			benchFetch(b, benchSQLite, api, tokens, "", 30*time.Second, 2000, c)
		})
	}
	b.Run("postgres/concurrency=50", func(b *testing.B) {
		benchFetch(b, pg, api, tokens, "greedy", 30*time.Second, 2000, 50)
	})
	b.Run("postgres/state-in-db/concurrency=50", func(b *testing.B) {
		benchFetch(b, pg, api, tokens, "greedy", 30*time.Second, 2000, 50, true)
	})
	b.Run("postgres/plain-client/concurrency=50", func(b *testing.B) {
		benchFetch(b, pg, api, tokens, "", 30*time.Second, 2000, 50)
	})
}

// BenchmarkFetchQuotaBound: two tokens of 20 requests per 2 s window, so
// no client can exceed 20 URLs/s; a short max wait turns most waits into
// reschedules. The rate should approach the bound with no violation.
func BenchmarkFetchQuotaBound(b *testing.B) {
	api := sim.APIConfig{Dialect: sim.DialectGitHub, Prefix: "/github", Limit: 20, Window: 2 * time.Second, WindowMode: sim.WindowFixed,
		Tokens: []sim.TokenConfig{{Token: "tok-alice-1"}, {Token: "tok-bob-1"}}}
	for _, policy := range []string{"adaptive", "greedy"} {
		b.Run(policy, func(b *testing.B) {
			benchFetch(b, benchSQLite, api, []string{"tok-alice-1", "tok-bob-1"}, policy, 500*time.Millisecond, 200, 10)
		})
	}
}
