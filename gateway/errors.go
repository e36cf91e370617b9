package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/transport"
)

// statusClientClosed labels, in metrics only, a request whose client went
// away before its answer (nothing is written).
const statusClientClosed = 499

// errorBody is the JSON of every answer the gateway writes itself. Message
// is where GitHub's own errors put theirs, so clients print it.
type errorBody struct {
	Message  string     `json:"message"`
	Error    string     `json:"error"`
	Provider string     `json:"provider,omitempty"`
	Resource string     `json:"resource,omitempty"`
	RetryAt  *time.Time `json:"retry_at,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) { writeJSONIndent(w, status, v, "") }

// writeJSONIndent writes v as JSON, each level indented by indent.
func writeJSONIndent(w http.ResponseWriter, status int, v any, indent string) {
	var b []byte
	var err error
	if indent == "" {
		b, err = json.Marshal(v)
	} else {
		b, err = json.MarshalIndent(v, "", indent)
	}
	if err != nil {
		http.Error(w, "internal error encoding the answer", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// reject answers a request the gateway refuses itself.
func (g *Gateway) reject(w http.ResponseWriter, e *requestError) {
	g.metrics.rejected.WithLabelValues(e.code).Inc()
	g.refusals.add(e.code, "")
	for k, v := range e.header {
		w.Header().Set(k, v)
	}
	writeJSON(w, e.status, errorBody{Message: e.msg, Error: e.code})
}

// proxyError answers a request whose upstream request failed: 429 when
// quota returns after the request's deadline, 504 when the upstream sent
// no answer in time, 401 when a pass-through token was rejected, 503 when
// every gateway credential was, 500 when the configured reserve leaves
// nothing of the resource, 413 for a body over the limit, 502 otherwise;
// nothing to a client that left.
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	ri := routeOf(r.Context())
	name := ""
	if ri != nil {
		name = ri.p.Name
	}
	var (
		qe  *quotaError
		nce *transport.NoCredentialError
		rse *transport.ReserveError
		mbe *http.MaxBytesError
		te  *timeoutError
	)
	switch {
	case errors.As(err, &qe):
		g.writeWait(w, qe)
	case errors.As(err, &te):
		writeJSON(w, http.StatusGatewayTimeout, errorBody{Error: "upstream_timeout", Provider: name,
			Message: te.Error() + "; the request may have been processed: check before sending it again"})
	case errors.Is(err, errClientGone) || r.Context().Err() != nil:
		// The client went away; nobody reads an answer.
		if sw, ok := w.(*statusWriter); ok && sw.code == 0 {
			sw.code = statusClientClosed
		}
	case store.IsUnavailable(err):
		// The shared quota state's database is away (its outage is
		// logged once, not at every request): nothing was sent, and
		// sending without it could spend quota no process reserved.
		w.Header().Set("Retry-After", strconv.Itoa(databaseRetryAfter))
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "database_unavailable", Provider: name,
			Message: fmt.Sprintf("the gateway's quota state database is unavailable (it waited up to its max wait of %s for it); nothing was sent upstream; retry after %d seconds", shortDuration(g.maxWaitOf(ri)), databaseRetryAfter)})
	case errors.As(err, &nce):
		if ri != nil && ri.passed {
			g.pt.rejected(ri.token)
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+name+`"`)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error: "token_rejected", Provider: name,
				Message: fmt.Sprintf("%s rejected the token you sent (pass-through)%s; send a valid token in the %s header", name, g.refusalNote(), ri.p.Auth.Header)})
			return
		}
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "no_credential", Provider: name,
			Message: fmt.Sprintf("the gateway has no usable credential for %s: every configured token was rejected; give it valid tokens and restart it", name)})
	case errors.As(err, &rse):
		// The gateway's configuration leaves nothing of this resource:
		// no wait or retry can help.
		writeJSON(w, http.StatusInternalServerError, errorBody{Error: "reserve_too_large", Provider: name, Message: rse.Error()})
	case errors.As(err, &mbe):
		writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error: "body_too_large", Provider: name,
			Message: fmt.Sprintf("request body is larger than the gateway's limit of %d bytes (--max-body)", g.maxBody)})
	case isTimeout(err):
		writeJSON(w, http.StatusGatewayTimeout, errorBody{Error: "upstream_timeout", Provider: name,
			Message: fmt.Sprintf("upstream %s did not answer in time: %v", name, innerError(err))})
	default:
		g.log.Warn("upstream request failed", "provider", name, "err", innerError(err))
		writeJSON(w, http.StatusBadGateway, errorBody{Error: "upstream_unreachable", Provider: name,
			Message: fmt.Sprintf("upstream %s could not be reached: %v", name, innerError(err))})
	}
}

