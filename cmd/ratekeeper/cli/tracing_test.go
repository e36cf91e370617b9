package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace receiver on loopback that keeps what it
// is sent.
type collector struct {
	mu       sync.Mutex
	raw      [][]byte
	services []string
	spans    []*tracepb.Span
}

func startCollector(t *testing.T) (*collector, string) {
	c := &collector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.raw = append(c.raw, b)
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					c.services = append(c.services, kv.Value.GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				c.spans = append(c.spans, ss.Spans...)
			}
		}
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return c, srv.URL
}

// TestTracingExportsWhenEndpointSet: with OTEL_EXPORTER_OTLP_ENDPOINT
// set, a command's requests reach the collector as spans by the time the
// command has exited, named after OTEL_SERVICE_NAME, with the rate-limit
// facts and no token in anything sent.
func TestTracingExportsWhenEndpointSet(t *testing.T) {
	col, endpoint := startCollector(t)
	_, url := startSim(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_SERVICE_NAME", "rk-test")
	before := otel.GetTracerProvider()
	_, stderr, code := run(t, "", "get", "--provider", "github="+url, url+"/repos/golang/go")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if otel.GetTracerProvider() != before {
		t.Error("the command left its tracer provider behind")
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	var req *tracepb.Span
	for _, s := range col.spans {
		if s.Name == "ratekeeper.request" {
			req = s
		}
	}
	if req == nil || len(col.services) == 0 || col.services[0] != "rk-test" {
		t.Fatalf("collector got services %v and %d spans, want rk-test's request span", col.services, len(col.spans))
	}
	attrs := map[string]string{}
	for _, kv := range req.Attributes {
		attrs[kv.Key] = kv.Value.String()
	}
	for _, k := range []string{"ratekeeper.provider", "ratekeeper.credential", "ratekeeper.bucket", "ratekeeper.attempts", "ratekeeper.wait_seconds", "http.response.status_code"} {
		if attrs[k] == "" {
			t.Errorf("request span lacks %s: %v", k, attrs)
		}
	}
	for _, b := range col.raw {
		if strings.Contains(string(b), "tok-") {
			t.Fatal("an export holds a token")
		}
	}
}

// TestNoTracingUnlessAsked: without an endpoint, or with the SDK or the
// exporter turned off, a command sets no tracer provider and sends the
// collector nothing.
func TestNoTracingUnlessAsked(t *testing.T) {
	cases := map[string]map[string]string{
		"no endpoint":    {"OTEL_SERVICE_NAME": "rk-test", "OTEL_TRACES_SAMPLER": "always_on"},
		"sdk disabled":   {"OTEL_EXPORTER_OTLP_ENDPOINT": "COLLECTOR", "OTEL_SDK_DISABLED": "true"},
		"exporter none":  {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "COLLECTOR/v1/traces", "OTEL_TRACES_EXPORTER": "none"},
		"empty endpoint": {"OTEL_EXPORTER_OTLP_ENDPOINT": ""},
	}
	for name, env := range cases {
		t.Run(name, func(t *testing.T) {
			col, endpoint := startCollector(t)
			_, url := startSim(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
			for k, v := range env {
				t.Setenv(k, strings.Replace(v, "COLLECTOR", endpoint, 1))
			}
			if stop, err := startTracing(t.Context(), io.Discard); err != nil || !isNoop(stop) {
				t.Fatalf("tracing set up (err %v)", err)
			}
			_, stderr, code := run(t, "", "get", "--provider", "github="+url, url+"/repos/golang/go")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			col.mu.Lock()
			defer col.mu.Unlock()
			if len(col.raw) != 0 {
				t.Fatalf("collector got %d exports", len(col.raw))
			}
		})
	}
}

// isNoop reports whether startTracing set nothing up: the global tracer
// provider is still OpenTelemetry's default, whose spans never record.
func isNoop(stop func()) bool {
	defer stop()
	_, span := otel.Tracer("test").Start(context.Background(), "probe")
	defer span.End()
	return !span.IsRecording()
}

func TestTracingRefusesWhatItCannotDo(t *testing.T) {
	cases := map[string][2]string{
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc": {"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
		"OTEL_PROPAGATORS=b3":              {"OTEL_PROPAGATORS", "b3"},
	}
	for want, kv := range cases {
		t.Run(want, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv(kv[0], kv[1])
			_, stderr, code := run(t, "", "get", "http://127.0.0.1:1/x")
			if code != 2 || !strings.Contains(stderr, want) {
				t.Fatalf("exit %d: %s", code, stderr)
			}
		})
	}
}
