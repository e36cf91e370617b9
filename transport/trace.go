package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ratekeeper/ratekeeper/creds"
)

// Names of the spans and events the transport records (see
// docs/operations.md, Tracing).
const (
	// SpanRequest is a request's span, from RoundTrip to its answer or
	// error: a client span, the parent of the upstream's server spans.
	SpanRequest = "ratekeeper.request"
	// SpanWait is a child span of the request's for each time it waits:
	// for quota, for an answer in flight, for the pool's learning turn,
	// before a retry.
	SpanWait = "ratekeeper.wait"
	// EventAttempt is an event of the request's span for each send.
	EventAttempt = "ratekeeper.attempt"
)

// Attributes of the transport's spans and events. Where OpenTelemetry's
// semantic conventions name a fact (http.request.method, url.full,
// server.address, http.response.status_code, error.type) that name is
// used; ratekeeper's own facts have the ratekeeper. prefix.
const (
	AttrProvider   = attribute.Key("ratekeeper.provider")
	AttrResource   = attribute.Key("ratekeeper.resource")
	AttrBucket     = attribute.Key("ratekeeper.bucket")
	AttrScope      = attribute.Key("ratekeeper.scope")
	AttrCredential = attribute.Key("ratekeeper.credential")
	AttrAttempts   = attribute.Key("ratekeeper.attempts")
	AttrAttempt    = attribute.Key("ratekeeper.attempt")
	// AttrWait is, on the request's span, the whole time it waited
	// (quota, answers in flight, learning turn), in seconds; on a wait
	// span and an attempt event, that one wait's.
	AttrWait       = attribute.Key("ratekeeper.wait_seconds")
	AttrWaitReason = attribute.Key("ratekeeper.wait.reason")
	AttrWaitUntil  = attribute.Key("ratekeeper.wait.until")
	AttrWoken      = attribute.Key("ratekeeper.wait.woken")
	AttrCache      = attribute.Key("ratekeeper.cache")
	AttrCacheHit   = attribute.Key("ratekeeper.cache.hit")
	AttrLimited    = attribute.Key("ratekeeper.limited")
	AttrRetryAfter = attribute.Key("ratekeeper.retry_after_seconds")
	AttrNext       = attribute.Key("ratekeeper.next")
	AttrDuration   = attribute.Key("ratekeeper.duration_seconds")
)

// Why a request waits (AttrWaitReason).
const (
	// WaitQuota: until a known time — the bucket's reset or refill,
	// pacing, a penalty (Retry-After, a secondary limit).
	WaitQuota = "quota"
	// WaitInFlight: for an answer to a request in flight (a concurrency
	// slot, a first probe of an unknown bucket), which may end it early.
	WaitInFlight = "in_flight"
	// WaitScope: for a scope's pause (a limit the server does not
	// announce) while the request's own bucket could serve.
	WaitScope = "scope"
	// WaitLearning: for the pool's learning turn, while it learns which
	// tokens share a bucket.
	WaitLearning = "learning"
	// WaitBackoff: before resending after a server error or a failed
	// send.
	WaitBackoff = "backoff"
)

// tracerName is the instrumentation scope of the transport's spans.
const tracerName = "github.com/ratekeeper/ratekeeper/transport"

// tracing is what the transport's spans need, fixed by New.
type tracing struct {
	tracer trace.Tracer // nil: an explicit no-op provider, nothing to do
	prop   propagation.TextMapPropagator
	// handBack: the caller waits outside the transport (the gateway,
	// Options.CallerMaxWait), so a *WaitError is not the request's
	// failure.
	handBack bool
	// stamp: the spans take their times from the transport's clock,
	// which is not the system's (the SDK reads that one itself).
	stamp bool
}

// requestStart are a request span's start options, made once: a no-op
// tracer's Start should cost no more than the no-op.
var requestStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

