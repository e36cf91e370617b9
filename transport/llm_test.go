package transport

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
)

// chatBody is a chat request whose prompt has chars characters.
func chatBody(chars, maxTokens int) string {
	return fmt.Sprintf(`{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, maxTokens, strings.Repeat("a", chars))
}

// postAll sends n POSTs of body(i) to path with workers goroutines and
// counts the statuses (-1: an error).
func (s *simSetup) postAll(t *testing.T, path string, n, workers int, body func(i int) string) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[int]int{}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				req, _ := http.NewRequest(http.MethodPost, s.base+path, strings.NewReader(body(i)))
				req.Header.Set("Content-Type", "application/json")
				resp, err := s.t.RoundTrip(req)
				mu.Lock()
				if err != nil {
					codes[-1]++
				} else {
					codes[resp.StatusCode]++
				}
				mu.Unlock()
				if err == nil {
					drain(resp)
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return codes
}

// Keys of one organization share its buckets: the organization is learnt
// from the header every answer carries, through one "who am I" per key.
func TestOpenAIKeysOfOneOrganizationShareABucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tokens := []sim.TokenConfig{{Token: "sk-1", Owner: "org-acme"}, {Token: "sk-2", Owner: "org-acme"}, {Token: "sk-3", Owner: "org-other"}}
		// Continuous buckets refill between two answers: counters
		// cannot prove a share.
		s := newSim(t, sim.APIConfig{Dialect: "openai", Limit: 1000, Window: 10 * time.Second, Latency: 200 * time.Millisecond,
			Resources: map[string]sim.ResourceConfig{"tokens": {Limit: 20000}}, Tokens: tokens}, []string{"sk-1", "sk-2", "sk-3"}, nil)
		codes := s.postAll(t, "/chat/completions", 60, 8, func(i int) string { return chatBody(400+40*(i%7), 500+100*(i%5)) })
		if codes[200] != 60 {
			t.Fatalf("statuses %v", codes)
		}
		if got := bucketsOf(t, s.t, "openai"); got != "1,2 3" {
			t.Fatalf("buckets %s, want 1,2 3", got)
		}
	})
}

// A request to Anthropic carries anthropic-version, which the API
// requires, when its caller sent none.
func TestAnthropicVersionSentByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sim.APIConfig{Dialect: "anthropic", Tokens: []sim.TokenConfig{{Token: "sk-ant-1"}}}, []string{"sk-ant-1"}, nil)
		codes := s.postAll(t, "/messages", 3, 1, func(i int) string { return chatBody(40, 10) })
		if codes[200] != 3 {
			t.Fatalf("statuses %v", codes)
		}
	})
}

// An overloaded server did not process the request: a POST goes again
// after backoff, and every request ends answered 200, none sent again
// after its 200.
func TestOverloadedPostsSentAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sim.APIConfig{Dialect: "anthropic", Window: 10 * time.Second, Latency: 50 * time.Millisecond,
			Faults: sim.FaultConfig{OverloadRate: 0.2}, Tokens: []sim.TokenConfig{{Token: "sk-ant-1"}}}, []string{"sk-ant-1"}, nil)
		codes := s.postAll(t, "/messages", 40, 4, func(i int) string { return chatBody(40, 20) })
		st := s.srv.Stats().Total
		if codes[200] != 40 || st.ServerErrors == 0 {
			t.Fatalf("statuses %v, %d overloaded", codes, st.ServerErrors)
		}
		// Each bucket counts every request that reached it: the
		// requests bucket saw 40 accepted and the overloaded ones.
		req, _ := s.srv.Stats().BucketFor("anthropic", "user1", "requests")
		if req.Accepted != 40 || req.Requests != 40+st.ServerErrors {
			t.Fatalf("requests bucket %+v: a request was sent again after its 200", req.Counters)
		}
	})
}

// refusalTimes records when the server refused a request (429), since a
// start.
type refusalTimes struct {
	mu sync.Mutex
	at []time.Duration
}

func (r *refusalTimes) record(base http.RoundTripper, start time.Time) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := base.RoundTrip(req)
		if err == nil && resp.StatusCode == http.StatusTooManyRequests {
			r.mu.Lock()
			r.at = append(r.at, time.Since(start).Round(time.Millisecond))
			r.mu.Unlock()
		}
		return resp, err
	})
}

// tokenTarget runs a batch against a language-model dialect through the
// transport and checks the targets: every request answered 200,
// no refusal after the first period, no early retry, and an elapsed time
// within factor of the ideal: the tokens charged beyond the first bucket
// at the refill rate, plus the last answer's latency.
func tokenTarget(t *testing.T, api sim.APIConfig, keys []string, path, owner, bucket string, limit int64, n, workers int, body func(int) string, factor float64) {
	t.Helper()
	start := time.Now()
	var refusedAt refusalTimes
	s := newSim(t, api, keys, func(o *Options) { o.Base = refusedAt.record(o.Base, start) })
	codes := s.postAll(t, path, n, workers, body)
	elapsed := time.Since(start)
	t.Logf("refusals at %v", refusedAt.at)
	st := s.srv.Stats()
	b, _ := st.BucketFor(api.Name, owner, bucket)
	rate := float64(limit) / api.Window.Seconds()
	ideal := time.Duration(float64(b.Charged-limit)/rate*float64(time.Second)) + api.Latency
	t.Logf("%s: %v in %v, ideal %v (%.3f×); %d refusals, %d early retries", bucket, codes, elapsed, ideal, elapsed.Seconds()/ideal.Seconds(),
		st.Total.Violations, st.Total.EarlyRetries)
	// The first period's requests go before any answer has taught what
	// the model's tokenizer makes of a prompt: they may be refused.
	late := 0
	for _, at := range refusedAt.at {
		if at > api.Window {
			late++
		}
	}
	if codes[200] != n || late != 0 || st.Total.EarlyRetries != 0 {
		t.Fatalf("statuses %v, %d refusals after the first period, %d early retries", codes, late, st.Total.EarlyRetries)
	}
	if elapsed.Seconds() > factor*ideal.Seconds() {
		t.Fatalf("took %v, more than %.2f × the ideal %v", elapsed, factor, ideal)
	}
}

// Tokens binding, two keys of one organization, prompts and max_tokens
// mixed: no refusal after the first period (the simulator's tokenizer is
// not the client's estimate), no early retry, within 1.05 × the ideal.
func TestOpenAITokensBindingPacedBeforeTheRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tokens := []sim.TokenConfig{{Token: "sk-1", Owner: "org-acme"}, {Token: "sk-2", Owner: "org-acme"}}
		api := sim.APIConfig{Name: "openai", Dialect: "openai", Limit: 1000, Window: 10 * time.Second, Latency: 200 * time.Millisecond,
			Resources: map[string]sim.ResourceConfig{"tokens": {Limit: 20000}}, Tokens: tokens}
		tokenTarget(t, api, []string{"sk-1", "sk-2"}, "/chat/completions", "org-acme", "tokens", 20000, 100, 8,
			func(i int) string { return chatBody(400+40*(i%7), 500+100*(i%5)) }, 1.05)
	})
}

// The batch of the benchmark (16 workers, a 5 s minute): the requests
// priced before any answer taught the model's tokenizer wait long, and
// are priced again when they reserve, not sent at characters ÷ 4.
func TestOpenAIRequestsPricedEarlyPricedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tokens := []sim.TokenConfig{{Token: "sk-1", Owner: "org-acme"}, {Token: "sk-2", Owner: "org-acme"}}
		api := sim.APIConfig{Name: "openai", Dialect: "openai", Limit: 1000, Window: 5 * time.Second, Latency: 200 * time.Millisecond,
			Resources: map[string]sim.ResourceConfig{"tokens": {Limit: 20000}}, Tokens: tokens}
		tokenTarget(t, api, []string{"sk-1", "sk-2"}, "/chat/completions", "org-acme", "tokens", 20000, 100, 16,
			func(i int) string { return chatBody(400+40*(i%7), 500+100*(i%5)) }, 1.05)
	})
}

// Output tokens binding, max_tokens far above the real outputs: within
// 1.10 × the ideal computed from the real outputs (the output bucket is
// given back what max_tokens over-reserved when each answer ends).
func TestAnthropicOutputBindingFromRealOutputs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := sim.APIConfig{Name: "anthropic", Dialect: "anthropic", Limit: 1000, Window: 10 * time.Second, Latency: 200 * time.Millisecond, OutputRatio: 0.1,
			Resources: map[string]sim.ResourceConfig{"input_tokens": {Limit: 1000000}, "output_tokens": {Limit: 8000}}, Tokens: []sim.TokenConfig{{Token: "k"}}}
		tokenTarget(t, api, []string{"k"}, "/messages", "user1", "output_tokens", 8000, 200, 16,
			func(i int) string { return chatBody(400, 2048) }, 1.10)
	})
}

// The cost a caller gives is what the request reserves, and the header
// that carries it never reaches the server.
func TestCallerCostReservedNotSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen []string
		api := sim.APIConfig{Dialect: "openai", Window: 10 * time.Second, Resources: map[string]sim.ResourceConfig{"tokens": {Limit: 1000}},
			Tokens: []sim.TokenConfig{{Token: "sk-1"}}}
		s := newSim(t, api, []string{"sk-1"}, func(o *Options) {
			base := o.Base
			o.Base = rtFunc(func(r *http.Request) (*http.Response, error) {
				seen = append(seen, r.Header.Get(CostHeader))
				return base.RoundTrip(r)
			})
		})
		send := func(ctx context.Context, cost string) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/chat/completions", strings.NewReader(chatBody(40, 10)))
			if cost != "" {
				req.Header.Set(CostHeader, cost)
			}
			resp, err := s.t.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
		}
		send(t.Context(), "")
		var charged int64
		for _, b := range s.srv.Stats().Buckets {
			if b.Resource == "tokens" {
				charged = b.Charged
			}
		}
		// 1,000 − charged are left: a request said to cost 1,000 waits
		// for charged to drip back (10 ms a token), though its body
		// asks for as few.
		want := time.Duration(charged) * 10 * time.Millisecond
		start := time.Now()
		send(t.Context(), "1000")
		if w := time.Since(start); w < want || w > want+50*time.Millisecond {
			t.Fatalf("a request costing the whole bucket went after %v, want %v", w, want)
		}
		// The server charged it as much: the same again through WithCost.
		start = time.Now()
		send(WithCost(t.Context(), 1000), "")
		if w := time.Since(start); w < want || w > want+50*time.Millisecond {
			t.Fatalf("WithCost(1000) went after %v, want %v", w, want)
		}
		for _, h := range seen {
			if h != "" {
				t.Fatalf("%s reached the server: %q", CostHeader, h)
			}
		}
	})
}

// An answer's usage teaches what a prompt character costs: the next
// estimate of the shape uses it.
func TestUsageTeachesTheEstimate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := sim.APIConfig{Dialect: "openai", Tokens: []sim.TokenConfig{{Token: "sk-1"}}}
		s := newSim(t, api, []string{"sk-1"}, nil)
		req, _ := http.NewRequest(http.MethodPost, s.base+"/chat/completions", strings.NewReader(chatBody(400, 10)))
		resp, err := s.t.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		const key = "openai http://sim.test/sim\x00m /chat/completions"
		if s.t.tokens.rate(key, 400) != 0 {
			t.Fatal("taught before the answer was read")
		}
		drain(resp)
		// The simulator's tokenizer is the model's own: the answer
		// states what the prompt cost, which the next estimate of the
		// shape covers with a margin for the next text's own count.
		var prompt float64
		for _, b := range s.srv.Stats().Buckets {
			if b.Resource == "tokens" {
				prompt = float64(b.Charged - 10)
			}
		}
		if got := s.t.tokens.rate(key, 400) * 400; got < prompt*1.1 || got > prompt*1.2 {
			t.Fatalf("taught %v tokens for 400 characters, want %v and a margin", got, prompt)
		}
		tp := provider.TokenPrice{Chars: 400, Fixed: 10, PromptCounts: true}
		if n := tp.Estimate(0.5); n != 210 {
			t.Fatalf("estimate at 0.5 a character: %d, want 210", n)
		}
	})
}

// A requests limit binding is paced before the refusal: each chat
// request reserves 1 of the requests bucket with its tokens, so the 31st
// of 30 a 10 s waits for about one request to drip back (0.334 s; the
// rate is learnt from counts rounded down, so it errs 1 in 29 slow) and
// is never refused.
func TestRequestsBindingPacedBeforeTheRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := sim.APIConfig{Dialect: "openai", Limit: 30, Window: 10 * time.Second,
			Resources: map[string]sim.ResourceConfig{"tokens": {Limit: 1000000}}, Tokens: []sim.TokenConfig{{Token: "sk-1"}}}
		s := newSim(t, api, []string{"sk-1"}, nil)
		start := time.Now()
		codes := s.postAll(t, "/chat/completions", 31, 1, func(int) string { return chatBody(40, 10) })
		st := s.srv.Stats().Total
		if codes[200] != 31 || st.Violations != 0 || st.EarlyRetries != 0 {
			t.Fatalf("statuses %v, %d refusals, %d early retries", codes, st.Violations, st.EarlyRetries)
		}
		if w := time.Since(start); w < 334*time.Millisecond || w > 360*time.Millisecond {
			t.Fatalf("the 31st request went after %v, want 0.334 s", w)
		}
	})
}

// Requests and tokens binding in one batch (Anthropic: 1 request, the
// prompt's input tokens and max_tokens of output tokens reserved at
// once): no refusal from any of the three buckets, none early.
func TestRequestsAndTokensBindingTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := sim.APIConfig{Name: "anthropic", Dialect: "anthropic", Limit: 20, Window: 10 * time.Second, Latency: 200 * time.Millisecond, OutputRatio: 0.5,
			Resources: map[string]sim.ResourceConfig{"input_tokens": {Limit: 3000}, "output_tokens": {Limit: 4000}}, Tokens: []sim.TokenConfig{{Token: "k"}}}
		s := newSim(t, api, []string{"k"}, nil)
		codes := s.postAll(t, "/messages", 80, 8, func(i int) string {
			if i%2 == 0 {
				return chatBody(40, 20) // requests bind
			}
			return chatBody(1200, 400) // tokens bind
		})
		st := s.srv.Stats().Total
		if codes[200] != 80 || st.Violations != 0 || st.EarlyRetries != 0 {
			t.Fatalf("statuses %v, %d refusals, %d early retries", codes, st.Violations, st.EarlyRetries)
		}
	})
}

// OpenAI, requests and tokens binding in one batch: two keys of one
// organization, 30 requests and 20,000 tokens a 5 s minute, spent by
// pairs of a short chat (30 tokens) and a long one (1,300), three pairs a
// second using up both. No refusal, none early, within 1.05 × the slower
// bucket's ideal.
func TestOpenAIRequestsAndTokensBindingInOneBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := sim.APIConfig{Name: "openai", Dialect: "openai", Limit: 30, Window: 5 * time.Second, Latency: 200 * time.Millisecond,
			Resources: map[string]sim.ResourceConfig{"tokens": {Limit: 20000}},
			Tokens:    []sim.TokenConfig{{Token: "sk-1", Owner: "org-acme"}, {Token: "sk-2", Owner: "org-acme"}}}
		s := newSim(t, api, []string{"sk-1", "sk-2"}, nil)
		start := time.Now()
		codes := s.postAll(t, "/chat/completions", 120, 16, func(i int) string {
			if i%2 == 0 {
				return chatBody(40, 20)
			}
			return chatBody(800, 1100)
		})
		elapsed := time.Since(start)
		st := s.srv.Stats()
		ideal := api.Latency
		for resource, limit := range map[string]int64{"requests": 30, "tokens": 20000} {
			b, _ := st.BucketFor("openai", "org-acme", resource)
			ideal = max(ideal, time.Duration(float64(b.Charged-limit)/float64(limit)*float64(api.Window))+api.Latency)
		}
		t.Logf("%v in %v, ideal %v (%.3f×); %d refusals, %d early retries", codes, elapsed, ideal, elapsed.Seconds()/ideal.Seconds(),
			st.Total.Violations, st.Total.EarlyRetries)
		if codes[200] != 120 || st.Total.Violations != 0 || st.Total.EarlyRetries != 0 {
			t.Fatalf("statuses %v, %d refusals, %d early retries", codes, st.Total.Violations, st.Total.EarlyRetries)
		}
		if elapsed.Seconds() > 1.05*ideal.Seconds() {
			t.Fatalf("took %v, more than 1.05 × the ideal %v", elapsed, ideal)
		}
	})
}

// A 429 naming the requests limit pauses the requests bucket until its
// retry-after-ms, and leaves the tokens bucket that paces the request as
// its answer counts it: tokens are not paused for a requests refusal.
// The request goes again when the pause ends.
func TestRequestsRefusalPausesOnlyTheRequestsBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := sim.APIConfig{Dialect: "openai", Limit: 100, Window: 10 * time.Second,
			Resources: map[string]sim.ResourceConfig{"tokens": {Limit: 100000}}, Tokens: []sim.TokenConfig{{Token: "sk-1"}}}
		var chats atomic.Int64
		s := newSim(t, api, []string{"sk-1"}, func(o *Options) {
			base := o.Base
			o.Base = rtFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := base.RoundTrip(r)
				if err != nil || r.Method != http.MethodPost || chats.Add(1) != 2 {
					return resp, err
				}
				// Another spender took the organization's requests.
				drain(resp)
				resp.StatusCode = http.StatusTooManyRequests
				resp.Header.Set("X-Ratelimit-Remaining-Requests", "0")
				resp.Header.Set("Retry-After-Ms", "1500")
				resp.Body = io.NopCloser(strings.NewReader(`{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`))
				return resp, nil
			})
		})
		s.postAll(t, "/chat/completions", 1, 1, func(int) string { return chatBody(40, 10) })
		start := time.Now()
		done := make(chan int)
		go func() {
			done <- s.postAll(t, "/chat/completions", 1, 1, func(int) string { return chatBody(40, 10) })[200]
		}()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		all, err := s.t.state.Buckets(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		for id, b := range all {
			switch id.Resource {
			case "requests":
				if want := start.Add(1500 * time.Millisecond); !b.BlockedUntil.Equal(want) {
					t.Errorf("requests paused until %v, want %v", b.BlockedUntil.Sub(start), want.Sub(start))
				}
			case "tokens":
				if b.BlockedUntil.After(now) || b.Remaining <= 0 {
					t.Errorf("tokens paused until %v with %d left: a requests refusal paused them", b.BlockedUntil.Sub(start), b.Remaining)
				}
			}
		}
		if n := <-done; n != 1 || time.Since(start) < 1500*time.Millisecond {
			t.Fatalf("answered %d after %v, want 200 after the 1.5 s pause", n, time.Since(start))
		}
	})
}

// Anthropic: a 429 naming input tokens pauses the input-tokens bucket
// until its retry-after, and leaves output tokens and requests with the
// counts the answer states.
func TestInputTokensRefusalPausesOnlyItsBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := sim.APIConfig{Dialect: "anthropic", Limit: 100, Window: 10 * time.Second,
			Resources: map[string]sim.ResourceConfig{"input_tokens": {Limit: 100000}, "output_tokens": {Limit: 100000}},
			Tokens:    []sim.TokenConfig{{Token: "k"}}}
		var msgs atomic.Int64
		s := newSim(t, api, []string{"k"}, func(o *Options) {
			base := o.Base
			o.Base = rtFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := base.RoundTrip(r)
				if err != nil || r.Method != http.MethodPost || msgs.Add(1) != 2 {
					return resp, err
				}
				drain(resp)
				resp.StatusCode = http.StatusTooManyRequests
				resp.Header.Set("Retry-After", "2")
				resp.Body = io.NopCloser(strings.NewReader(`{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your organization's rate limit of 100000 input tokens per minute."}}`))
				return resp, nil
			})
		})
		s.postAll(t, "/messages", 1, 1, func(int) string { return chatBody(40, 10) })
		start := time.Now()
		done := make(chan int)
		go func() { done <- s.postAll(t, "/messages", 1, 1, func(int) string { return chatBody(40, 10) })[200] }()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		all, err := s.t.state.Buckets(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		seen := 0
		for id, b := range all {
			switch id.Resource {
			case "input-tokens":
				seen++
				if want := start.Add(2 * time.Second); !b.BlockedUntil.Equal(want) {
					t.Errorf("input tokens paused until %v, want 2 s", b.BlockedUntil.Sub(start))
				}
			case "output-tokens", "requests":
				seen++
				if b.BlockedUntil.After(now) || b.Remaining <= 0 {
					t.Errorf("%s paused until %v with %d left: an input-tokens refusal paused it", id.Resource, b.BlockedUntil.Sub(start), b.Remaining)
				}
			}
		}
		if seen != 3 {
			t.Errorf("%d of the 3 buckets known: %v", seen, all)
		}
		if n := <-done; n != 1 || time.Since(start) < 2*time.Second {
			t.Fatalf("answered %d after %v, want 200 after the 2 s pause", n, time.Since(start))
		}
	})
}

