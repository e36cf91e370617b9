package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/internal/buildinfo"
	"github.com/ratekeeper/ratekeeper/internal/probe"
)

// metricsFlags are --metrics-listen and --metrics-allow-remote, of the
// commands that do the work (tasks worker, fetch, poll).
type metricsFlags struct {
	listen      string
	allowRemote bool
}

func (m *metricsFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&m.listen, "metrics-listen", "", "serve Prometheus metrics on this address's /metrics, e.g. 127.0.0.1:9464 (loopback only, unless --metrics-allow-remote)")
	fl.BoolVar(&m.allowRemote, "metrics-allow-remote", false, "let --metrics-listen use an address other than loopback (the metrics name providers, masked credentials and URLs)")
}

// check refuses an address that is not HOST:PORT, or not loopback without
// --metrics-allow-remote, since the metrics tell about the tokens' quota
// and the work done (serve's --listen has its own rule: client keys).
func (m *metricsFlags) check() error {
	if m.listen == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(m.listen)
	if err != nil {
		return fmt.Errorf("--metrics-listen %q: %v; want HOST:PORT such as 127.0.0.1:9464", m.listen, err)
	}
	if m.allowRemote || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--metrics-listen %s is not a loopback address: listen on 127.0.0.1, or add --metrics-allow-remote to expose the metrics beyond this machine", m.listen)
}

// serve serves reg on /metrics, with the probes /healthz (alive) and
// /readyz (ready: 200, or 503 and why not), until stop is called, and says
// where on stderr. Without --metrics-listen it does nothing.
func (m *metricsFlags) serve(ctx context.Context, reg *prometheus.Registry, ready probe.Check, stderr io.Writer) (stop func(), err error) {
	if m.listen == "" {
		return func() {}, nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", m.listen)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	// A name such as localhost is checked again on the address it got.
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() && !m.allowRemote {
		ln.Close()
		return nil, fmt.Errorf("--metrics-listen %s resolved to %s, which is not loopback; add --metrics-allow-remote to allow it", m.listen, a)
	}
	if err := reg.Register(buildinfo.Collector(buildinfo.Read())); err != nil {
		ln.Close()
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle(probe.PathHealth, probe.Health())
	mux.Handle(probe.PathReady, probe.Ready(ready))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(stderr, "ratekeeper: metrics on http://%s/metrics (probes: /healthz, /readyz)\n", ln.Addr())
	return func() { _ = srv.Close() }, nil
}
