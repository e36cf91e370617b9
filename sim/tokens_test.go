package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// chat is an OpenAI chat body whose one message has chars characters.
func chat(chars, maxTokens int) string {
	return fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, maxTokens, strings.Repeat("a", chars))
}

// message is an Anthropic messages body, its prompt split into parts.
func message(chars, maxTokens int) string {
	return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":%d,"system":"","messages":[{"role":"user","content":[{"type":"text","text":%q}]}]}`,
		maxTokens, strings.Repeat("b", chars))
}

// promptTokens is what srv's first API charges for the prompt of body.
func promptTokens(t *testing.T, srv *Server, body string) int64 {
	t.Helper()
	var req llmRequest
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	return srv.apis[0].tokenizer(req.Model).prompt(req.System, req.Messages)
}

func openaiServer(t *testing.T, tokens int64, latency time.Duration) *Server {
	return mustNew(t, Config{APIs: []APIConfig{{Dialect: "openai", Limit: 60, Window: 10 * time.Second, Latency: latency,
		Resources: map[string]ResourceConfig{"tokens": {Limit: tokens}},
		Tokens:    []TokenConfig{{Token: "sk-a", Owner: "org-acme"}, {Token: "sk-b", Owner: "org-acme"}}}}})
}

func TestOpenAIChargesPromptAndMaxTokensAndRefillsContinuously(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := openaiServer(t, 1000, 0)
		c := newClient(t, srv)
		// 400 characters are about 100 tokens (p, by the model's
		// tokenizer); with max_tokens 300 the request costs p+300 of
		// the 1,000 a 10 s window refills, 100 a second.
		p := promptTokens(t, srv, chat(400, 300))
		cost := p + 300
		a := c.do("POST", "/v1/chat/completions", "Authorization", "Bearer sk-a", chat(400, 300))
		if a.status != 200 {
			t.Fatalf("status %d: %s", a.status, a.body)
		}
		wantHeaders(t, a, map[string]string{
			"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "167ms",
			"x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": itoa(1000 - cost), "x-ratelimit-reset-tokens": openaiDuration(time.Duration(cost) * 10 * time.Millisecond),
			"openai-organization": "org-acme",
		})
		usage := a.json(t)["usage"].(map[string]any)
		if int64(usage["prompt_tokens"].(float64)) != p || usage["completion_tokens"].(float64) < 1 || usage["completion_tokens"].(float64) > 300 {
			t.Fatalf("usage %v", usage)
		}
		// The other key of the organization shares the bucket.
		c.do("POST", "/v1/chat/completions", "Authorization", "Bearer sk-b", chat(400, 300))
		r := c.do("POST", "/v1/chat/completions", "Authorization", "Bearer sk-a", chat(400, 300))
		if r.status != 429 {
			t.Fatalf("third request: status %d, want 429", r.status)
		}
		// 1000−2·cost left, cost asked: the difference takes 10 ms a
		// token to refill.
		wait := time.Duration(3*cost-1000) * 10 * time.Millisecond
		wantHeaders(t, r, map[string]string{"retry-after-ms": itoa(wait.Milliseconds()), "retry-after": itoa(ceilSeconds(wait)),
			"x-ratelimit-remaining-tokens": itoa(1000 - 2*cost)})
		e := r.json(t)["error"].(map[string]any)
		if e["type"] != "tokens" || e["code"] != "rate_limit_exceeded" || !strings.Contains(e["message"].(string), "Please try again in "+openaiDuration(wait)+".") {
			t.Fatalf("refusal body %v", e)
		}
		time.Sleep(wait - 500*time.Millisecond)
		if early := c.do("POST", "/v1/chat/completions", "Authorization", "Bearer sk-a", chat(400, 300)); early.status != 429 {
			t.Fatalf("early retry: status %d", early.status)
		}
		if got := srv.Stats().Total.EarlyRetries; got != 1 {
			t.Fatalf("early retries %d, want 1", got)
		}
		time.Sleep(500 * time.Millisecond)
		if ok := c.do("POST", "/v1/chat/completions", "Authorization", "Bearer sk-a", chat(400, 300)); ok.status != 200 {
			t.Fatalf("retry at the named time: status %d: %s", ok.status, ok.body)
		}
		st, _ := srv.Stats().BucketFor("openai", "org-acme", "tokens")
		if st.Charged != 3*cost || st.PrimaryViolations != 2 || st.EarlyRetries != 1 || st.WindowMode != WindowContinuous {
			t.Fatalf("tokens bucket %+v", st)
		}
	})
}

func TestOpenAIRequestsRefusalNamesRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, Config{APIs: []APIConfig{{Dialect: "openai", Limit: 2, Window: 10 * time.Second,
			Tokens: []TokenConfig{{Token: "sk-a"}}}}})
		c := newClient(t, srv)
		c.do("POST", "/v1/chat/completions", "Authorization", "Bearer sk-a", chat(40, 10))
		c.do("POST", "/v1/chat/completions", "Authorization", "Bearer sk-a", chat(40, 10))
		time.Sleep(2 * time.Second)
		r := c.do("POST", "/v1/chat/completions", "Authorization", "Bearer sk-a", chat(40, 10))
		e := r.json(t)["error"].(map[string]any)
		if r.status != 429 || e["type"] != "requests" || !strings.Contains(e["message"].(string), "Please try again in 3s.") {
			t.Fatalf("status %d, error %v", r.status, e)
		}
		wantHeaders(t, r, map[string]string{"retry-after-ms": "3000", "x-ratelimit-reset-requests": "8s"})
	})
}

func TestOpenAIRefusesWithoutKey(t *testing.T) {
	srv := openaiServer(t, 1000, 0)
	c := newClient(t, srv)
	if a := c.do("POST", "/v1/chat/completions", chat(4, 1)); a.status != 401 {
		t.Fatalf("no key: status %d", a.status)
	}
	if a := c.do("POST", "/v1/chat/completions", "Authorization", "Bearer nope", chat(4, 1)); a.status != 401 {
		t.Fatalf("bad key: status %d", a.status)
	}
}

func anthropicServer(t *testing.T, faults FaultConfig) *Server {
	return mustNew(t, Config{Seed: 7, APIs: []APIConfig{{Dialect: "anthropic", Window: 10 * time.Second, Latency: 100 * time.Millisecond,
		OutputRatio: 0.1, Faults: faults,
		Resources: map[string]ResourceConfig{"input_tokens": {Limit: 5000}, "output_tokens": {Limit: 1000}},
		Tokens:    []TokenConfig{{Token: "sk-ant-a"}}}}})
}

func TestAnthropicCorrectsOutputWhenTheAnswerEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := anthropicServer(t, FaultConfig{})
		c := newClient(t, srv)
		if a := c.do("POST", "/v1/messages", "x-api-key", "sk-ant-a", message(40, 500)); a.status != 400 || !strings.Contains(a.body, "anthropic-version") {
			t.Fatalf("no anthropic-version: status %d %s", a.status, a.body)
		}
		a := c.do("POST", "/v1/messages", "x-api-key", "sk-ant-a", "anthropic-version", "2023-06-01", message(400, 500))
		if a.status != 200 {
			t.Fatalf("status %d: %s", a.status, a.body)
		}
		usage := a.json(t)["usage"].(map[string]any)
		out := int64(usage["output_tokens"].(float64))
		p := promptTokens(t, srv, message(400, 500))
		if int64(usage["input_tokens"].(float64)) != p || out < 25 || out > 75 {
			t.Fatalf("usage %v", usage)
		}
		// The answer left 100 ms after admission: the input bucket
		// refilled 50 of its p; the output bucket 10, and got back
		// 500 − out.
		wantHeaders(t, a, map[string]string{
			"anthropic-ratelimit-input-tokens-remaining":  itoa(5050 - p),
			"anthropic-ratelimit-output-tokens-remaining": itoa(1010 - out),
			"anthropic-ratelimit-requests-limit":          "50",
			"anthropic-ratelimit-input-tokens-reset":      time.Unix(t0+1, 0).UTC().Format(time.RFC3339),
		})
		if got := a.h("anthropic-ratelimit-tokens-remaining"); got != itoa(1010-out) {
			t.Fatalf("tokens-remaining %q, want the output bucket's %d", got, 1010-out)
		}
		st, _ := srv.Stats().BucketFor("anthropic", "user1", "output_tokens")
		if st.Charged != out {
			t.Fatalf("output charged %d, want the real %d", st.Charged, out)
		}
		// Two requests in flight at once each hold max_tokens: the
		// second of 600 does not fit in the 1,000 until the first ends.
		done := make(chan answer)
		go func() {
			done <- c.do("POST", "/v1/messages", "x-api-key", "sk-ant-a", "anthropic-version", "2023-06-01", message(40, 600))
		}()
		synctest.Wait()
		r := c.do("POST", "/v1/messages", "x-api-key", "sk-ant-a", "anthropic-version", "2023-06-01", message(40, 600))
		<-done
		if r.status != 429 || r.h("retry-after") == "" || !strings.Contains(r.body, `"rate_limit_error"`) || !strings.Contains(r.body, "output tokens") {
			t.Fatalf("second in flight: status %d retry-after %q %s", r.status, r.h("retry-after"), r.body)
		}
	})
}

func TestAnthropicOverloadSpendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := anthropicServer(t, FaultConfig{OverloadRate: 0.5})
		c := newClient(t, srv)
		overloaded := 0
		for range 20 {
			a := c.do("POST", "/v1/messages", "x-api-key", "sk-ant-a", "anthropic-version", "2023-06-01", message(40, 10))
			switch a.status {
			case StatusOverloaded:
				if !strings.Contains(a.body, `"overloaded_error"`) {
					t.Fatalf("529 body %s", a.body)
				}
				overloaded++
			case http.StatusOK:
			default:
				t.Fatalf("status %d %s", a.status, a.body)
			}
		}
		st := srv.Stats()
		in, _ := st.BucketFor("anthropic", "user1", "input_tokens")
		if overloaded == 0 || overloaded == 20 || st.Total.ServerErrors != int64(overloaded) || in.Charged != promptTokens(t, srv, message(40, 10))*int64(20-overloaded) {
			t.Fatalf("%d overloaded; stats %+v, input %+v", overloaded, st.Total, in)
		}
	})
}

func TestOpenAIDurationFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		17 * time.Millisecond: "17ms", time.Second: "1s", 6 * time.Minute: "6m0s",
		2*time.Minute + 59560*time.Millisecond: "2m59.56s", 2400 * time.Millisecond: "2.4s",
	} {
		if got := openaiDuration(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}

func TestTokenizerIsPerModelSeededAndCountsFraming(t *testing.T) {
	a := &api{seed: 1}
	b := &api{seed: 1}
	body := func(model string, msgs ...string) int64 {
		var ms []chatMessage
		for _, m := range msgs {
			raw, _ := json.Marshal(m)
			ms = append(ms, chatMessage{Content: raw})
		}
		return a.tokenizer(model).prompt(nil, ms)
	}
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40)
	ratios := map[float64]bool{}
	for _, model := range []string{"gpt-4o", "gpt-4o-mini", "claude-sonnet-4-5", "m"} {
		tk := a.tokenizer(model)
		if tk.perToken < 3 || tk.perToken >= 5 || tk != b.tokenizer(model) {
			t.Fatalf("%s: %v characters a token (another server of the seed: %v)", model, tk.perToken, b.tokenizer(model))
		}
		ratios[tk.perToken] = true
		n := tk.text(text)
		lo, hi := float64(len(text))/tk.perToken*0.9, float64(len(text))/tk.perToken*1.1+1
		if float64(n) < lo || float64(n) > hi {
			t.Fatalf("%s: %d tokens for %d characters at %v a token", model, n, len(text), tk.perToken)
		}
		// One message of the text costs its text and its framing;
		// split in two, another message's framing more.
		if one := body(model, text); one != n+tokensPerMessage+tokensPerPrompt {
			t.Fatalf("%s: one message %d, text %d", model, one, n)
		}
		half := len(text) / 2
		two := body(model, text[:half], text[half:])
		if want := tk.text(text[:half]) + tk.text(text[half:]) + 2*tokensPerMessage + tokensPerPrompt; two != want {
			t.Fatalf("%s: two messages %d, want %d", model, two, want)
		}
		// Other scripts cost nearly a token a character.
		if jp := tk.text(strings.Repeat("東京", 100)); jp < 140 {
			t.Fatalf("%s: 200 kanji are %d tokens", model, jp)
		}
	}
	if len(ratios) < 3 {
		t.Fatalf("ratios %v: the models should not share one", ratios)
	}
	if (&api{seed: 2}).tokenizer("m") == a.tokenizer("m") {
		t.Fatal("another seed drew the same tokenizer")
	}
	// The same length of other text costs a little more or less.
	tk := a.tokenizer("m")
	seen := map[int64]bool{}
	for i := range 20 {
		seen[tk.text(strings.Repeat(string(rune('a'+i)), 400))] = true
	}
	if len(seen) < 3 {
		t.Fatalf("20 texts of 400 characters cost %v", seen)
	}
}