func newTracing(o Options, ownClock bool) tracing {
	tp := o.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	prop := o.Propagator
	if prop == nil {
		prop = otel.GetTextMapPropagator()
	}
	tr := tracing{prop: prop, handBack: o.CallerMaxWait != nil, stamp: ownClock}
	if _, off := tp.(noop.TracerProvider); !off {
		tr.tracer = tp.Tracer(tracerName)
	}
	return tr
}

// traced is an exchange's span; zero when the request has none to
// record or carry (no tracer provider, no caller's span).
type traced struct {
	span trace.Span
	// rec: the span records (attributes are worth building).
	rec bool
	// sends counts the attempts sent (or tried): none when the request
	// failed before its first.
	sends int
}

// runTraced runs the exchange within its request span.
func (x *exchange) runTraced() (resp *http.Response, err error) {
	if !x.startSpan() {
		return x.run()
	}
	defer func() { x.endSpan(resp, err) }()
	return x.run()
}

// startSpan starts the request's span and makes it the exchange's
// context, so that its waits, the "who am I" requests it sends and the
// upstream (see traceOut) are its children. It reports false when there
// is nothing to trace: a no-op tracer and no caller's span.
func (x *exchange) startSpan() bool {
	t := x.t
	if t.trace.tracer == nil {
		return false
	}
	opts := requestStart
	if t.trace.stamp {
		opts = []trace.SpanStartOption{requestStart[0], trace.WithTimestamp(t.opts.Now())}
	}
	ctx, span := t.trace.tracer.Start(x.ctx, SpanRequest, opts...)
	rec := span.IsRecording()
	if !rec && !span.SpanContext().IsValid() {
		return false
	}
	x.ctx, x.tr = ctx, traced{span: span, rec: rec}
	if !rec {
		return true
	}
	req := x.req
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs,
		semconv.HTTPRequestMethodKey.String(cmpMethod(req.Method)),
		semconv.URLFullKey.String(traceURL(req.URL)),
		AttrProvider.String(x.l.p.Name))
	if host, port := serverOf(req.URL); host != "" {
		attrs = append(attrs, semconv.ServerAddressKey.String(host))
		if port > 0 {
			attrs = append(attrs, semconv.ServerPortKey.Int(port))
		}
	}
	span.SetAttributes(attrs...)
	return true
}

// endSpan ends the request's span with what the request came to.
func (x *exchange) endSpan(resp *http.Response, err error) {
	t, span := x.t, x.tr.span
	if x.tr.rec {
		g := &x.grant
		attrs := make([]attribute.KeyValue, 0, 10)
		attrs = append(attrs, AttrAttempts.Int(x.tr.sends), AttrWait.Float64(x.waited.Seconds()),
			AttrResource.String(x.class.Resource)) // classify runs after startSpan
		if x.class.Scope.Key != "" {
			attrs = append(attrs, AttrScope.String(x.class.Scope.Key))
		}
		if g.cred != nil {
			attrs = append(attrs, AttrCredential.String(g.cred.Masked()), AttrBucket.String(g.slot.Bucket.String()))
		}
		if resp != nil {
			outcome := resp.Header.Get(HeaderCache)
			if outcome == "" {
				outcome = "none"
			}
			attrs = append(attrs, semconv.HTTPResponseStatusCodeKey.Int(resp.StatusCode), AttrCache.String(outcome),
				AttrCacheHit.Bool(outcome != "none" && outcome != "miss"))
			if resp.StatusCode >= 400 {
				attrs = append(attrs, semconv.ErrorTypeKey.String(strconv.Itoa(resp.StatusCode)))
				span.SetStatus(codes.Error, "")
			}
		}
		if err != nil {
			var we *WaitError
			if errors.As(err, &we) {
				attrs = append(attrs, AttrWaitUntil.String(we.Until.UTC().Format(time.RFC3339Nano)))
				if g.cred == nil && we.Credential != "" {
					attrs = append(attrs, AttrCredential.String(we.Credential)) // the one that can go soonest
				}
			}
			if we == nil || !x.waitsOutside() {
				attrs = append(attrs, semconv.ErrorTypeKey.String(errorType(err)))
				span.SetStatus(codes.Error, x.redactError(err))
			}
		}
		span.SetAttributes(attrs...)
	}
	span.End(trace.WithTimestamp(t.opts.Now()))
}

