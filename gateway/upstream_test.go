package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

// gatewayFor serves one generic provider "up" at base, sent with rt (nil:
// the gateway's own transport), through an in-process client.
func gatewayFor(t testing.TB, base string, rt http.RoundTripper, tune func(*Options)) (*Gateway, *http.Client) {
	t.Helper()
	opts := Options{Providers: []string{"up"}}
	opts.Client.Providers = []string{"up=" + base}
	opts.Client.Tokens = map[string][]string{"up": {"tok-up-1"}}
	opts.Client.Base = rt
	opts.Client.Tune = func(o *transport.Options) {
		o.RetryBase = time.Millisecond
		o.RetryCap = 10 * time.Millisecond
	}
	if tune != nil {
		tune(&opts)
	}
	gw, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	return gw, &http.Client{Transport: handlerRT{gw}}
}

func read(t testing.TB, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// An upstream nobody listens on: 502 with a message that names the
// provider and the cause.
func TestUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, c := gatewayFor(t, "http://"+addr, nil, nil)
	resp, body := read(t, c, gwBase+"/up/things?x=1")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	e := errorOf(t, body)
	if e.Error != "upstream_unreachable" || e.Provider != "up" || !strings.Contains(e.Message, "connection refused") {
		t.Fatalf("error %+v", e)
	}
	noSecret(t, "answer", body, "tok-up-1")
}

// An upstream that never answers: 504 once the upstream timeout has passed
// since the request was sent (it needed no wait for quota), saying so,
// and the upstream request is cancelled.
func TestUpstreamTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cancelled atomic.Bool
		hang := rtFunc(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			cancelled.Store(true)
			return nil, r.Context().Err()
		})
		_, c := gatewayFor(t, "http://up.test", hang, func(o *Options) {
			o.UpstreamTimeout = 20 * time.Second
			o.Client.MaxWait = 10 * time.Second
		})
		start := time.Now()
		resp, body := read(t, c, gwBase+"/up/slow")
		if resp.StatusCode != http.StatusGatewayTimeout || errorOf(t, body).Error != "upstream_timeout" {
			t.Fatalf("status %d %s", resp.StatusCode, body)
		}
		if msg := errorOf(t, body).Message; !strings.Contains(msg, "no answer within 20s (--upstream-timeout)") {
			t.Fatalf("message %q", msg)
		}
		if took := time.Since(start); took != 20*time.Second {
			t.Fatalf("gave up after %s, want 20s", took)
		}
		if !cancelled.Load() {
			t.Fatal("the upstream request was not cancelled")
		}
	})
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A body the upstream writes in pieces reaches the client piece by piece:
// the first arrives while the upstream still holds the rest back. This
// holds for a GET (which may be coalesced) as well as for a POST. A client
// that leaves mid-stream ends the upstream request.
func TestResponsesStream(t *testing.T) {
	gone := make(chan string, 2)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		gone <- r.Method
	}))
	defer up.Close()
	gw, _ := gatewayFor(t, up.URL, nil, nil)
	ts := httptest.NewServer(gw)
	defer ts.Close()
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		req, _ := http.NewRequest(method, ts.URL+"/up/events", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "data: first\n" {
			t.Fatalf("%s: first piece %q, %v", method, line, err)
		}
		resp.Body.Close()
		select {
		case m := <-gone:
			if m != method {
				t.Fatalf("upstream %s ended, want %s", m, method)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the upstream request outlived its client", method)
		}
	}
}

// On shutdown the gateway stops accepting, lets a request in flight
// finish, and Serve returns nil.
func TestGracefulShutdown(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer up.Close()
	gw, _ := gatewayFor(t, up.URL, nil, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- gw.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()

	got := make(chan string, 1)
	go func() {
		resp, err := http.Get(url + "/up/slow")
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- fmt.Sprint(resp.StatusCode, " ", string(b))
	}()
	<-arrived
	stop()
	// Shutdown closes the listener first: new connections are refused
	// while the request in flight is still being answered.
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			break
		}
		c.Close()
		if i == 1000 {
			t.Fatal("still accepting connections after shutdown began")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if g := <-got; g != `200 {"ok":true}` {
		t.Fatalf("request in flight got %q", g)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// Without an answer from upstream, the simulator's faults become 502s,
// never a panic. (The gateway does not resend: the client decides.)
func TestUpstreamDropsConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := githubAPI(100, time.Hour, simTokens...)
		api.Faults = sim.FaultConfig{DropRate: 1}
		e := newEnv(t, []sim.APIConfig{api}, map[string][]string{"github": {"tok-alice-1"}}, nil)
		resp, body := e.get(t, "/github/repos/o/r")
		if resp.StatusCode != http.StatusBadGateway || errorOf(t, body).Error != "upstream_unreachable" {
			t.Fatalf("status %d %s", resp.StatusCode, body)
		}
	})
}
