package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
	"github.com/ratekeeper/ratekeeper/wiring"
)

// simHost is the made-up host of in-process simulators: nothing dials it,
// the simulator's own RoundTripper answers every request, so tests run
// inside synctest bubbles on fake time.
const simHost = "http://sim.test"

// gwBase is the gateway's address as in-process clients write it.
const gwBase = "http://gw.test"

// env is a gateway in front of a simulator.
type env struct {
	srv    *sim.Server
	gw     *Gateway
	client *http.Client
	events *eventLog
}

type eventLog struct {
	mu sync.Mutex
	ev []transport.Event
}

func (l *eventLog) add(e transport.Event) { l.mu.Lock(); l.ev = append(l.ev, e); l.mu.Unlock() }

func (l *eventLog) count(k transport.EventKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.ev {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// githubAPI is a simulated GitHub mounted at /github.
func githubAPI(limit int64, window time.Duration, tokens ...sim.TokenConfig) sim.APIConfig {
	return sim.APIConfig{Name: "github", Dialect: sim.DialectGitHub, Prefix: "/github", Limit: limit, Window: window, Tokens: tokens}
}

// newEnv serves the APIs from one in-process simulator through a gateway
// whose providers are named after the APIs and hold the given tokens.
// tune adjusts the gateway options last.
func newEnv(t testing.TB, apis []sim.APIConfig, tokens map[string][]string, tune func(*Options)) *env {
	t.Helper()
	srv, err := sim.New(sim.Config{Seed: 1, APIs: apis})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, events: &eventLog{}}
	opts := Options{Client: clientOptions(srv, apis, tokens, e.events, srv.Transport("127.0.0.1:40000"), simHost)}
	for _, a := range apis {
		opts.Providers = append(opts.Providers, a.Name)
	}
	if tune != nil {
		tune(&opts)
	}
	gw, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	e.gw = gw
	e.client = &http.Client{Transport: handlerRT{gw}}
	return e
}

// clientOptions points a provider named after each API at the simulator
// reachable at host, with the given tokens (none: anonymous, never the
// environment's), sent with base (nil: the gateway's own transport).
func clientOptions(srv *sim.Server, apis []sim.APIConfig, tokens map[string][]string, events *eventLog, base http.RoundTripper, host string) wiring.Options {
	var providers []string
	for _, a := range srv.APIs() {
		suffix := map[string]string{"gitlab": "/api/v4", "gitea": "/api/v1"}[a.Dialect]
		providers = append(providers, a.Name+"="+a.URL(host)+suffix)
	}
	if tokens == nil {
		tokens = map[string][]string{}
	}
	for _, a := range apis {
		if _, ok := tokens[a.Name]; !ok {
			tokens[a.Name] = nil // anonymous, never the environment
		}
	}
	return wiring.Options{
		Providers: providers,
		Tokens:    tokens,
		Policy:    "greedy",
		Base:      base,
		OnEvent:   events.add,
		Tune: func(o *transport.Options) {
			o.RetryBase = 10 * time.Millisecond
			o.RetryCap = 100 * time.Millisecond
		},
	}
}

// handlerRT answers requests by calling a handler in the calling
// goroutine, as a server would after reading the request from a
// connection.
type handlerRT struct{ h http.Handler }

func (rt handlerRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.RequestURI = req.URL.RequestURI()
	r.RemoteAddr = "127.0.0.1:50000"
	if r.Body == nil {
		r.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	rt.h.ServeHTTP(rec, r)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// do sends a request to the gateway and returns the answer with its body
// read.
func (e *env) do(t testing.TB, method, path string, header http.Header, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, gwBase+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func (e *env) get(t testing.TB, path string) (*http.Response, string) {
	t.Helper()
	return e.do(t, http.MethodGet, path, nil, nil)
}

// status reads /status.
func (e *env) status(t testing.TB) transport.StatusReport {
	t.Helper()
	resp, body := e.get(t, "/status")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/status: %d %s", resp.StatusCode, body)
	}
	var rep transport.StatusReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatalf("/status: %v", err)
	}
	return rep
}

// errorOf decodes a gateway error answer.
func errorOf(t testing.TB, body string) errorBody {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("answer is not the gateway's JSON error: %q (%v)", body, err)
	}
	if e.Message == "" || e.Error == "" {
		t.Fatalf("error answer without message or code: %q", body)
	}
	return e
}

// noSecret fails when s contains any of the secrets.
func noSecret(t testing.TB, what, s string, secrets ...string) {
	t.Helper()
	for _, sec := range secrets {
		if strings.Contains(s, sec) {
			t.Fatalf("%s reveals a secret: %q", what, s)
		}
	}
}

// headerText flattens a header for secret checks.
func headerText(h http.Header) string {
	var b strings.Builder
	for k, vv := range h {
		b.WriteString(k + ": " + strings.Join(vv, ", ") + "\n")
	}
	return b.String()
}
