package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// tracingFlushTimeout bounds the export of the spans still buffered when
// a command ends.
const tracingFlushTimeout = 5 * time.Second

// startTracing sets the process up to export traces with OTLP over HTTP
// when the standard OpenTelemetry variables ask for it — an endpoint in
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, and
// neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none — and
// returns the function that flushes and stops it. Otherwise it sets
// nothing: the transports' tracer stays OpenTelemetry's no-op. The SDK
// reads the rest of the variables itself (headers, timeout, sampler,
// batching, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES). Export errors
// go to stderr.
func startTracing(ctx context.Context, stderr io.Writer) (stop func(), err error) {
	stop = func() {}
	if !tracingWanted() {
		return stop, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(os.Getenv(v)); p != "" {
			if p != "http/protobuf" {
				return stop, fmt.Errorf("%s=%s: ratekeeper exports traces with http/protobuf only (port 4318 on a collector)", v, p)
			}
			break
		}
	}
	prop, err := propagatorFromEnv()
	if err != nil {
		return stop, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return stop, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("ratekeeper"), semconv.ServiceVersion(moduleVersion())),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK())
	if err != nil {
		return stop, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	prevTP, prevProp, prevErr := otel.GetTracerProvider(), otel.GetTextMapPropagator(), otel.GetErrorHandler()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(prop)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		fmt.Fprintf(stderr, "ratekeeper: tracing: %v\n", err)
	}))
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			fmt.Fprintf(stderr, "ratekeeper: tracing: flushing spans: %v\n", err)
		}
		// A process runs one command; tests run many, each with the
		// globals it found.
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
		otel.SetErrorHandler(prevErr)
	}, nil
}

// tracingWanted reports whether the environment asks for traces.
func tracingWanted() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if e := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); e == "none" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// propagatorFromEnv is the propagator OTEL_PROPAGATORS names: by default
// W3C trace context and baggage; "none" propagates nothing (no
// traceparent is read by serve nor sent upstream).
func propagatorFromEnv() (propagation.TextMapPropagator, error) {
	v := strings.TrimSpace(os.Getenv("OTEL_PROPAGATORS"))
	if v == "" {
		v = "tracecontext,baggage"
	}
	var props []propagation.TextMapPropagator
	for _, name := range strings.Split(v, ",") {
		switch strings.TrimSpace(name) {
		case "tracecontext":
			props = append(props, propagation.TraceContext{})
		case "baggage":
			props = append(props, propagation.Baggage{})
		case "none":
			return propagation.NewCompositeTextMapPropagator(), nil
		default:
			return nil, fmt.Errorf("OTEL_PROPAGATORS=%s: ratekeeper knows tracecontext, baggage and none", v)
		}
	}
	return propagation.NewCompositeTextMapPropagator(props...), nil
}

// moduleVersion is the version the binary was built at, as go install
// records it ("(devel)" for a build from a checkout).
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
