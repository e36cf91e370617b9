package gateway

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// logBuffer collects a logger's lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// slowClient opens a connection and sends a request header that never
// ends, a byte a second, opening another connection at the next second
// whenever the gateway closes one, until stop closes.
func slowClient(dial func() net.Conn, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	const header = "GET /github/repos/o/r HTTP/1.1\r\nX-Slow: "
	var c net.Conn
	for i := 0; ; i++ {
		if c == nil {
			c, i = dial(), 0
			go io.Copy(io.Discard, c) // whatever the gateway says
		}
		b := byte('a') // the header line goes on for ever
		if i < len(header) {
			b = header[i]
		}
		if _, err := c.Write([]byte{b}); err != nil {
			c.Close() // closed by the gateway: connect again
			c = nil
		}
		select {
		case <-stop:
			if c != nil {
				c.Close()
			}
			return
		case <-tick.C:
		}
	}
}

// probe sends one whole request on a new connection and reports whether
// it was answered 200 with no time passing.
func probe(t *testing.T, c net.Conn) bool {
	defer c.Close()
	start := time.Now()
	go io.WriteString(c, "GET /github/repos/o/r HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
	resp, body, at := readAnswer(t, c)
	if resp.StatusCode != http.StatusOK || at != start {
		t.Logf("probe: %d after %s: %s", resp.StatusCode, at.Sub(start), body)
		return false
	}
	return true
}

// Without client keys, 300 connections from the clients' address that
// trickle their header a byte a second (opening a new one whenever one is
// closed) do not keep a well-behaved client from being answered at once,
// 60 times out of 60 over 30 s, although --max-unauthenticated is 3: that
// bound is for keys only. The slow connections stay bounded (never more
// pending than four times --max-pending-per-address), the gateway closes
// the oldest of them for newer ones, and the header timeout closes those
// of an address that keeps below the bound; both are counted by reason in
// /metrics and logged at most once every 10 s per reason.
func TestSlowConnectionsDoNotLockOutWithoutKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logBuffer{}
		ln, e := serveOnLoopbackPipes(t, func(o *Options) {
			o.MaxUnauthenticated = 3
			o.Logger = slog.New(slog.NewTextHandler(logs, nil))
		})
		stop := make(chan struct{})
		var slow sync.WaitGroup
		for range 300 {
			slow.Go(func() { slowClient(ln.dial, stop) })
		}
		// A few from another address stay below the bound: only the
		// header timeout closes theirs.
		for range 3 {
			slow.Go(func() { slowClient(func() net.Conn { return ln.dialFrom("127.0.0.2") }, stop) })
		}
		answered, most := 0, 0
		for range 60 {
			time.Sleep(500 * time.Millisecond)
			synctest.Wait()
			most = max(most, e.gw.conns.unauthenticated())
			if probe(t, ln.dial()) {
				answered++
			}
		}
		close(stop)
		slow.Wait()
		synctest.Wait()

		if answered != 60 {
			t.Errorf("the well-behaved client was answered at once %d times of 60", answered)
		}
		if bound := pendingBurst*DefaultMaxPendingPerAddress + 3; most > bound {
			t.Errorf("%d connections pending, want at most %d", most, bound)
		}
		closedForNewer := testutil.ToFloat64(e.gw.metrics.connections.WithLabelValues(reasonAddress))
		timedOut := testutil.ToFloat64(e.gw.metrics.connections.WithLabelValues(reasonHeaderTimeout))
		refused := testutil.ToFloat64(e.gw.metrics.connections.WithLabelValues(reasonUnauthenticated))
		if closedForNewer == 0 || timedOut == 0 || refused != 0 {
			t.Errorf("connections closed for newer ones %v, at the header timeout %v, refused for keys %v; want some, some, none",
				closedForNewer, timedOut, refused)
		}
		e.gw.Close() // logs what the last period gathered
		lines := regexp.MustCompile(`(?m)^.*msg=refused reason=`+reasonAddress+` count=(\d+).*$`).FindAllString(logs.String(), -1)
		if len(lines) == 0 || len(lines) > 30/10+2 {
			t.Errorf("%d log lines for %s over 30 s, want 1 to 5:\n%s", len(lines), reasonAddress, logs.String())
		}
		if !strings.Contains(logs.String(), "reason="+reasonHeaderTimeout) {
			t.Errorf("header timeouts not logged:\n%s", logs.String())
		}
	})
}

// With client keys, the bound on connections without a key stays: the
// next one gets 503, counted and logged.
func TestUnauthenticatedBoundIsCountedAndLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logBuffer{}
		ln, e := serveOnPipes(t, func(o *Options) {
			o.MaxUnauthenticated = 2
			o.Logger = slog.New(slog.NewTextHandler(logs, nil))
		})
		var idle []net.Conn
		for range 2 {
			idle = append(idle, ln.dial())
		}
		for range 3 {
			c := ln.dial()
			resp, _, _ := readAnswer(t, c)
			c.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("beyond the bound: %d", resp.StatusCode)
			}
		}
		if n := testutil.ToFloat64(e.gw.metrics.connections.WithLabelValues(reasonUnauthenticated)); n != 3 {
			t.Errorf("%v refusals counted, want 3", n)
		}
		for _, c := range idle {
			c.Close()
		}
		e.gw.Close()
		// One line at once, the other two when the period ends.
		got := regexp.MustCompile(`msg=refused reason=`+reasonUnauthenticated+` count=(\d+)`).FindAllStringSubmatch(logs.String(), -1)
		if len(got) != 2 || got[0][1] != "1" || got[1][1] != "2" {
			t.Errorf("log lines %q, want counts 1 then 2:\n%s", got, logs.String())
		}
	})
}