// An OpenAI-compatible host no provider owns, once its answers carry
// OpenAI's tokens headers, has its chat requests priced in tokens like
// OpenAI's: the tokens bucket holds their prompt and max_tokens, and the
// requests bucket one each.
func TestOpenAICompatibleHostPricedInTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "openai", Limit: 1000, Window: 10 * time.Second,
			Latency: 100 * time.Millisecond, Resources: map[string]sim.ResourceConfig{"tokens": {Limit: 80000}},
			Tokens: []sim.TokenConfig{{Token: "sk-own"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		// What the state holds while each chat request is sent.
		var tr *Transport
		var held []map[string]int64
		base := srv.Transport("")
		tr, err = New(Options{Providers: provider.NewRegistry(), Policy: quota.Policy{Kind: quota.Greedy},
			Base: rtFunc(func(r *http.Request) (*http.Response, error) {
				all, err := tr.state.Buckets(r.Context())
				if err != nil {
					return nil, err
				}
				h := map[string]int64{}
				for id, b := range all {
					for _, l := range b.Leases {
						h[id.Resource] += max(l.Units, 1)
					}
				}
				held = append(held, h)
				return base.RoundTrip(r)
			})})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			req, _ := http.NewRequest(http.MethodPost, "http://llm.example.test/v1/chat/completions", strings.NewReader(chatBody(400, 600)))
			req.Header.Set("Authorization", "Bearer sk-own")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
		}
		// The first answer's headers tell what the host speaks; the
		// second request reserves 100 prompt tokens and 600 of
		// max_tokens, and 1 request.
		if len(held) != 2 || held[1]["tokens"] != 700 || held[1]["requests"] != 1 {
			t.Fatalf("chat requests in flight held %v, want 700 tokens and 1 request the second time", held)
		}
	})
}

