package transport

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

func TestParseCosts(t *testing.T) {
	for v, want := range map[string]Costs{
		"1830":                                 {"": 1830},
		" 1830 ":                               {"": 1830},
		"input-tokens=1200, output_tokens=300": {"input-tokens": 1200, "output-tokens": 300},
		"700, requests=2":                      {"": 700, "requests": 2},
		"points=51":                            {"points": 51},
		"Tokens=9":                             {"tokens": 9},
	} {
		got, err := ParseCosts(v)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseCosts(%q) = %v, %v; want %v", v, got, err, want)
		}
		if back, err := ParseCosts(got.String()); err != nil || !reflect.DeepEqual(back, want) {
			t.Errorf("%q → %q → %v, %v", v, got.String(), back, err)
		}
	}
	for _, v := range []string{"", "abc", "0", "-3", "inputs=5", "=5", "tokens=", "tokens=1.5", "1, tokens=x"} {
		if c, err := ParseCosts(v); err == nil {
			t.Errorf("ParseCosts(%q) = %v, want an error", v, c)
		}
	}
	if got := (Costs{"output-tokens": 300, "": 12, "input-tokens": 1200}).String(); got != "12, input-tokens=1200, output-tokens=300" {
		t.Errorf("String %q", got)
	}
}

// A caller's costs name each bucket: an Anthropic message reserves the
// input and output tokens named, through WithCosts or the header, and the
// header does not reach the server; WithCost still sets the pacing
// bucket's (Anthropic's output tokens) alone.
func TestCallerCostsNameEachBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		held := map[string]int64{}
		var sentHeader []string
		var s *simSetup
		s = newSim(t, sim.APIConfig{Dialect: "anthropic", Window: 10 * time.Second,
			Resources: map[string]sim.ResourceConfig{"input_tokens": {Limit: 100000}, "output_tokens": {Limit: 100000}},
			Tokens:    []sim.TokenConfig{{Token: "sk-ant-1"}}}, []string{"sk-ant-1"}, func(o *Options) {
			base := o.Base
			o.Base = roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodPost {
					sentHeader = append(sentHeader, r.Header.Get(CostHeader))
					bs, _ := s.t.state.Buckets(context.Background())
					for id, b := range bs {
						held[id.Resource] = b.InFlight(time.Now())
					}
				}
				return base.RoundTrip(r)
			})
		})
		send := func(ctx context.Context, header string) map[string]int64 {
			t.Helper()
			clear(held)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/messages", strings.NewReader(chatBody(400, 2048)))
			if header != "" {
				req.Header.Set(CostHeader, header)
			}
			resp, err := s.t.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
			return map[string]int64{"requests": held["requests"], "input-tokens": held["input-tokens"], "output-tokens": held["output-tokens"]}
		}
		send(t.Context(), "") // the first answer tells the buckets
		want := map[string]int64{"requests": 1, "input-tokens": 1200, "output-tokens": 300}
		if got := send(WithCosts(t.Context(), Costs{"input_tokens": 1200, "output-tokens": 300}), ""); !reflect.DeepEqual(got, want) {
			t.Errorf("WithCosts: held %v, want %v", got, want)
		}
		if got := send(t.Context(), "input-tokens=1200, output-tokens=300"); !reflect.DeepEqual(got, want) {
			t.Errorf("header: held %v, want %v", got, want)
		}
		// The context wins over the header, bucket by bucket.
		want = map[string]int64{"requests": 1, "input-tokens": 1200, "output-tokens": 50}
		if got := send(WithCosts(t.Context(), Costs{"output-tokens": 50}), "input-tokens=1200, output-tokens=300"); !reflect.DeepEqual(got, want) {
			t.Errorf("both: held %v, want %v", got, want)
		}
		// A number alone is the pacing bucket's, the others estimated.
		got := send(WithCost(t.Context(), 300), "")
		if got["output-tokens"] != 300 || got["input-tokens"] < 90 || got["input-tokens"] > 200 {
			t.Errorf("WithCost(300): held %v, want 300 output tokens and the prompt's estimate", got)
		}
		for _, h := range sentHeader {
			if h != "" {
				t.Fatalf("%s reached the server: %q", CostHeader, h)
			}
		}
	})
}
