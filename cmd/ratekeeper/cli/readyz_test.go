package cli

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/store/storetest"
)

// cuttableProxy forwards TCP connections to a server until cut: then it
// closes every connection and refuses new ones, as a database that went
// away does, until restored on the same address.
type cuttableProxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func newCuttableProxy(t *testing.T, target string) *cuttableProxy {
	p := &cuttableProxy{t: t, target: target, addr: "127.0.0.1:0"}
	p.restore()
	p.addr = p.ln.Addr().String()
	t.Cleanup(p.cut)
	return p
}

func (p *cuttableProxy) restore() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
}

func (p *cuttableProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// serve's /readyz answers 503 while its PostgreSQL is away and 200 once it
// is back; /healthz answers 200 throughout, since the process is alive.
func TestServeReadyzFollowsTheDatabase(t *testing.T) {
	dsn := storetest.NewPostgresSchema(t, storetest.PostgresBase(t))
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCuttableProxy(t, u.Host)
	u.Host = proxy.addr
	base := startServe(t, "--db", u.String(), "--db-outage-timeout", "1s")

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// until polls a probe until it answers want, for at most 10 s: the
	// database's pool notices a cut or a return on its next use.
	until := func(path string, want int) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, body := get(path)
			if code == want {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d %q, want %d", path, code, body, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if code, body := get("/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz with the database up: %d %q", code, body)
	}
	proxy.cut()
	body := until("/readyz", 503)
	t.Logf("/readyz with the database down: %q", body)
	if !strings.HasPrefix(body, "not ready: the database does not answer: ") {
		t.Errorf("/readyz with the database down: %q", body)
	}
	if strings.Contains(body, u.String()) {
		t.Errorf("the reason shows the DSN: %q", body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz with the database down: %d; the process is alive", code)
	}
	proxy.restore()
	if body := until("/readyz", 200); body != "ready\n" {
		t.Errorf("/readyz with the database back: %q", body)
	}
}
