package transport

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/ratekeeper/ratekeeper/sim"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 3, Window: time.Hour, ExhaustedStatus: 429,
		Tokens: []sim.TokenConfig{{Token: "tok-a", Owner: "alice"}}}, []string{"tok-a"}, func(o *Options) {
		o.Metrics = m
		o.MaxWait = time.Second // the fourth request would wait an hour
	})
	drain(s.get(t, "/repos/o/r"))
	drain(s.get(t, "/repos/o/r")) // fresh: no request
	req, _ := http.NewRequest(http.MethodGet, s.base+"/repos/o/r", nil)
	req.Header.Set("Cache-Control", "no-cache")
	resp, err := s.t.RoundTrip(req) // revalidated
	if err != nil {
		t.Fatal(err)
	}
	drain(resp)
	if got := testutil.ToFloat64(m.served.WithLabelValues("github", "core", "fresh")); got != 1 {
		t.Fatalf("cache_served{fresh} = %v", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("github", "core", "200", "miss")); got != 1 {
		t.Fatalf("requests{miss} = %v", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("github", "core", "304", "revalidated")); got != 1 {
		t.Fatalf("requests{revalidated} = %v", got)
	}
	if got := testutil.ToFloat64(m.remaining.WithLabelValues("github", "#1 …", "core")); got != 2 {
		t.Fatalf("remaining = %v, want 2 (one fetch spent)", got)
	}
	if got := testutil.ToFloat64(m.limit.WithLabelValues("github", "#1 …", "core")); got != 3 {
		t.Fatalf("limit = %v", got)
	}
	// The text exposition never carries a token.
	out, err := testutil.CollectAndFormat(m.remaining, expfmt.TypeTextPlain)
	if err != nil || strings.Contains(string(out), "tok-a") {
		t.Fatalf("exposition %q (%v)", out, err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Fatal("registering twice should fail")
	}
}
