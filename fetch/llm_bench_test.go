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
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/sim"
)

// BenchmarkFetchLanguageModel: batches of BenchmarkLanguageModel
// (package ratekeeper) as fetch runs of JSON lines, two keys of one
// organization, a simulated minute of 5 s: openai-tokens, tokens binding
// (20,000 a minute, 100 chat requests of prompts and max_tokens mixed),
// and requests-and-tokens, both binding at once (30 requests and 20,000
// tokens a minute, 120 chats alternating 30 and 1,300 tokens).
//
//	go test -run x -bench FetchLanguageModel -benchtime 1x ./fetch/
func BenchmarkFetchLanguageModel(b *testing.B) {
	type shape struct {
		requests int64
		n        int
		body     func(i int) map[string]any
	}
	chat := func(chars, maxTokens int) map[string]any {
		return map[string]any{"model": "m", "max_tokens": maxTokens,
			"messages": []map[string]string{{"role": "user", "content": strings.Repeat("a", chars)}}}
	}
	shapes := map[string]shape{
		"openai-tokens": {1000, 100, func(i int) map[string]any { return chat(400+40*(i%7), 500+100*(i%5)) }},
		"requests-and-tokens": {30, 120, func(i int) map[string]any {
			if i%2 == 0 {
				return chat(40, 20)
			}
			return chat(800, 1100)
		}},
	}
	for _, name := range []string{"openai-tokens", "requests-and-tokens"} {
		b.Run(name, func(b *testing.B) { fetchLanguageModel(b, shapes[name].requests, shapes[name].n, shapes[name].body) })
	}
}

// fetchLanguageModel runs n chats of body(i) through fetch against an
// OpenAI simulator of requests and 20,000 tokens a 5 s minute.
func fetchLanguageModel(b *testing.B, requests int64, n int, body func(i int) map[string]any) {
	const limit, window, latency = 20000, 5 * time.Second, 200 * time.Millisecond
	srv, err := sim.New(sim.Config{Seed: 1, APIs: []sim.APIConfig{{Name: "openai", Dialect: "openai", Prefix: "/openai",
		Limit: requests, Window: window, Latency: latency, Resources: map[string]sim.ResourceConfig{"tokens": {Limit: limit}},
		Tokens: []sim.TokenConfig{{Token: "sk-1", Owner: "org-acme"}, {Token: "sk-2", Owner: "org-acme"}}}}})
	if err != nil {
		b.Fatal(err)
	}
	var late atomic.Int64
	var after atomic.Int64 // the first period's end, Unix nanoseconds
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		srv.ServeHTTP(&statusWriter{ResponseWriter: w, seen: func(code int) {
			if code == http.StatusTooManyRequests && time.Now().UnixNano() > after.Load() {
				late.Add(1)
			}
		}}, r)
	}))
	defer ts.Close()
	var lines []string
	for i := range n {
		l, _ := json.Marshal(map[string]any{"url": ts.URL + "/openai/chat/completions", "method": "POST", "id": strconv.Itoa(i), "body": body(i)})
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
		late.Store(0)
		after.Store(start.Add(window).UnixNano())
		sum, err := fetch.Run(context.Background(), targets, fetch.Options{DSN: benchSQLite(b), Client: &http.Client{Transport: tr},
			Output: fetch.NewStream(&out, "stdout"), Concurrency: 16, Timeout: 2 * time.Minute,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		elapsed := time.Since(start)
		tr.Close()
		if err != nil || sum.Failed != 0 || sum.Written != n {
			b.Fatalf("%+v, %v", sum, err)
		}
		st := srv.Stats()
		ideal := latency
		for resource, lim := range map[string]int64{"requests": requests, "tokens": limit} {
			bk, _ := st.BucketFor("openai", "org-acme", resource)
			ideal = max(ideal, time.Duration(float64(bk.Charged-lim)/float64(lim)*float64(window))+latency)
		}
		b.ReportMetric(elapsed.Seconds(), "elapsed-s")
		b.ReportMetric(elapsed.Seconds()/ideal.Seconds(), "x-ideal")
		b.ReportMetric(float64(st.Total.Violations), "refusals")
		b.ReportMetric(float64(late.Load()), "refusals-after-first-period")
		b.ReportMetric(float64(st.Total.EarlyRetries), "early-retries")
	}
}

// statusWriter tells seen the status of the answer it writes.
type statusWriter struct {
	http.ResponseWriter
	seen func(int)
}

func (s *statusWriter) WriteHeader(code int) {
	s.seen(code)
	s.ResponseWriter.WriteHeader(code)
}
