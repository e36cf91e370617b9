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
	"time"

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
	writeJSON(w, e.status, errorBody{Message: e.msg, Error: e.code})
}

// proxyError answers a request whose upstream request failed: 429 when
// quota returns beyond the max wait, 504 when the upstream did not answer
// in time, 401 when a pass-through token was rejected, 503 when every
// gateway credential was, 413 for a body over the limit, 502 otherwise.
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	ri := routeOf(r.Context())
	name := ""
	if ri != nil {
		name = ri.p.Name
	}
	var (
		we  *transport.WaitError
		nce *transport.NoCredentialError
		mbe *http.MaxBytesError
		te  *timeoutError
	)
	switch {
	case errors.As(err, &we):
		g.writeWait(w, we)
	case errors.As(err, &te):
		writeJSON(w, http.StatusGatewayTimeout, errorBody{Message: te.Error(), Error: "upstream_timeout", Provider: name})
	case r.Context().Err() != nil:
		// The client went away; nobody reads an answer.
		if sw, ok := w.(*statusWriter); ok && sw.code == 0 {
			sw.code = statusClientClosed
		}
	case errors.As(err, &nce):
		if ri != nil && ri.passed {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+name+`"`)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error: "token_rejected", Provider: name,
				Message: fmt.Sprintf("%s rejected the token you sent (pass-through); send a valid token in the %s header", name, ri.p.Auth.Header)})
			return
		}
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "no_credential", Provider: name,
			Message: fmt.Sprintf("the gateway has no usable credential for %s: every configured token was rejected", name)})
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

// writeWait answers 429 for quota that returns beyond the max wait, with
// what a client's own rate-limit logic reads: Retry-After (whole seconds,
// rounded up, so that coming back then finds the quota returned),
// x-ratelimit-remaining 0 and x-ratelimit-reset (Unix seconds, rounded
// up), as GitHub sends them.
func (g *Gateway) writeWait(w http.ResponseWriter, we *transport.WaitError) {
	now := g.now()
	secs := max(int64(math.Ceil(we.Until.Sub(now).Seconds())), 1)
	reset := we.Until.Unix()
	if we.Until.Nanosecond() > 0 {
		reset++
	}
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
	h.Set("X-RateLimit-Remaining", "0")
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
	if we.Resource != "" {
		h.Set("X-RateLimit-Resource", we.Resource)
	}
	if sw, ok := w.(*statusWriter); ok {
		sw.refused = true
	}
	g.metrics.refused.WithLabelValues(we.Provider).Inc()
	until := we.Until.UTC()
	writeJSON(w, http.StatusTooManyRequests, errorBody{
		Error: "quota_wait", Provider: we.Provider, Resource: we.Resource, RetryAt: &until,
		Message: fmt.Sprintf("%s %s quota returns at %s, in %ds, beyond the gateway's max wait of %s; retry after %d seconds",
			we.Provider, we.Resource, until.Format(time.RFC3339), secs, we.MaxWait, secs),
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