// An OpenAI-compatible host no provider owns (a self-hosted vLLM, Groq,
// Azure at its own domain), reached with the caller's own key and
// nothing configured: its answers' headers pace it, its chat requests
// priced in tokens from the first answer on, so none is refused.
func TestOpenAICompatibleHostPacedFromItsHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "openai", Limit: 1000, Window: 10 * time.Second,
			Latency: 100 * time.Millisecond, Resources: map[string]sim.ResourceConfig{"tokens": {Limit: 8000}},
			Tokens: []sim.TokenConfig{{Token: "sk-own"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := New(Options{Providers: provider.NewRegistry(), Base: srv.Transport(""), Policy: quota.Policy{Kind: quota.Greedy}})
		if err != nil {
			t.Fatal(err)
		}
		s := &simSetup{t: tr, srv: srv, base: "http://llm.example.test/v1"}
		var mu sync.Mutex
		codes := map[int]int{}
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, s.base+"/chat/completions", strings.NewReader(chatBody(400+40*(i%5), 400)))
				req.Header.Set("Authorization", "Bearer sk-own")
				resp, err := s.t.RoundTrip(req)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					codes[-1]++
					return
				}
				codes[resp.StatusCode]++
				drain(resp)
			})
		}
		wg.Wait()
		st := srv.Stats().Total
		t.Logf("statuses %v, %d refusals, %d early retries", codes, st.Violations, st.EarlyRetries)
		if codes[200] != 30 || st.EarlyRetries != 0 || st.Violations != 0 {
			t.Fatalf("statuses %v, %d early retries (%d refusals)", codes, st.EarlyRetries, st.Violations)
		}
	})
}
