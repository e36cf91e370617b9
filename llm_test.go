package ratekeeper

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// A batch sends each request with a max wait of zero and parks the ones
// that cannot go: a request short of output tokens while others are in
// flight waits for their answers, which give back what max_tokens
// over-reserved, not for the tokens to drip back at the refill rate.
func TestBatchOfMessagesWaitsOnAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := sim.New(sim.Config{Seed: 1, APIs: []sim.APIConfig{anthropicOutput}})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewTransport(Options{Providers: []string{"anthropic=http://sim.test/anthropic"},
			Tokens: map[string][]string{"anthropic": {"sk-ant-1"}}, Base: srv.Transport("")})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		ok := 0
		bt := NewBatch(tr, BatchOptions{InFlight: 16, OnResult: func(r BatchResult) {
			if r.Err == nil && r.Response.StatusCode == http.StatusOK {
				ok++
				_, _ = io.Copy(io.Discard, r.Response.Body)
			}
		}})
		for _, j := range anthropicJobs("http://sim.test")[:30] {
			req, _ := http.NewRequest(http.MethodPost, j.url, strings.NewReader(j.body))
			if err := bt.Add(req); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		if err := bt.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		// 30 answers of about 205 tokens fit in the first 8,000; three
		// requests of max_tokens 2,048 fit at once, 200 ms each: 2 s;
		// 4.2 s measured (parked until their tokens dripped back, 10.6 s).
		if elapsed, st := time.Since(start), srv.Stats().Total; ok != 30 || st.Violations != 0 || elapsed > 6*time.Second {
			t.Fatalf("%d of 30 answered 200 in %v, %d refusals", ok, elapsed, st.Violations)
		}
	})
}

// Through the gateway, a caller gives a request's cost in the
// X-Ratekeeper-Cost header: it is reserved, and not sent on; the answer
// carries the pool's tokens in the IETF fields, unit named.
func TestGatewayCostHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "openai", Window: 10 * time.Second,
			Resources: map[string]sim.ResourceConfig{"tokens": {Limit: 1000}}, Tokens: []sim.TokenConfig{{Token: "sk-1"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		base := srv.Transport("")
		leaked := false
		gw, err := NewGateway(GatewayOptions{Client: Options{Providers: []string{"openai=http://sim.test"},
			Tokens: map[string][]string{"openai": {"sk-1"}}, MaxWait: time.Minute,
			Base: roundTripper(func(r *http.Request) (*http.Response, error) {
				leaked = leaked || r.Header.Get(CostHeader) != ""
				return base.RoundTrip(r)
			})}})
		if err != nil {
			t.Fatal(err)
		}
		defer gw.Close()
		send := func(cost string) (*httptest.ResponseRecorder, time.Duration) {
			req := httptest.NewRequest(http.MethodPost, "/openai/chat/completions", strings.NewReader(chatJSON(40, 10)))
			req.Header.Set("Content-Type", "application/json")
			if cost != "" {
				req.Header.Set(CostHeader, cost)
			}
			rec := httptest.NewRecorder()
			start := time.Now()
			gw.ServeHTTP(rec, req)
			return rec, time.Since(start)
		}
		charged := func() int64 {
			var n int64
			for _, b := range srv.Stats().Buckets {
				if b.Resource == "tokens" {
					n = b.Charged
				}
			}
			return n
		}
		if rec, _ := send(""); rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		// 1,000 − c left: a request said to cost 1,000 waits for c to
		// drip back, 10 ms a token.
		c := charged()
		rec, w := send("1000")
		want := time.Duration(c) * 10 * time.Millisecond
		if rec.Code != http.StatusOK || w < want || w > want+100*time.Millisecond || leaked {
			t.Fatalf("status %d after %v, want %v; header sent on: %v", rec.Code, w, want, leaked)
		}
		// The same, the bucket named: what the server charged the
		// last one drips back first.
		want = time.Duration(charged()-c) * 10 * time.Millisecond
		if rec, w := send("tokens=1000, requests=1"); rec.Code != http.StatusOK || w < want || w > want+100*time.Millisecond || leaked {
			t.Fatalf("named: status %d after %v, want %v; header sent on: %v", rec.Code, w, want, leaked)
		}
		if p := rec.Header().Get("RateLimit-Policy"); p != `"tokens";q=1000;qu="tokens"` {
			t.Fatalf("RateLimit-Policy %q", p)
		}
		if !strings.HasPrefix(rec.Header().Get("RateLimit"), `"tokens";r=`) {
			t.Fatalf("RateLimit %q", rec.Header().Get("RateLimit"))
		}
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
