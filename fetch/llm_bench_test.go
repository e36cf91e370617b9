package fetch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/sim"
)

// BenchmarkFetchLanguageModel: the batch of BenchmarkLanguageModel's
// openai-tokens scenario (package ratekeeper) as a fetch run of JSON
// lines: two keys of one organization, tokens binding, 20,000 a simulated
// minute of 5 s, 100 chat requests of prompts and max_tokens mixed.
//
//	go test -run x -bench FetchLanguageModel -benchtime 1x ./fetch/
func BenchmarkFetchLanguageModel(b *testing.B) {
	const limit, window, latency = 20000, 5 * time.Second, 200 * time.Millisecond
	srv, err := sim.New(sim.Config{Seed: 1, APIs: []sim.APIConfig{{Name: "openai", Dialect: "openai", Prefix: "/openai",
		Limit: 1000, Window: window, Latency: latency, Resources: map[string]sim.ResourceConfig{"tokens": {Limit: limit}},
		Tokens: []sim.TokenConfig{{Token: "sk-1", Owner: "org-acme"}, {Token: "sk-2", Owner: "org-acme"}}}}})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	var lines []string
	for i := range 100 {
		body := map[string]any{"model": "m", "max_tokens": 500 + 100*(i%5),
			"messages": []map[string]string{{"role": "user", "content": strings.Repeat("a", 400+40*(i%7))}}}
		l, _ := json.Marshal(map[string]any{"url": ts.URL + "/openai/chat/completions", "method": "POST", "id": strconv.Itoa(i), "body": body})
		lines = append(lines, string(l))
	}
	for b.Loop() {
		srv.Reset()
		tr, err := ratekeeper.NewTransport(ratekeeper.Options{Providers: []string{"openai=" + ts.URL + "/openai"},
			Tokens: map[string][]string{"openai": {"sk-1", "sk-2"}}, MaxWait: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		entries, err := fetch.ReadEntries(strings.NewReader(strings.Join(lines, "\n")))
		if err != nil {
			b.Fatal(err)
		}
		targets, err := fetch.Plan(entries, "requests.jsonl", false, tr.Registry())
		if err != nil {
			b.Fatal(err)
		}
		var out bytes.Buffer
		start := time.Now()
		sum, err := fetch.Run(context.Background(), targets, fetch.Options{DSN: benchSQLite(b), Client: &http.Client{Transport: tr},
			Output: fetch.NewStream(&out, "stdout"), Concurrency: 16, Timeout: 2 * time.Minute,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		elapsed := time.Since(start)
		tr.Close()
		if err != nil || sum.Failed != 0 || sum.Written != 100 {
			b.Fatalf("%+v, %v", sum, err)
		}
		st := srv.Stats()
		tok, _ := st.BucketFor("openai", "org-acme", "tokens")
		ideal := time.Duration(float64(tok.Charged-limit)/limit*float64(window)) + latency
		b.ReportMetric(elapsed.Seconds(), "elapsed-s")
		b.ReportMetric(elapsed.Seconds()/ideal.Seconds(), "x-ideal")
		b.ReportMetric(float64(st.Total.Violations), "refusals")
		b.ReportMetric(float64(st.Total.EarlyRetries), "early-retries")
	}
}
