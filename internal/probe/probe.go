// Package probe answers the two questions an orchestrator or a load
// balancer asks a ratekeeper process: is it alive (/healthz), and can it
// do its work now (/readyz). Both are plain text, need no key and tell
// nothing about tokens beyond their masked form.
package probe

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Paths of the probes, the same on serve and on every --metrics-listen.
const (
	PathHealth = "/healthz"
	PathReady  = "/readyz"
)

// Timeout bounds one readiness check: a probe answers 503 rather than
// wait out a database outage the way requests do.
const Timeout = 2 * time.Second

// Check says whether the process can do its work: nil, or why not.
type Check func(ctx context.Context) error

// Health answers 200 "ok" to GET and HEAD while the process serves HTTP:
// it checks nothing else, so that a restart is only asked of a process
// that no longer answers at all.
func Health() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !getOrHead(w, r) {
			return
		}
		write(w, http.StatusOK, "ok")
	})
}

// Ready answers 200 "ready" to GET and HEAD when check passes within
// Timeout, else 503 "not ready: " and the reason. A nil check is always
// ready.
func Ready(check Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !getOrHead(w, r) {
			return
		}
		if err := Run(r.Context(), check); err != nil {
			write(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
			return
		}
		write(w, http.StatusOK, "ready")
	})
}

// Run runs check within Timeout, reporting a check that outlasts it as
// not ready.
func Run(ctx context.Context, check Check) error {
	if check == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	err := check(ctx)
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("no answer within %v", Timeout)
	}
	return err
}

func getOrHead(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	write(w, http.StatusMethodNotAllowed, "this endpoint answers GET and HEAD only")
	return false
}

func write(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	fmt.Fprintln(w, text)
}
