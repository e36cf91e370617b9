package gateway

import (
	"net"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/transport"
	"github.com/ratekeeper/ratekeeper/wiring"
)

// tracerName is the instrumentation scope of the gateway's spans.
const tracerName = "github.com/ratekeeper/ratekeeper/gateway"

// AttrCoalesced says, on a proxied request's server span, that its answer
// was another request's (see Options.CoalesceLimit): the transport's span
// is then under that request's server span.
const AttrCoalesced = attribute.Key("ratekeeper.coalesced")

// gatewayTracing is what the gateway's spans need: the client options'
// tracer provider and propagator, or the program's.
type gatewayTracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

func newGatewayTracing(client wiring.Options) gatewayTracing {
	tp, prop := client.TracerProvider, client.Propagator
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if prop == nil {
		prop = otel.GetTextMapPropagator()
	}
	return gatewayTracing{tracer: tp.Tracer(tracerName), prop: prop}
}

// startServer starts a proxied request's server span, the child of the
// client's traceparent when it sent one, and returns the request with the
// span in its context: the transport's request spans are its children.
func (g *Gateway) startServer(r *http.Request, p *provider.Provider) (*http.Request, trace.Span) {
	ctx := g.tracing.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	route := "/" + p.Name + "/*"
	if g.hosts[hostOnly(r.Host)] == p {
		route = "/*"
	}
	ctx, span := g.tracing.tracer.Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer))
	if !span.IsRecording() && !span.SpanContext().IsValid() {
		return r, span // nothing to trace: keep the request as it is
	}
	if span.IsRecording() {
		span.SetAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.HTTPRouteKey.String(route),
			semconv.URLPathKey.String(r.URL.Path), transport.AttrProvider.String(p.Name))
	}
	return r.WithContext(ctx), span
}

// endServer ends a proxied request's server span with its status.
func endServer(span trace.Span, code int, ri *route) {
	if span.IsRecording() {
		span.SetAttributes(semconv.HTTPResponseStatusCodeKey.Int(code), AttrCoalesced.Bool(ri.shared),
			transport.AttrWait.Float64(ri.waited.Seconds()))
		if code >= 500 {
			span.SetAttributes(semconv.ErrorTypeKey.Int(code))
			span.SetStatus(codes.Error, "")
		}
	}
	span.End()
}

// waitSpan starts the span of one of the gateway's waits for quota, as
// the transport's wait spans do (see transport.SpanWait), until we.Until.
func (g *Gateway) waitSpan(r *http.Request, we *transport.WaitError) trace.Span {
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return nil
	}
	_, ws := g.tracing.tracer.Start(r.Context(), transport.SpanWait, trace.WithAttributes(
		transport.AttrWaitReason.String(transport.WaitQuota), transport.AttrResource.String(we.Resource),
		transport.AttrCredential.String(we.Credential), transport.AttrWaitUntil.String(we.Until.UTC().Format(time.RFC3339Nano))))
	if we.Scope != "" {
		ws.SetAttributes(transport.AttrScope.String(we.Scope))
	}
	return ws
}

// endWait ends a wait span with how long the wait lasted.
func endWait(span trace.Span, waited time.Duration, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(transport.AttrWait.Float64(waited.Seconds()))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// hostOnly is a Host header's host, lower case, without its port.
func hostOnly(host string) string {
	host = strings.ToLower(host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}
