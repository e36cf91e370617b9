package ratekeeper

import (
	"context"
	"io"
	"net/http"
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
