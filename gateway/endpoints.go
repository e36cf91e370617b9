package gateway

import (
	"context"
	"net/http"
	"net/url"
)

// onlyGet refuses methods other than GET and HEAD on the gateway's own
// endpoints.
func (g *Gateway) onlyGet(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	g.reject(w, &requestError{status: http.StatusMethodNotAllowed, code: "method", msg: "this endpoint answers GET and HEAD only"})
	return false
}

// serveHealth answers 200 while the gateway is up. It needs no key, so
// load balancers and orchestrators can probe it, and tells nothing about
// credentials.
func (g *Gateway) serveHealth(w http.ResponseWriter, r *http.Request) {
	if !g.onlyGet(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "providers": g.names})
}

// Ready reports whether the gateway can serve its providers now: its
// database answers and each served provider has a credential its server
// has not rejected (transport.Transport.Ready). /readyz answers 503 with
// the reason when it cannot; it needs no key, as /healthz.
func (g *Gateway) Ready(ctx context.Context) error {
	return g.main.Ready(ctx, g.names...)
}

// serveMetrics serves the Prometheus registry.
func (g *Gateway) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if !g.onlyGet(w, r) || !g.authorized(w, r, true, "Bearer", nil) {
		return
	}
	g.promHTTP.ServeHTTP(w, r)
}

// serveStatus serves transport.StatusReport as JSON, like `ratekeeper
// status --json`; ?provider=NAME (repeatable) narrows it.
func (g *Gateway) serveStatus(w http.ResponseWriter, r *http.Request, rawQuery string) {
	if !g.onlyGet(w, r) || !g.authorized(w, r, true, "Bearer", nil) {
		return
	}
	q, _ := url.ParseQuery(rawQuery)
	rep, err := g.Report(r.Context(), q["provider"]...)
	if err != nil {
		g.log.Warn("status report", "err", err)
		writeJSON(w, http.StatusInternalServerError, errorBody{Error: "status", Message: "reading quota state: " + err.Error()})
		return
	}
	writeJSONIndent(w, http.StatusOK, rep, "  ")
}
