package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// headerTimeout bounds reading a request's header (ReadTimeout if that is
// shorter).
const headerTimeout = 10 * time.Second

// A client that has not shown a valid key costs the gateway a connection
// and a goroutine for as long as it keeps the connection open, and a
// public gateway's clients are anyone. So the connections that have not
// yet presented a valid key (without keys: not yet sent a request) are
// counted, and beyond Options.MaxUnauthenticated new connections are
// answered 503 and closed at once. A connection stops counting when a
// request on it passes the key check, or when it closes; the key check
// refuses with "Connection: close", so a refused client does not keep its
// connection either. Header and body reading are bounded (headerTimeout,
// Options.ReadTimeout), so a client that trickles cannot hold one for
// long.

// connLimiter counts the connections that have not yet authenticated.
type connLimiter struct {
	max     int
	onLimit func() // counts a connection refused for the limit

	mu sync.Mutex
	n  int
}

func (l *connLimiter) admit() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n >= l.max {
		return false
	}
	l.n++
	return true
}

func (l *connLimiter) release() {
	l.mu.Lock()
	l.n--
	l.mu.Unlock()
}

// unauthenticated returns how many connections have not yet authenticated.
func (l *connLimiter) unauthenticated() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// listen wraps ln so that its connections are counted until they
// authenticate, and those beyond the limit are refused.
func (l *connLimiter) listen(ln net.Listener) net.Listener { return &limitListener{Listener: ln, l: l} }

type limitListener struct {
	net.Listener
	l *connLimiter
}

func (ll *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if ll.l.admit() {
			return &limitedConn{Conn: c, l: ll.l}, nil
		}
		ll.l.onLimit()
		go refuseConn(c, ll.l.max)
	}
}

// refuseConn answers a connection beyond the limit with a 503 and closes
// it, without reading anything from it.
func refuseConn(c net.Conn, limit int) {
	body := fmt.Sprintf(`{"message":"the gateway holds %d connections that have not yet presented a client key, its limit (--max-unauthenticated); send the key in the first request of a connection, or retry in a moment","error":"too_many_unauthenticated"}`+"\n", limit)
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %s\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s",
		strconv.Itoa(len(body)), body)
	_ = c.Close()
}

// limitedConn is a counted connection.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	done atomic.Bool // authenticated or closed: no longer counted
}

// authenticate stops counting c.
func (c *limitedConn) authenticate() {
	if c.done.CompareAndSwap(false, true) {
		c.l.release()
	}
}

func (c *limitedConn) Close() error {
	c.authenticate()
	return c.Conn.Close()
}

type connKey struct{}

// connContext makes a connection reachable from its requests' contexts.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// authenticated stops counting the connection r came on.
func authenticated(r *http.Request) {
	if lc, ok := r.Context().Value(connKey{}).(*limitedConn); ok {
		lc.authenticate()
	}
}

// mayHaveBody reports whether r announced a body (a length, or chunks).
func mayHaveBody(r *http.Request) bool {
	return r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
}

// setReadDeadline sets the read deadline of r's connection, when there is
// one (not for requests served in process). The zero time clears it.
//
// The gateway sets per-request deadlines rather than http.Server's
// ReadTimeout: net/http keeps ReadTimeout's deadline on the connection
// while the handler runs, and its background read (which watches for the
// client leaving) then fails and cancels the request's context once the
// deadline passes — a request waiting for quota longer than the read
// timeout would look like one whose client left.
func setReadDeadline(w http.ResponseWriter, t time.Time) {
	_ = http.NewResponseController(w).SetReadDeadline(t)
}

// isDeadline reports a read that failed at its deadline.
func isDeadline(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