// waitsOutside reports whether the caller waits for quota itself — the
// gateway (Options.CallerMaxWait), a batch (WithMaxWait 0) — so that a
// *WaitError is its next step, not the request's failure.
func (x *exchange) waitsOutside() bool {
	if x.t.trace.handBack {
		return true
	}
	d, ok := x.ctx.Value(maxWaitKey{}).(time.Duration)
	return ok && d == 0
}

// traceOut puts the request's trace context on the request about to be
// sent (the propagator's fields: traceparent and tracestate for W3C trace
// context), so that the upstream's spans are the request span's children,
// and makes the span the request's context, for a base transport that
// traces its sends. out is the transport's own copy.
func (x *exchange) traceOut(out *http.Request) *http.Request {
	if x.tr.span == nil {
		return out
	}
	x.tr.sends++
	x.t.trace.prop.Inject(x.ctx, propagation.HeaderCarrier(out.Header))
	return out.WithContext(x.ctx)
}

// traceAttempt adds the attempt's event to the request's span: the
// credential sent, what came back and what follows.
func (x *exchange) traceAttempt(d decision, err error) {
	if !x.tr.rec {
		return
	}
	s, r := &x.s, &x.reading
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, AttrAttempt.Int(x.n), AttrNext.String(d.verdict.String()), AttrDuration.Float64(s.now.Sub(s.sentAt).Seconds()))
	if c := x.grant.cred; c != nil {
		attrs = append(attrs, AttrCredential.String(c.Masked()))
	}
	if s.resp != nil {
		attrs = append(attrs, semconv.HTTPResponseStatusCodeKey.Int(s.resp.StatusCode))
		if x.o.limited {
			attrs = append(attrs, AttrLimited.String(r.Limited.String()))
		}
		if r.HasRetryAfter {
			attrs = append(attrs, AttrRetryAfter.Float64(r.RetryAfter.Seconds()))
		}
	} else if err != nil {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errorType(err)))
	}
	x.tr.span.AddEvent(EventAttempt, trace.WithAttributes(attrs...), trace.WithTimestamp(s.now))
}

// waitSpan starts a child span of the request's for a wait of the given
// reason, planned to last d, for credential c (nil: none chosen yet); it
// returns nil when the request is not traced.
func (x *exchange) waitSpan(reason string, d time.Duration, c *creds.Credential) trace.Span {
	if !x.tr.rec {
		return nil
	}
	now := x.t.opts.Now()
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, AttrWaitReason.String(reason))
	if d > 0 {
		attrs = append(attrs, AttrWaitUntil.String(now.Add(d).UTC().Format(time.RFC3339Nano)))
	}
	if c != nil {
		attrs = append(attrs, AttrCredential.String(c.Masked()))
	}
	_, span := x.t.trace.tracer.Start(x.ctx, SpanWait, trace.WithTimestamp(now), trace.WithAttributes(attrs...))
	return span
}

// endWait ends a wait span, saying how long the wait lasted and whether
// an answer ended it early.
func (x *exchange) endWait(span trace.Span, waited time.Duration, woken bool, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(AttrWait.Float64(waited.Seconds()), AttrWoken.Bool(woken))
	if err != nil {
		span.SetStatus(codes.Error, x.redactError(err))
	}
	span.End(trace.WithTimestamp(x.t.opts.Now()))
}

// waitQuota is acquire's wait for quota (see Transport.waitFor), within
// a wait span whose reason the reservation's decision gives.
func (x *exchange) waitQuota(c *creds.Credential, d time.Duration, why Decision, gen uint64, key waitKey) (relay, error) {
	if !x.tr.rec {
		return x.t.waitFor(x.ctx, d, &x.waited, gen, key)
	}
	reason := WaitQuota
	switch {
	case why.Scoped:
		reason = WaitScope
	case why.OnAnswer:
		reason = WaitInFlight
	}
	span := x.waitSpan(reason, d, c)
	before := x.waited
	baton, err := x.t.waitFor(x.ctx, d, &x.waited, gen, key)
	x.endWait(span, x.waited-before, baton.upTo != 0, err)
	return baton, err
}

