package transport

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// stripRateHeaders makes every answer lose its rate-limit headers while
// strip is set, as a proxy that drops them would.
func stripRateHeaders(strip *atomic.Bool) func(*Options) {
	return func(o *Options) {
		base := o.Base
		o.Base = roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := base.RoundTrip(r)
			if err == nil && strip.Load() {
				for k := range resp.Header {
					if l := strings.ToLower(k); strings.Contains(l, "ratelimit") || strings.HasPrefix(l, "retry-after") {
						delete(resp.Header, k)
					}
				}
			}
			return resp, err
		})
	}
}

// remainingOf is what the client holds left of the bucket of resource.
func remainingOf(t *testing.T, tr *Transport, resource string) int64 {
	t.Helper()
	bs, err := tr.state.Buckets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for id, b := range bs {
		if id.Resource == resource {
			return b.Remaining
		}
	}
	t.Fatalf("no %s bucket in %v", resource, bs)
	return 0
}

// answerUsageOf sends body and returns the answer's usage.
func answerUsageOf(t *testing.T, s *simSetup, path, body string) map[string]int64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.base+path, strings.NewReader(body))
	resp, err := s.t.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	var a struct {
		Usage map[string]int64 `json:"usage"`
	}
	if err := json.Unmarshal([]byte(drain(resp)), &a); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	return a.Usage
}

// An answer without rate-limit headers settles each bucket from the usage
// its body states: Anthropic's output tokens count what the answer wrote,
// not the max_tokens reserved, and its input tokens what the prompt cost.
func TestUsageSettlesBucketsWhenHeadersAreAbsent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var strip atomic.Bool
		s := newSim(t, sim.APIConfig{Dialect: "anthropic", Window: 10 * time.Second, OutputRatio: 0.1,
			Resources: map[string]sim.ResourceConfig{"input_tokens": {Limit: 100000}, "output_tokens": {Limit: 8000}},
			Tokens:    []sim.TokenConfig{{Token: "sk-ant-1"}}}, []string{"sk-ant-1"}, stripRateHeaders(&strip))
		// The first answer's headers tell the buckets.
		answerUsageOf(t, s, "/messages", chatBody(400, 2048))
		strip.Store(true)
		for range 3 {
			out0, in0 := remainingOf(t, s.t, "output-tokens"), remainingOf(t, s.t, "input-tokens")
			u := answerUsageOf(t, s, "/messages", chatBody(400, 2048))
			out1, in1 := remainingOf(t, s.t, "output-tokens"), remainingOf(t, s.t, "input-tokens")
			if out0-out1 != u["output_tokens"] || in0-in1 != u["input_tokens"] {
				t.Fatalf("output tokens %d → %d, input %d → %d; the answer used %v", out0, out1, in0, in1, u)
			}
		}
	})
}

// OpenAI's tokens bucket is charged the prompt and max_tokens: without
// headers it is settled with the prompt the usage states.
func TestUsageSettlesOpenAITokensWhenHeadersAreAbsent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var strip atomic.Bool
		s := newSim(t, sim.APIConfig{Dialect: "openai", Window: 10 * time.Second,
			Resources: map[string]sim.ResourceConfig{"tokens": {Limit: 100000}},
			Tokens:    []sim.TokenConfig{{Token: "sk-1"}}}, []string{"sk-1"}, stripRateHeaders(&strip))
		answerUsageOf(t, s, "/chat/completions", chatBody(400, 300))
		strip.Store(true)
		// A prompt of another length: the estimate errs, the usage not.
		before := remainingOf(t, s.t, "tokens")
		u := answerUsageOf(t, s, "/chat/completions", chatBody(1000, 300))
		if got := before - remainingOf(t, s.t, "tokens"); got != u["prompt_tokens"]+300 {
			t.Fatalf("tokens settled %d, want the prompt's %d + 300", got, u["prompt_tokens"])
		}
	})
}

// A streamed answer is not read ahead of its caller: the round trip
// returns while its body has sent nothing.
func TestStreamedAnswerNotReadAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pr, pw := io.Pipe()
		s := newSim(t, sim.APIConfig{Dialect: "anthropic", Tokens: []sim.TokenConfig{{Token: "sk-ant-1"}}}, []string{"sk-ant-1"}, func(o *Options) {
			o.Base = roundTripFunc(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: pr, Request: r}, nil
			})
		})
		req, _ := http.NewRequest(http.MethodPost, s.base+"/messages", strings.NewReader(chatBody(40, 100)))
		resp, err := s.t.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, _ = io.WriteString(pw, "event: message_delta\ndata: {\"usage\":{\"output_tokens\":7}}\n\n")
			pw.Close()
		}()
		if b := drain(resp); !strings.Contains(b, `"output_tokens":7`) {
			t.Fatalf("body %q", b)
		}
	})
}