// databaseRetryAfter is the Retry-After, in seconds, of a 503 for a
// database outage: how long it lasts is unknown, and a restart takes
// seconds.
const databaseRetryAfter = 5

// maxWaitOf is the max wait of the request ri routes (the gateway's when
// none is known).
func (g *Gateway) maxWaitOf(ri *route) time.Duration {
	if ri != nil && ri.maxWait > 0 {
		return ri.maxWait
	}
	return g.maxWait
}

// refusalNote tells a client whose token was rejected for how long the
// gateway refuses it.
func (g *Gateway) refusalNote() string {
	d := g.passThroughRefusal()
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf(", so the gateway refuses it for %s without sending it again (--pass-through-refusal)", shortDuration(d))
}

// shortDuration prints d without trailing zero units: 10m, not 10m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// passThroughRefusal is how long a rejected pass-through token is refused
// (0: not at all).
func (g *Gateway) passThroughRefusal() time.Duration {
	switch d := g.opts.PassThroughRefusal; {
	case d < 0:
		return 0
	case d == 0:
		return DefaultPassThroughRefusal
	default:
		return d
	}
}

// tokenRefused is the answer to a pass-through token the provider
// rejected lately: 401 from the gateway itself, nothing sent.
func tokenRefused(p *provider.Provider, until, now time.Time) *requestError {
	return &requestError{status: http.StatusUnauthorized, code: "token_refused",
		header: map[string]string{"WWW-Authenticate": `Bearer realm="` + p.Name + `"`},
		msg: fmt.Sprintf("%s rejected this token (401) lately, so the gateway refuses it without sending it again until %s, in %s (--pass-through-refusal); send a valid token in the %s header",
			p.Name, until.UTC().Format(time.RFC3339), until.Sub(now).Round(time.Second), p.Auth.Header)}
}

// writeWait answers 429 for quota that returns after the request's
// deadline, with what a client's own rate-limit logic reads: Retry-After
// (whole seconds, rounded up, so that coming back then finds the quota
// returned), x-ratelimit-remaining 0 and x-ratelimit-reset (Unix seconds,
// rounded up), as GitHub sends them.
//
// A wait on answers in flight (OnAnswer) names the next answer, which may
// free quota or not: the quota then returns at the wait's latest moment,
// a bucket's refill, and the Retry-After names that, within the max wait
// (a concurrency slot's latest is its leases' lapse, minutes away).
func (g *Gateway) writeWait(w http.ResponseWriter, qe *quotaError) {
	now := g.now()
	at := qe.Until
	if qe.OnAnswer() && qe.Latest.After(at) {
		at = qe.Latest
		if limit := now.Add(qe.maxWait); at.After(limit) && limit.After(qe.Until) {
			at = limit
		}
	}
	secs := max(int64(math.Ceil(at.Sub(now).Seconds())), 1)
	reset := at.Unix()
	if at.Nanosecond() > 0 {
		reset++
	}
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
	h.Set("X-RateLimit-Remaining", "0")
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
	if qe.Resource != "" {
		h.Set("X-RateLimit-Resource", qe.Resource)
	}
	if sw, ok := w.(*statusWriter); ok {
		sw.refused = true
	}
	g.metrics.refused.WithLabelValues(qe.Provider).Inc()
	until := at.UTC()
	waited := ""
	if qe.waited >= time.Second {
		waited = fmt.Sprintf(" (this request waited %s already)", qe.waited.Round(time.Second))
	}
	writeJSON(w, http.StatusTooManyRequests, errorBody{
		Error: "quota_wait", Provider: qe.Provider, Resource: qe.Resource, RetryAt: &until,
		Message: fmt.Sprintf("%s %s quota returns at %s, in %ds, beyond the gateway's max wait of %s%s; retry after %d seconds",
			qe.Provider, qe.Resource, until.Format(time.RFC3339), secs, shortDuration(qe.maxWait), waited, secs),
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// innerError drops the *url.Error wrapper, whose text repeats the request
// URL with its query.
func innerError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