// pause is a retry's backoff sleep, within a wait span.
func (x *exchange) pause(d time.Duration) error {
	span := x.waitSpan(WaitBackoff, d, x.grant.cred)
	start := x.t.opts.Now()
	err := x.t.sleep(x.ctx, d)
	x.endWait(span, x.t.opts.Now().Sub(start), false, err)
	return err
}

// redactError is err's message for a span: the request's URL in it (an
// *url.Error quotes it, query and user name included) becomes the one
// url.full shows.
func (x *exchange) redactError(err error) string {
	msg := err.Error()
	clean := traceURL(x.req.URL)
	for _, raw := range []string{x.req.URL.String(), x.req.URL.Redacted()} {
		if raw != "" && strings.Contains(msg, raw) {
			msg = strings.ReplaceAll(msg, raw, clean)
		}
	}
	return msg
}

// errorType is error.type for an error: the transport's typed errors by
// name, a context's end, else the error's Go type.
func errorType(err error) string {
	var (
		we *WaitError
		ne *NoCredentialError
		re *ReserveError
	)
	switch {
	case errors.As(err, &we):
		return "ratekeeper.WaitError"
	case errors.As(err, &ne):
		return "ratekeeper.NoCredentialError"
	case errors.As(err, &re):
		return "ratekeeper.ReserveError"
	case errors.Is(err, context.Canceled):
		return "context.Canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "context.DeadlineExceeded"
	}
	return fmt.Sprintf("%T", err)
}

func (v verdict) String() string {
	switch v {
	case deliver:
		return "deliver"
	case failWith:
		return "fail"
	case anotherCredential:
		return "another_credential"
	case noCredentialLeft:
		return "no_credential_left"
	case waitAndRetry:
		return "wait_and_retry"
	case backOffAndRetry:
		return "back_off_and_retry"
	}
	return "unknown"
}

// cmpMethod is the request's method, GET when empty (net/http's meaning).
func cmpMethod(m string) string {
	if m == "" {
		return http.MethodGet
	}
	return m
}

// serverOf is the URL's host and port (the scheme's default when none is
// written).
func serverOf(u *url.URL) (string, int) {
	host, portText := u.Hostname(), u.Port()
	if portText == "" {
		switch u.Scheme {
		case "https":
			return host, 443
		case "http":
			return host, 80
		}
		return host, 0
	}
	port, _ := strconv.Atoi(portText)
	return host, port
}

// traceURL is u for url.full: user and password become REDACTED (the
// semantic conventions' rule), and so does the value of every query
// parameter whose name suggests a secret (access_token, private_token,
// api_key, sig…); the fragment is dropped.
func traceURL(u *url.URL) string {
	r := *u
	r.Fragment, r.RawFragment = "", ""
	if r.User != nil {
		r.User = url.UserPassword("REDACTED", "REDACTED")
	}
	if r.RawQuery != "" {
		r.RawQuery = redactQuery(r.RawQuery)
	}
	return r.String()
}

// redactQuery replaces the values of secret-looking parameters with
// REDACTED, keeping the others and the order as written.
func redactQuery(q string) string {
	var b strings.Builder
	for i, part := range strings.Split(q, "&") {
		if i > 0 {
			b.WriteByte('&')
		}
		name, _, hasValue := strings.Cut(part, "=")
		if hasValue && secretName(name) {
			b.WriteString(name)
			b.WriteString("=REDACTED")
			continue
		}
		b.WriteString(part)
	}
	return b.String()
}

// secretWords are the parts of a query parameter's name that mark its
// value as a secret.
var secretWords = []string{"token", "key", "secret", "password", "passwd", "sig", "auth", "credential", "session", "code"}

func secretName(name string) bool {
	if n, err := url.QueryUnescape(name); err == nil {
		name = n
	}
	name = strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}
