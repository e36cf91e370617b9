package gateway

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// CheckListen says why the gateway must not listen on addr (host:port)
// with the given number of client keys: anywhere but loopback, clients
// must authenticate, since an open gateway would spend its tokens for
// anyone who can reach it. A host name other than localhost counts as not
// loopback, since what it resolves to can change.
func CheckListen(addr string, keys int) error {
	if keys > 0 {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %v; expected HOST:PORT such as 127.0.0.1:8080", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return notLoopback(addr)
}

func notLoopback(addr string) error {
	return fmt.Errorf("listening on %s, which is not a loopback address, needs client keys: give --client-keys FILE (or %s), or listen on 127.0.0.1", addr, KeysEnv)
}

// checkListener is CheckListen for the address a listener actually got.
func checkListener(ln net.Listener, keys int) error {
	if keys > 0 {
		return nil
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
		return nil
	}
	return notLoopback(ln.Addr().String())
}

// Serve answers requests on ln until ctx ends, then shuts down
// gracefully: it stops accepting, lets in-flight requests finish for up to
// Options.ShutdownTimeout, then closes what is left. It refuses a listener
// that is not on loopback when no client keys are configured, and bounds
// the connections that have not yet presented a key
// (Options.MaxUnauthenticated). With Options.RefreshEvery it also
// refreshes the quota view in the background. It returns nil after a
// shutdown caused by ctx.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	if err := checkListener(ln, g.opts.Keys.Len()); err != nil {
		ln.Close()
		return err
	}
	hs := g.HTTPServer()
	ln = g.conns.listen(ln)
	refreshCtx, stopRefresh := context.WithCancel(ctx)
	defer stopRefresh()
	if g.opts.RefreshEvery > 0 {
		go g.refreshLoop(refreshCtx, g.opts.RefreshEvery)
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	g.log.Info("shutting down: finishing in-flight requests", "timeout", g.opts.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opts.ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		g.log.Warn("shutdown timeout: closing the connections left")
		err = hs.Close()
	}
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// HTTPServer returns an http.Server set up to serve the gateway: bounded
// header reading and idle connections, no write timeout (answers may
// stream for long, and waits for quota take up to the max wait), and
// "OPTIONS *" passed to the gateway (which refuses it) rather than
// answered by net/http. Bodies are bounded by per-request deadlines (see
// setReadDeadline). The bound on connections without a client key is
// Serve's: it wraps the listener.
func (g *Gateway) HTTPServer() *http.Server {
	return &http.Server{
		Handler:                      g,
		ReadHeaderTimeout:            min(headerTimeout, g.readTimeout),
		ConnContext:                  connContext,
		IdleTimeout:                  2 * time.Minute,
		MaxHeaderBytes:               64 << 10,
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     newServerLog(g.log),
	}
}

// refreshLoop reads every served provider's free status endpoint every
// interval, from one interval after start: a "who am I" request and a
// status read per token at start cost a counted request each, which on a
// batch that fills its windows exactly spilled it into one more window.
func (g *Gateway) refreshLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, name := range g.names {
			// One provider at a time, so one that cannot be reached
			// does not keep the others from being refreshed.
			if err := g.main.ReadQuota(ctx, name); err != nil && ctx.Err() == nil {
				g.log.Warn("reading quota", "provider", name, "err", err)
			}
		}
	}
}

// newServerLog sends net/http's own messages (bad requests from clients,
// mostly) to the gateway's logger at debug level.
func newServerLog(l *slog.Logger) *log.Logger { return slog.NewLogLogger(l.Handler(), slog.LevelDebug) }
