package gateway

import (
	"container/list"
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

// A connection that has not sent a request (with client keys: one with a
// valid key) costs the gateway a goroutine and a file descriptor for as
// long as it stays open, and anyone who can reach the gateway can open
// many and send nothing, or a byte a second. These are the pending
// connections; three bounds keep them from holding the gateway:
//
//   - Time: a request header must arrive within headerTimeout.
//   - Per client address, always: beyond Options.MaxPendingPerAddress
//     pending connections from one address, a new one is still accepted
//     and the oldest pending one from that address is closed instead, if
//     it has waited slowHeader or longer (a burst of new connections is
//     not slow) or the address holds pendingBurst times the bound. Nobody
//     is turned away at the door, so a slow client cannot lock out others
//     on the same address (on loopback, every client has the same one): it
//     only loses its own oldest connections, while a well-behaved client's
//     connection is pending for the moment it takes to send its header.
//   - With client keys only, in all: beyond Options.MaxUnauthenticated
//     pending connections, new ones are answered 503 and closed. Without
//     keys the gateway serves loopback only, and such a limit would let
//     257 slow connections lock everyone out.
//
// A connection stops being pending when a request on it reaches the
// handler (with keys: passes the key check; the check refuses with
// "Connection: close"), or when it closes. Every connection refused or
// closed for these bounds is counted by reason in /metrics and logged,
// at most a line per reason every refusalLogEvery.

const (
	// slowHeader is how long a connection may wait for its first
	// request header before a newer one from its address may replace it.
	slowHeader = time.Second
	// pendingBurst times Options.MaxPendingPerAddress is the most pending
	// connections an address may hold, however young.
	pendingBurst = 4
)

// Reasons a connection is refused or closed before its first request, as
// /metrics and the log name them.
const (
	reasonUnauthenticated = "too_many_unauthenticated"
	reasonAddress         = "too_many_from_address"
	reasonHeaderTimeout   = "header_timeout"
)

// connLimiter keeps the pending connections, by client address, oldest
// first.
type connLimiter struct {
	max        int // pending connections in all (503 beyond); 0: no bound
	perAddress int
	onRefuse   func(reason, address string)

	mu        sync.Mutex
	n         int
	byAddress map[string]*list.List // of *limitedConn
}

func newConnLimiter(max, perAddress int, onRefuse func(reason, address string)) *connLimiter {
	return &connLimiter{max: max, perAddress: perAddress, onRefuse: onRefuse, byAddress: map[string]*list.List{}}
}

// admit counts c as pending, or says it is one too many (with keys). To
// make room, it may return an older pending connection from c's address,
// no longer counted, for the caller to close.
func (l *connLimiter) admit(c net.Conn, now time.Time) (lc, evicted *limitedConn) {
	addr := addressOf(c.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.n >= l.max {
		return nil, nil
	}
	q := l.byAddress[addr]
	if q == nil {
		q = list.New()
		l.byAddress[addr] = q
	}
	if q.Len() >= l.perAddress {
		oldest := q.Front().Value.(*limitedConn)
		if (now.Sub(oldest.since) >= slowHeader || q.Len() >= pendingBurst*l.perAddress) && oldest.done.CompareAndSwap(false, true) {
			l.removeLocked(oldest)
			evicted = oldest
		}
	}
	lc = &limitedConn{Conn: c, l: l, addr: addr, since: now}
	lc.elem = q.PushBack(lc)
	l.n++
	return lc, evicted
}

// release stops counting c.
func (l *connLimiter) release(c *limitedConn) {
	l.mu.Lock()
	l.removeLocked(c)
	l.mu.Unlock()
}

func (l *connLimiter) removeLocked(c *limitedConn) {
	if c.elem == nil {
		return
	}
	q := l.byAddress[c.addr]
	q.Remove(c.elem)
	if q.Len() == 0 {
		delete(l.byAddress, c.addr)
	}
	c.elem = nil
	l.n--
}

// unauthenticated returns how many connections are pending.
func (l *connLimiter) unauthenticated() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// addressOf is the client address a connection counts against: its IP
// without the port.
func addressOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	s := a.String()
	if host, _, err := net.SplitHostPort(s); err == nil {
		return host
	}
	return s
}

// listen wraps ln so that its connections are counted while pending, and
// bounded.
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
		lc, evicted := ll.l.admit(c, time.Now())
		if evicted != nil {
			_ = evicted.Conn.Close()
			ll.l.onRefuse(reasonAddress, evicted.addr)
		}
		if lc != nil {
			return lc, nil
		}
		ll.l.onRefuse(reasonUnauthenticated, addressOf(c.RemoteAddr()))
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
	l     *connLimiter
	addr  string
	since time.Time

	elem     *list.Element // in l.byAddress while pending; guarded by l.mu
	done     atomic.Bool   // authenticated, closed or evicted: no longer counted
	timedOut atomic.Bool   // a read failed at its deadline while pending
}

// authenticate stops counting c.
func (c *limitedConn) authenticate() {
	if c.done.CompareAndSwap(false, true) {
		c.l.release(c)
	}
}

// Read notes a read that failed at its deadline while c was pending: the
// request header did not come within the header timeout.
func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && !c.done.Load() && isDeadline(err) {
		c.timedOut.Store(true)
	}
	return n, err
}

func (c *limitedConn) Close() error {
	if c.done.CompareAndSwap(false, true) {
		c.l.release(c)
		if c.timedOut.Load() {
			c.l.onRefuse(reasonHeaderTimeout, c.addr)
		}
	}
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
