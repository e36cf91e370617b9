package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/sim"
)

const traceToken = "ghp_TRACEsecretTRACEsecretTRACE0a1b2"

// traceUpstream answers like GitHub: the first request is refused by a
// secondary limit with Retry-After: 3, the others are answered with an
// entity tag, and a request carrying a tag gets a free 304. It keeps the
// traceparent each request carried.
type traceUpstream struct {
	mu      sync.Mutex
	calls   int
	parents []string
}

func (u *traceUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.calls++
	n := u.calls
	u.parents = append(u.parents, r.Header.Get("Traceparent"))
	u.mu.Unlock()
	h := w.Header()
	h.Set("X-RateLimit-Limit", "5000")
	h.Set("X-RateLimit-Remaining", "4000")
	h.Set("X-RateLimit-Reset", "4102444800")
	h.Set("X-RateLimit-Resource", "core")
	switch {
	case n == 1:
		h.Set("Retry-After", "3")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`)
	case r.Header.Get("If-None-Match") != "":
		w.WriteHeader(http.StatusNotModified)
	default:
		h.Set("ETag", `"v1"`)
		io.WriteString(w, `{"login":"octocat"}`)
	}
}

// tracedTransport is handlerTransport with traceToken, an in-memory span
// recorder and the W3C trace context propagator.
func tracedTransport(t *testing.T, h http.Handler) (*Transport, *tracetest.SpanRecorder, trace.TracerProvider) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	tr := handlerTransport(t, h, func(o *Options) {
		o.SkipValidation = true
		o.Pools = map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 2, traceToken, "test"))}
		o.TracerProvider = tp
		o.Propagator = propagation.TraceContext{}
	})
	return tr, sr, tp
}

func attrMap(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestRequestSpan follows one request refused by a secondary limit and
// answered on its second attempt, then a repeat answered from the cache:
// each request's span is the child of the caller's, carries the
// rate-limit facts, has a wait span for the refusal's pause and an event
// per attempt, and the upstream saw it as the parent. No token, and no
// secret of the URL, is in any attribute of any span or event.
func TestRequestSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &traceUpstream{}
		tr, sr, tp := tracedTransport(t, up)
		ctx, caller := tp.Tracer("test").Start(context.Background(), "caller")
		target := "http://api.test/user?page=2&access_token=QUERYSECRET"
		for range 2 {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
		}
		caller.End()

		var reqs, waits []sdktrace.ReadOnlySpan
		for _, s := range sr.Ended() {
			switch s.Name() {
			case SpanRequest:
				reqs = append(reqs, s)
			case SpanWait:
				waits = append(waits, s)
			}
		}
		if len(reqs) != 2 || len(waits) != 1 {
			t.Fatalf("%d request spans and %d wait spans, want 2 and 1", len(reqs), len(waits))
		}
		first, second := reqs[0], reqs[1]
		if first.SpanKind() != trace.SpanKindClient || first.Parent().SpanID() != caller.SpanContext().SpanID() ||
			first.SpanContext().TraceID() != caller.SpanContext().TraceID() {
			t.Errorf("request span kind %v parent %v, want a client span under the caller's %v", first.SpanKind(), first.Parent().SpanID(), caller.SpanContext().SpanID())
		}
		a := attrMap(first.Attributes())
		want := map[attribute.Key]attribute.Value{
			"http.request.method":       attribute.StringValue("GET"),
			"url.full":                  attribute.StringValue("http://api.test/user?page=2&access_token=REDACTED"),
			"server.address":            attribute.StringValue("api.test"),
			"server.port":               attribute.IntValue(80),
			"http.response.status_code": attribute.IntValue(200),
			AttrProvider:                attribute.StringValue("github"),
			AttrResource:                attribute.StringValue("core"),
			AttrCredential:              attribute.StringValue("#2 ghp_…a1b2"),
			AttrAttempts:                attribute.IntValue(2),
			AttrWait:                    attribute.Float64Value(3),
			AttrCache:                   attribute.StringValue("miss"),
			AttrCacheHit:                attribute.BoolValue(false),
		}
		for k, v := range want {
			if a[k] != v {
				t.Errorf("request span %s = %v, want %v", k, a[k].String(), v.String())
			}
		}
		// The bucket is the state's key: the provider (with its base
		// URL), the owner (unknown yet: the token's digest), the resource.
		if b := a[AttrBucket].AsString(); !strings.HasPrefix(b, "github http://api.test/token:") || !strings.HasSuffix(b, "/core") {
			t.Errorf("bucket %q, want github http://api.test/token:DIGEST/core", b)
		}
		if d := first.EndTime().Sub(first.StartTime()); d != 3*time.Second {
			t.Errorf("request span lasted %v, want the 3 s pause", d)
		}

		w := waits[0]
		wa := attrMap(w.Attributes())
		if w.Parent().SpanID() != first.SpanContext().SpanID() || wa[AttrWaitReason].AsString() != WaitQuota ||
			wa[AttrWait].AsFloat64() != 3 || wa[AttrCredential].AsString() != "#2 ghp_…a1b2" {
			t.Errorf("wait span parent %v attributes %v, want the request's child waiting 3 s for quota", w.Parent().SpanID(), wa)
		}

		ev := first.Events()
		if len(ev) != 2 {
			t.Fatalf("%d events, want one per attempt", len(ev))
		}
		e1, e2 := attrMap(ev[0].Attributes), attrMap(ev[1].Attributes)
		if ev[0].Name != EventAttempt || e1["http.response.status_code"].AsInt64() != 403 || e1[AttrLimited].AsString() != "secondary" ||
			e1[AttrRetryAfter].AsFloat64() != 3 || e1[AttrNext].AsString() != "wait_and_retry" {
			t.Errorf("first attempt %v, want the 403 secondary refusal waited out", e1)
		}
		if e2["http.response.status_code"].AsInt64() != 200 || e2[AttrNext].AsString() != "deliver" || e2[AttrAttempt].AsInt64() != 2 {
			t.Errorf("second attempt %v, want the 200 delivered", e2)
		}

		b := attrMap(second.Attributes())
		if b[AttrCache].AsString() != "revalidated" || !b[AttrCacheHit].AsBool() || b[AttrAttempts].AsInt64() != 1 || b[AttrWait].AsFloat64() != 0 {
			t.Errorf("repeat's span %v, want a cache hit at the first attempt without a wait", b)
		}

		// The upstream saw each send's parent: the request span of
		// its request, in the caller's trace.
		if len(up.parents) != 3 {
			t.Fatalf("upstream saw %d requests", len(up.parents))
		}
		for i, got := range up.parents {
			span := first
			if i == 2 {
				span = second
			}
			want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
			if got != want {
				t.Errorf("request %d carried traceparent %q, want %q", i+1, got, want)
			}
		}

		for _, s := range sr.Ended() {
			noSecret(t, s.Name(), s.Attributes())
			noSecret(t, s.Name()+" status", []attribute.KeyValue{attribute.String("description", s.Status().Description)})
			for _, e := range s.Events() {
				noSecret(t, s.Name()+" event "+e.Name, e.Attributes)
			}
		}
	})
}

// noSecret fails when an attribute's value holds the token or the URL's
// secret, whole or in part beyond what the mask shows.
func noSecret(t *testing.T, where string, kvs []attribute.KeyValue) {
	t.Helper()
	for _, kv := range kvs {
		v := kv.Value.String()
		for _, secret := range []string{traceToken, traceToken[4:20], "QUERYSECRET", "TRACEsecret"} {
			if strings.Contains(v, secret) {
				t.Errorf("%s: attribute %s = %q holds a secret", where, kv.Key, v)
			}
		}
	}
}

// TestNoTracingConfigured: with no tracer provider in the options nor set
// for the program, and no span in the request's context, nothing is
// recorded and nothing travels upstream.
func TestNoTracingConfigured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &traceUpstream{calls: 1} // no refusal
		var sent context.Context
		tr := handlerTransport(t, nil, func(o *Options) {
			o.SkipValidation = true
			o.Base = rtFunc(func(r *http.Request) (*http.Response, error) {
				sent = r.Context()
				return handlerRT{up}.RoundTrip(r)
			})
		})
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/user", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		if s := trace.SpanFromContext(sent); s.IsRecording() || s.SpanContext().IsValid() {
			t.Errorf("the send's context holds a span %v (recording %v)", s.SpanContext(), s.IsRecording())
		}
		if up.parents[0] != "" {
			t.Errorf("upstream got traceparent %q", up.parents[0])
		}
	})
}

// TestSampledOutRequestStillPropagates: a request its sampler drops
// records nothing, but the upstream still learns the trace and that it is
// not sampled, as W3C trace context asks.
func TestSampledOutRequestStillPropagates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &traceUpstream{calls: 1}
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr), sdktrace.WithSampler(sdktrace.NeverSample()))
		tr := handlerTransport(t, up, func(o *Options) {
			o.SkipValidation = true
			o.TracerProvider = tp
			o.Propagator = propagation.TraceContext{}
		})
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/user", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		if n := len(sr.Ended()); n != 0 {
			t.Errorf("%d spans recorded, want none", n)
		}
		if p := up.parents[0]; !strings.HasPrefix(p, "00-") || !strings.HasSuffix(p, "-00") {
			t.Errorf("upstream got traceparent %q, want one flagged not sampled", p)
		}
	})
}

func TestTraceURL(t *testing.T) {
	cases := map[string]string{
		"https://api.github.com/user":                                   "https://api.github.com/user",
		"https://user:pass@git.example.com/api/v4/projects?per_page=10": "https://REDACTED:REDACTED@git.example.com/api/v4/projects?per_page=10",
		"https://TOKEN@git.example.com/x":                               "https://REDACTED:REDACTED@git.example.com/x",
		"https://h/x?private_token=abc&page=2#frag":                     "https://h/x?private_token=REDACTED&page=2",
		"https://h/x?X-Amz-Signature=s&api_key=k&sig=z&q=repo:o/r":      "https://h/x?X-Amz-Signature=REDACTED&api_key=REDACTED&sig=REDACTED&q=repo:o/r",
		"https://h/x?client%5Fsecret=s":                                 "https://h/x?client%5Fsecret=REDACTED",
	}
	for in, want := range cases {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := traceURL(u); got != want {
			t.Errorf("traceURL(%s) = %s, want %s", in, got, want)
		}
	}
}

// BenchmarkTracing is BenchmarkTransportOverheadInProcess with tracing
// off and on: untraced (an explicit no-op provider: not even a no-op
// span), off (the default: OpenTelemetry's global no-op), sampled-out
// (the SDK, a sampler that drops everything: only the traceparent goes
// upstream), and on (every request recorded and exported to an in-memory
// exporter, synchronously or through the SDK's batcher as the CLI does).
func BenchmarkTracing(b *testing.B) {
	const base = "http://api.test"
	exp := tracetest.NewInMemoryExporter()
	sdk := func(opts ...sdktrace.TracerProviderOption) func(*Options) {
		return func(o *Options) {
			o.TracerProvider = sdktrace.NewTracerProvider(opts...)
			o.Propagator = propagation.TraceContext{}
		}
	}
	cases := []struct {
		name string
		tune func(*Options)
	}{
		{"untraced", func(o *Options) { o.TracerProvider = noop.NewTracerProvider() }},
		{"off", func(*Options) {}},
		{"sampled-out", sdk(sdktrace.WithSampler(sdktrace.NeverSample()))},
		{"on-sync", sdk(sdktrace.WithSyncer(exp))},
		{"on-batch", sdk(sdktrace.WithBatcher(exp))},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			tr := benchTransport(b, handlerRT{githubLike()}, base, c.tune)
			req, _ := http.NewRequest(http.MethodGet, base+"/user", nil)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if n++; n%1024 == 0 {
					exp.Reset() // the exporter keeps every span
				}
			}
		})
	}
}

// TestWaitErrorSpan: a request that would wait beyond its max wait ends
// its span as a failure, saying when quota returns; one whose caller
// waits itself (a batch's WithMaxWait of 0) is no failure.
func TestWaitErrorSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reset := time.Now().Add(time.Hour)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-RateLimit-Limit", "60")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
			io.WriteString(w, "{}")
		})
		tr, sr, _ := tracedTransport(t, h)
		for i, ctx := range []context.Context{context.Background(), context.Background(), WithMaxWait(context.Background(), 0)} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.test/a", nil)
			resp, err := tr.RoundTrip(req)
			if i == 0 {
				if err != nil {
					t.Fatal(err)
				}
				drain(resp) // learns that nothing is left
				continue
			}
			var we *WaitError
			if !errors.As(err, &we) {
				t.Fatalf("request %d: err = %v, want a WaitError", i+1, err)
			}
		}
		spans := sr.Ended()
		if len(spans) != 3 {
			t.Fatalf("%d spans, want 3", len(spans))
		}
		failed, handedBack := spans[1], spans[2]
		a := attrMap(failed.Attributes())
		until, _ := time.Parse(time.RFC3339Nano, a[AttrWaitUntil].AsString())
		if failed.Status().Code != codes.Error || a["error.type"].AsString() != "ratekeeper.WaitError" ||
			until.Before(reset) || until.After(reset.Add(2*time.Second)) || a[AttrAttempts].AsInt64() != 0 ||
			a[AttrCredential].AsString() != "#2 ghp_…a1b2" {
			t.Errorf("span of the request beyond its max wait: status %v, attributes %v", failed.Status(), a)
		}
		b := attrMap(handedBack.Attributes())
		if handedBack.Status().Code != codes.Unset || b["error.type"].AsString() != "" || b[AttrWaitUntil].AsString() == "" {
			t.Errorf("span of the request whose caller waits: status %v, attributes %v", handedBack.Status(), b)
		}
	})
}

// TestRetrySpans: a request resent after network errors shows each send
// as an attempt event with its error, and each backoff as a wait span.
func TestRetrySpans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		up := &traceUpstream{calls: 1}
		tr, sr, _ := tracedTransport(t, nil)
		tr.base = rtFunc(func(req *http.Request) (*http.Response, error) {
			if calls++; calls < 3 {
				return nil, io.ErrUnexpectedEOF
			}
			return handlerRT{up}.RoundTrip(req)
		})
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/x", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		var waits []float64
		var request sdktrace.ReadOnlySpan
		for _, s := range sr.Ended() {
			switch s.Name() {
			case SpanWait:
				a := attrMap(s.Attributes())
				if a[AttrWaitReason].AsString() != WaitBackoff {
					t.Errorf("wait span %v, want a backoff", a)
				}
				waits = append(waits, a[AttrWait].AsFloat64())
			case SpanRequest:
				request = s
			}
		}
		// Full jitter at 0.5: 1 s then 2 s.
		if len(waits) != 2 || waits[0] != 1 || waits[1] != 2 {
			t.Errorf("backoff waits %v, want [1 2]", waits)
		}
		var got []string
		for _, e := range request.Events() {
			a := attrMap(e.Attributes)
			got = append(got, a["error.type"].AsString()+"→"+a[AttrNext].AsString())
		}
		want := []string{"*errors.errorString→back_off_and_retry", "*errors.errorString→back_off_and_retry", "→deliver"}
		if !slices.Equal(got, want) {
			t.Errorf("attempts %q, want %q", got, want)
		}
		if a := attrMap(request.Attributes()); a[AttrAttempts].AsInt64() != 3 || a[AttrWait].AsFloat64() != 0 {
			t.Errorf("request span %v, want 3 attempts and no wait for quota", a)
		}
	})
}

// TestLearningWaitSpans: while a pool learns which tokens share a bucket,
// requests take turns, and each one's wait for its turn is a wait span
// with the reason learning, under its request span.
func TestLearningWaitSpans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tokens := []sim.TokenConfig{{Token: "tok-a1", Owner: "alice"}, {Token: "tok-a2", Owner: "alice"}}
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 100, Window: time.Minute, Tokens: tokens, Latency: 100 * time.Millisecond},
			[]string{"tok-a1", "tok-a2"}, func(o *Options) {
				o.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
			})
		if codes := s.runPaths(t, "/repos/o/r%d", 4, 4); codes[http.StatusOK] != 4 {
			t.Fatalf("statuses %v", codes)
		}
		requests := map[trace.SpanID]bool{}
		for _, sp := range sr.Ended() {
			if sp.Name() == SpanRequest {
				requests[sp.SpanContext().SpanID()] = true
			}
		}
		learning := 0
		for _, sp := range sr.Ended() {
			if sp.Name() != SpanWait {
				continue
			}
			if !requests[sp.Parent().SpanID()] {
				t.Errorf("wait span %v is no request span's child", attrMap(sp.Attributes()))
			}
			if a := attrMap(sp.Attributes()); a[AttrWaitReason].AsString() == WaitLearning && a[AttrWait].AsFloat64() > 0 {
				learning++
			}
		}
		if learning == 0 {
			t.Errorf("no learning wait among %d spans", len(sr.Ended()))
		}
	})
}
