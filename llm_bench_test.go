package ratekeeper

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// The language-model batches of BENCHMARKS.md, "APIs that charge by
// tokens": a batch through one face (the library with workers, the batch
// API, the gateway) against the simulated APIs on loopback, minutes
// scaled to 5 or 10 seconds, with the figures the targets name: elapsed time
// over the ideal, refusals and early retries.
//
//	go test -run x -bench LanguageModel -benchtime 1x .

// llmWindow is the simulated minute.
const llmWindow = 5 * time.Second

// llmJob is one request of a batch: its URL and body.
type llmJob struct{ url, body string }

func chatJSON(chars, maxTokens int) string {
	return fmt.Sprintf(`{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, maxTokens, strings.Repeat("a", chars))
}

// llmScenario is a simulator and the batch to send it.
type llmScenario struct {
	apis []sim.APIConfig
	keys map[string][]string
	// jobs builds the batch from the simulator's base URL.
	jobs func(base string) []llmJob
	// ideal is the least time the batch can take, from the simulator's
	// stats after it.
	ideal func(st sim.Stats) time.Duration
}

// tokensIdeal is what charged units beyond the first bucket take to
// refill at limit per window, plus the last answer's latency.
func tokensIdeal(st sim.Stats, api, owner, resource string, limit int64, window, latency time.Duration) time.Duration {
	b, _ := st.BucketFor(api, owner, resource)
	return time.Duration(float64(b.Charged-limit)/float64(limit)*float64(window)) + latency
}

var (
	openaiTokens = sim.APIConfig{Name: "openai", Dialect: "openai", Prefix: "/openai", Limit: 1000, Window: llmWindow, Latency: 200 * time.Millisecond,
		Resources: map[string]sim.ResourceConfig{"tokens": {Limit: 20000}},
		Tokens:    []sim.TokenConfig{{Token: "sk-1", Owner: "org-acme"}, {Token: "sk-2", Owner: "org-acme"}}}
	// Two simulated minutes: three messages of max_tokens 2,048 fit in
	// the 8,000 at once, so a shorter minute would be bound by how many
	// the server admits at once, whoever the client.
	anthropicOutput = sim.APIConfig{Name: "anthropic", Dialect: "anthropic", Prefix: "/anthropic", Limit: 1000, Window: 2 * llmWindow, Latency: 200 * time.Millisecond,
		OutputRatio: 0.1, Resources: map[string]sim.ResourceConfig{"input_tokens": {Limit: 1000000}, "output_tokens": {Limit: 8000}},
		Tokens: []sim.TokenConfig{{Token: "sk-ant-1"}}}
)

// openaiBoth binds on requests and tokens at once: 30 requests and
// 20,000 tokens a 5 s minute, spent by pairs of a short chat (30 tokens)
// and a long one (1,300), three pairs a second using up both.
var openaiBoth = sim.APIConfig{Name: "openai", Dialect: "openai", Prefix: "/openai", Limit: 30, Window: llmWindow, Latency: 200 * time.Millisecond,
	Resources: map[string]sim.ResourceConfig{"tokens": {Limit: 20000}},
	Tokens:    []sim.TokenConfig{{Token: "sk-1", Owner: "org-acme"}, {Token: "sk-2", Owner: "org-acme"}}}

func openaiBothJobs(base string) []llmJob {
	var jobs []llmJob
	for i := range 120 {
		if i%2 == 0 {
			jobs = append(jobs, llmJob{base + "/openai/chat/completions", chatJSON(40, 20)})
		} else {
			jobs = append(jobs, llmJob{base + "/openai/chat/completions", chatJSON(800, 1100)})
		}
	}
	return jobs
}

func openaiJobs(base string) []llmJob {
	var jobs []llmJob
	for i := range 100 {
		jobs = append(jobs, llmJob{base + "/openai/chat/completions", chatJSON(400+40*(i%7), 500+100*(i%5))})
	}
	return jobs
}

func anthropicJobs(base string) []llmJob {
	var jobs []llmJob
	for range 200 {
		jobs = append(jobs, llmJob{base + "/anthropic/messages", chatJSON(400, 2048)})
	}
	return jobs
}

var llmScenarios = map[string]llmScenario{
	"openai-tokens": {
		apis: []sim.APIConfig{openaiTokens}, keys: map[string][]string{"openai": {"sk-1", "sk-2"}}, jobs: openaiJobs,
		ideal: func(st sim.Stats) time.Duration {
			return tokensIdeal(st, "openai", "org-acme", "tokens", 20000, openaiTokens.Window, openaiTokens.Latency)
		},
	},
	"anthropic-output": {
		apis: []sim.APIConfig{anthropicOutput}, keys: map[string][]string{"anthropic": {"sk-ant-1"}}, jobs: anthropicJobs,
		ideal: func(st sim.Stats) time.Duration {
			return tokensIdeal(st, "anthropic", "user1", "output_tokens", 8000, anthropicOutput.Window, anthropicOutput.Latency)
		},
	},
	"requests-and-tokens": {
		apis: []sim.APIConfig{openaiBoth}, keys: map[string][]string{"openai": {"sk-1", "sk-2"}}, jobs: openaiBothJobs,
		// The slower of the two buckets alone.
		ideal: func(st sim.Stats) time.Duration {
			return max(tokensIdeal(st, "openai", "org-acme", "requests", 30, openaiBoth.Window, openaiBoth.Latency),
				tokensIdeal(st, "openai", "org-acme", "tokens", 20000, openaiBoth.Window, openaiBoth.Latency))
		},
	},
	"both": {
		apis: []sim.APIConfig{openaiTokens, anthropicOutput},
		keys: map[string][]string{"openai": {"sk-1", "sk-2"}, "anthropic": {"sk-ant-1"}},
		jobs: func(base string) []llmJob {
			a, b := openaiJobs(base), anthropicJobs(base)
			var jobs []llmJob
			for i := range max(len(a), len(b)) {
				if i < len(a) {
					jobs = append(jobs, a[i])
				}
				if i < len(b) {
					jobs = append(jobs, b[i])
				}
			}
			return jobs
		},
		// The slower one alone.
		ideal: func(st sim.Stats) time.Duration {
			return max(tokensIdeal(st, "openai", "org-acme", "tokens", 20000, openaiTokens.Window, openaiTokens.Latency),
				tokensIdeal(st, "anthropic", "user1", "output_tokens", 8000, anthropicOutput.Window, anthropicOutput.Latency))
		},
	},
}

// llmFaces send a batch of jobs with a client built from opts, and count
// the answers by status.
var llmFaces = map[string]func(b *testing.B, opts Options, jobs []llmJob) map[int]int{
	"library": func(b *testing.B, opts Options, jobs []llmJob) map[int]int {
		return sendAll(b, NewClient(opts), jobs, func(j llmJob) string { return j.url })
	},
	"batch": func(b *testing.B, opts Options, jobs []llmJob) map[int]int {
		tr, err := NewTransport(opts)
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		var mu sync.Mutex
		codes := map[int]int{}
		bt := NewBatch(tr, BatchOptions{InFlight: 16, OnResult: func(r BatchResult) {
			mu.Lock()
			defer mu.Unlock()
			if r.Err != nil {
				codes[-1]++
				return
			}
			_, _ = io.Copy(io.Discard, r.Response.Body)
			codes[r.Response.StatusCode]++
		}})
		for _, j := range jobs {
			req, _ := http.NewRequest(http.MethodPost, j.url, strings.NewReader(j.body))
			req.Header.Set("Content-Type", "application/json")
			if err := bt.Add(req); err != nil {
				b.Fatal(err)
			}
		}
		if err := bt.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
		return codes
	},
	"gateway": func(b *testing.B, opts Options, jobs []llmJob) map[int]int {
		gw, err := NewGateway(GatewayOptions{Client: opts})
		if err != nil {
			b.Fatal(err)
		}
		defer gw.Close()
		ts := httptest.NewServer(gw)
		defer ts.Close()
		// The gateway serves each provider at /NAME/…: the simulator's
		// /openai/chat/completions is the gateway's /openai/chat/completions.
		return sendAll(b, ts.Client(), jobs, func(j llmJob) string {
			i := strings.Index(j.url[len("http://"):], "/") + len("http://")
			return ts.URL + j.url[i:]
		})
	},
}

// sendAll posts every job with 16 workers.
func sendAll(b *testing.B, c *http.Client, jobs []llmJob, url func(llmJob) string) map[int]int {
	var mu sync.Mutex
	codes := map[int]int{}
	ch := make(chan llmJob)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for j := range ch {
				req, _ := http.NewRequest(http.MethodPost, url(j), strings.NewReader(j.body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.Do(req)
				mu.Lock()
				if err != nil {
					codes[-1]++
				} else {
					codes[resp.StatusCode]++
				}
				mu.Unlock()
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	return codes
}

// lateRefusals counts the refusals (429) a server answers after a time:
// the first period's requests go before any answer has taught what the
// model's tokenizer makes of a prompt.
type lateRefusals struct{ n atomic.Int64 }

func (l *lateRefusals) wrap(h http.Handler, after time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&statusWriter{ResponseWriter: w, seen: func(code int) {
			if code == http.StatusTooManyRequests && time.Now().After(after) {
				l.n.Add(1)
			}
		}}, r)
	})
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

func BenchmarkLanguageModel(b *testing.B) {
	for _, scenario := range []string{"openai-tokens", "anthropic-output", "both", "requests-and-tokens"} {
		for _, face := range []string{"library", "batch", "gateway"} {
			b.Run(scenario+"/"+face, func(b *testing.B) {
				sc := llmScenarios[scenario]
				for b.Loop() {
					srv, err := sim.New(sim.Config{Seed: 1, APIs: sc.apis})
					if err != nil {
						b.Fatal(err)
					}
					start := time.Now()
					var late lateRefusals
					var first time.Duration
					for _, a := range sc.apis {
						first = max(first, a.Window)
					}
					ts := httptest.NewServer(late.wrap(srv, start.Add(first)))
					var providers []string
					for _, a := range sc.apis {
						providers = append(providers, a.Name+"="+ts.URL+a.Prefix)
					}
					opts := Options{Providers: providers, Tokens: sc.keys, MaxWait: time.Minute}
					codes := llmFaces[face](b, opts, sc.jobs(ts.URL))
					elapsed := time.Since(start)
					st := srv.Stats()
					ts.Close()
					ideal := sc.ideal(st)
					n := len(sc.jobs(ts.URL))
					b.ReportMetric(elapsed.Seconds(), "elapsed-s")
					b.ReportMetric(elapsed.Seconds()/ideal.Seconds(), "x-ideal")
					b.ReportMetric(float64(st.Total.Violations), "refusals")
					b.ReportMetric(float64(late.n.Load()), "refusals-after-first-period")
					b.ReportMetric(float64(st.Total.EarlyRetries), "early-retries")
					if codes[200] != n {
						b.Errorf("statuses %v, want %d × 200", codes, n)
					}
				}
			})
		}
	}
}
