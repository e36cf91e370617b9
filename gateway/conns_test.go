package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// pipeListener hands out in-memory connections (net.Pipe), so a real
// http.Server can run inside a synctest bubble on fake time.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	addr   net.Addr // what Addr says: pipeAddr, or a loopback address
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	select {
	case <-l.closed:
	default:
		close(l.closed)
	}
	return nil
}

func (l *pipeListener) Addr() net.Addr {
	if l.addr == nil {
		return pipeAddr{}
	}
	return l.addr
}

// dial opens a connection to the listener's server. Its clients all come
// from one address, "pipe", as a loopback gateway's do from 127.0.0.1.
func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

// dialFrom opens a connection whose server end says it comes from ip.
func (l *pipeListener) dialFrom(ip string) net.Conn {
	client, server := net.Pipe()
	l.conns <- fromConn{Conn: server, remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}
	return client
}

// fromConn is a connection with a remote address of its own.
type fromConn struct {
	net.Conn
	remote net.Addr
}

func (c fromConn) RemoteAddr() net.Addr { return c.remote }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

const testKey = "ci-key-0123456789abcdef"

// serveOnPipes runs the gateway's Serve on in-memory connections, with a
// client key (a pipe is not loopback) and the given options.
func serveOnPipes(t *testing.T, tune func(*Options)) (*pipeListener, *env) {
	t.Helper()
	keys, err := ParseKeysEnv("test", "ci "+testKey)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, []sim.APIConfig{githubAPI(100, time.Hour, simTokens...)}, map[string][]string{"github": {"tok-alice-1"}},
		func(o *Options) { o.Keys = keys; tune(o) })
	ln := newPipeListener()
	servePipes(t, e, ln)
	return ln, e
}

// serveOnLoopbackPipes is serveOnPipes without client keys: the listener
// says it is on 127.0.0.1, as Serve then requires.
func serveOnLoopbackPipes(t *testing.T, tune func(*Options)) (*pipeListener, *env) {
	t.Helper()
	e := newEnv(t, []sim.APIConfig{githubAPI(1000, time.Hour, simTokens...)}, map[string][]string{"github": {"tok-alice-1"}}, tune)
	ln := newPipeListener()
	ln.addr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	servePipes(t, e, ln)
	return ln, e
}

// servePipes runs e's gateway on ln until the test ends.
func servePipes(t *testing.T, e *env, ln *pipeListener) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.gw.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// readAnswer reads one answer from c; the time it came is returned too.
func readAnswer(t *testing.T, c net.Conn) (*http.Response, string, time.Time) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), time.Now()
}

// closedByServer reports whether the server closed c: a read ends with
// EOF rather than waiting.
func closedByServer(c net.Conn) bool {
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

// A body trickled a byte every half second is cut at the read timeout:
// 408 from the gateway, which closes the connection, and nothing is sent
// upstream.
func TestTrickledBodyIsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln, e := serveOnPipes(t, func(o *Options) { o.ReadTimeout = 3 * time.Second })
		c := ln.dial()
		defer c.Close()
		stop := make(chan struct{})
		trickled := make(chan struct{})
		defer func() { close(stop); <-trickled }()
		go func() {
			defer close(trickled)
			io.WriteString(c, "POST /github/repos/o/r/issues HTTP/1.1\r\nHost: gw\r\nX-Ratekeeper-Key: "+testKey+"\r\nContent-Length: 1000\r\n\r\n")
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
		}()
		start := time.Now()
		resp, body, at := readAnswer(t, c)
		if resp.StatusCode != http.StatusRequestTimeout || errorOf(t, body).Error != "body_timeout" || !strings.Contains(body, "within 3s (--read-timeout)") {
			t.Fatalf("answer %d %s", resp.StatusCode, body)
		}
		if took := at.Sub(start); took != 3*time.Second {
			t.Fatalf("cut after %s, want the read timeout, 3s", took)
		}
		if !resp.Close || !closedByServer(c) {
			t.Fatal("the connection stays open after the body was cut")
		}
		if n := upstreamRequests(e.srv); n != 0 {
			t.Fatalf("%d upstream requests", n)
		}
	})
}

// A request without a valid key is refused at once, before its body is
// read, and its connection closed; connections that have not presented a
// key are bounded (the next one gets 503), and those that never send a
// request are closed at the header timeout, making room again. A client
// with a key is served.
func TestUnauthenticatedConnectionsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln, e := serveOnPipes(t, func(o *Options) { o.ReadTimeout = 2 * time.Second; o.MaxUnauthenticated = 3 })

		c := ln.dial()
		go io.WriteString(c, "POST /github/repos/o/r/issues HTTP/1.1\r\nHost: gw\r\nContent-Length: 100000\r\n\r\n")
		start := time.Now()
		resp, body, at := readAnswer(t, c)
		if resp.StatusCode != http.StatusUnauthorized || errorOf(t, body).Error != "client_key" || at != start || !resp.Close || !closedByServer(c) {
			t.Fatalf("keyless request: %d %s after %s, close %v", resp.StatusCode, body, at.Sub(start), resp.Close)
		}
		c.Close()

		var idle []net.Conn
		for range 3 {
			idle = append(idle, ln.dial())
		}
		extra := ln.dial()
		resp, body, _ = readAnswer(t, extra)
		if resp.StatusCode != http.StatusServiceUnavailable || errorOf(t, body).Error != "too_many_unauthenticated" ||
			!strings.Contains(body, "--max-unauthenticated") || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("connection beyond the bound: %d %s", resp.StatusCode, body)
		}
		extra.Close()
		if n := e.gw.conns.unauthenticated(); n != 3 {
			t.Fatalf("%d connections counted, want 3", n)
		}

		// The idle ones are closed at the header timeout.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		for i, c := range idle {
			if !closedByServer(c) {
				t.Fatalf("idle connection %d still open", i)
			}
			c.Close()
		}
		synctest.Wait()
		if n := e.gw.conns.unauthenticated(); n != 0 {
			t.Fatalf("%d connections counted after they closed", n)
		}

		// A client with its key: served, and no longer counted while it
		// keeps its connection.
		c = ln.dial()
		defer c.Close()
		go io.WriteString(c, "GET /github/repos/o/r HTTP/1.1\r\nHost: gw\r\nX-Ratekeeper-Key: "+testKey+"\r\n\r\n")
		resp, body, _ = readAnswer(t, c)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("with a key: %d %s", resp.StatusCode, body)
		}
		if n := e.gw.conns.unauthenticated(); n != 0 {
			t.Fatalf("%d connections counted with the authenticated one open", n)
		}
	})
}
