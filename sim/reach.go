package sim

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Reach makes the server reachable by a client and returns the root URL
// its APIs' mount paths hang from, the RoundTripper that reaches it and how
// to stop it. On a loopback port the RoundTripper keeps idleConns idle
// connections to it (one a client worker, so workers reuse connections
// rather than open one a request); stop closes them and shuts the server
// down. inProcess serves without sockets, through Transport, so a client in
// a testing/synctest bubble sees fake time pass: the root is
// http://sim.invalid and requests come from 127.0.0.1:40000.
func (s *Server) Reach(inProcess bool, idleConns int) (root string, wire http.RoundTripper, stop func(), err error) {
	if inProcess {
		return "http://sim.invalid", s.Transport("127.0.0.1:40000"), func() {}, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, fmt.Errorf("listening on loopback for the simulator: %w", err)
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = hs.Serve(ln)
	}()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = idleConns
	stop = func() {
		tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		<-served
	}
	return "http://" + ln.Addr().String(), tr, stop, nil
}
