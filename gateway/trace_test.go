package gateway

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

// recordParents sends with base and keeps each request's traceparent.
type recordParents struct {
	base    http.RoundTripper
	mu      sync.Mutex
	parents []string
}

func (r *recordParents) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.parents = append(r.parents, req.Header.Get("Traceparent"))
	r.mu.Unlock()
	return r.base.RoundTrip(req)
}

// TestGatewayContinuesClientTrace: a client's traceparent makes the
// gateway's server span its child; the transport's request span is the
// server span's child, and the upstream gets the request span as its
// parent. A request the gateway held for quota shows that wait as a
// child span of its server span.
func TestGatewayContinuesClientTrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			clientTrace  = "0af7651916cd43dd8448eb211c80319c"
			clientParent = "b7ad6b7169203331"
		)
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		var up *recordParents
		api := githubAPI(1, 10*time.Second, sim.TokenConfig{Token: "tok-trace-gateway-secret-1", Owner: "alice"})
		e := newEnv(t, []sim.APIConfig{api}, map[string][]string{"github": {"tok-trace-gateway-secret-1"}}, func(o *Options) {
			up = &recordParents{base: o.Client.Base}
			o.Client.Base = up
			o.Client.TracerProvider = tp
			o.Client.Propagator = propagation.TraceContext{}
		})
		// no-cache: the second request must reach the server rather than
		// be served the first's fresh answer.
		h := http.Header{"Traceparent": {"00-" + clientTrace + "-" + clientParent + "-01"}, "Cache-Control": {"no-cache"}}
		for i := range 2 {
			// The second request finds the bucket's one request spent
			// and waits for the next window.
			if resp, body := e.do(t, http.MethodGet, "/github/repos/o/r", h, nil); resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d: %d %s", i+1, resp.StatusCode, body)
			}
		}

		byName := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range sr.Ended() {
			byName[s.Name()] = append(byName[s.Name()], s)
			for _, kv := range s.Attributes() {
				noSecret(t, s.Name()+" "+string(kv.Key), kv.Value.String(), "tok-trace-gateway-secret-1")
			}
		}
		servers := byName["GET /github/*"]
		if len(servers) != 2 {
			t.Fatalf("spans %v, want two server spans", names(sr.Ended()))
		}
		for _, s := range servers {
			if s.SpanKind() != trace.SpanKindServer || s.Parent().TraceID().String() != clientTrace ||
				s.Parent().SpanID().String() != clientParent || !s.Parent().IsRemote() {
				t.Errorf("server span kind %v parent %v, want a server span under the client's %s", s.SpanKind(), s.Parent(), clientParent)
			}
		}
		// Each proxied request's transport spans (the second's first
		// try handed its wait back) are its server span's children; the
		// upstream saw the one that sent.
		reqs := byName[transport.SpanRequest]
		var sent []sdktrace.ReadOnlySpan
		for _, r := range reqs {
			if r.Parent().SpanID() != servers[0].SpanContext().SpanID() && r.Parent().SpanID() != servers[1].SpanContext().SpanID() {
				t.Errorf("request span's parent %v is no server span", r.Parent().SpanID())
			}
			if r.Status().Code != 0 {
				t.Errorf("request span status %v: a wait handed back to the gateway is no failure", r.Status())
			}
			if attrs := attrMap(r.Attributes()); attrs[transport.AttrAttempts].AsInt64() == 1 {
				sent = append(sent, r)
			}
		}
		if len(sent) != 2 || len(up.parents) != 2 {
			t.Fatalf("%d request spans sent, upstream saw %d requests; want 2 and 2", len(sent), len(up.parents))
		}
		for i, p := range up.parents {
			want := "00-" + clientTrace + "-" + sent[i].SpanContext().SpanID().String() + "-01"
			if p != want {
				t.Errorf("upstream request %d: traceparent %q, want %q", i+1, p, want)
			}
		}
		waits := byName[transport.SpanWait]
		if len(waits) != 1 || waits[0].Parent().SpanID() != servers[1].SpanContext().SpanID() {
			t.Fatalf("wait spans %v, want one under the second server span", waits)
		}
		w := attrMap(waits[0].Attributes())
		if w[transport.AttrWait].AsFloat64() <= 0 || w[transport.AttrWaitReason].AsString() != transport.WaitQuota {
			t.Errorf("wait span %v, want a wait for quota", w)
		}
		if got := attrMap(servers[1].Attributes())[transport.AttrWait].AsFloat64(); got != w[transport.AttrWait].AsFloat64() {
			t.Errorf("server span waited %v, want the wait span's %v", got, w[transport.AttrWait].AsFloat64())
		}
	})
}

func attrMap(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func names(spans []sdktrace.ReadOnlySpan) string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return strings.Join(out, ", ")
}
