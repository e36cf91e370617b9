package gateway

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// liveEnv is a gateway and a simulator on real loopback sockets, for what
// only a real connection shows: how request targets arrive, streaming,
// shutdown.
type liveEnv struct {
	srv  *sim.Server
	sim  *httptest.Server
	gw   *Gateway
	gwTS *httptest.Server
}

func newLiveEnv(t testing.TB, apis []sim.APIConfig, tokens map[string][]string, tune func(*Options)) *liveEnv {
	t.Helper()
	srv, err := sim.New(sim.Config{Seed: 1, APIs: apis})
	if err != nil {
		t.Fatal(err)
	}
	simTS := httptest.NewServer(srv)
	t.Cleanup(simTS.Close)
	opts := Options{Client: clientOptions(srv, apis, tokens, &eventLog{}, nil, simTS.URL)}
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
	gwTS := httptest.NewUnstartedServer(gw)
	gwTS.Config = gw.HTTPServer()
	gwTS.Start()
	t.Cleanup(func() { gwTS.Close(); gw.Close() })
	return &liveEnv{srv: srv, sim: simTS, gw: gw, gwTS: gwTS}
}

// raw sends one request exactly as written (request line, headers, body)
// on a new connection and reads the answer.
func (l *liveEnv) raw(t testing.TB, requestLine string, headers []string, body string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", l.gwTS.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	b.WriteString(requestLine + "\r\nHost: " + l.gwTS.Listener.Addr().String() + "\r\nConnection: close\r\n")
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n" + body)
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s: reading the answer: %v", requestLine, err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(out)
}

func gitlabAPI(tokens ...sim.TokenConfig) sim.APIConfig {
	return sim.APIConfig{Name: "gitlab", Dialect: sim.DialectGitLab, Prefix: "/gitlab", Limit: 100, Window: time.Minute, Tokens: tokens}
}

// Only the configured upstreams are reachable, and no request target that
// could mean something else upstream is forwarded.
func TestRequestTargetsRefused(t *testing.T) {
	l := newLiveEnv(t, []sim.APIConfig{githubAPI(100, time.Hour, simTokens...), gitlabAPI(simTokens...)},
		map[string][]string{"github": {"tok-alice-1"}, "gitlab": {"tok-bob-1"}}, func(o *Options) { o.MaxBody = 1024 })
	self := "http://" + l.gwTS.Listener.Addr().String()
	cases := []struct {
		line    string
		headers []string
		body    string
		status  int
		code    string // the gateway's error code; "" when net/http refuses first
	}{
		{"GET http://example.invalid/x HTTP/1.1", nil, "", 400, "absolute_target"},
		{"GET " + self + "/github/repos/o/r HTTP/1.1", nil, "", 400, "absolute_target"},
		{"GET " + l.sim.URL + "/github/repos/o/r HTTP/1.1", nil, "", 400, "absolute_target"},
		{"CONNECT example.invalid:443 HTTP/1.1", nil, "", 400, "absolute_target"},
		{"OPTIONS * HTTP/1.1", nil, "", 400, "bad_target"},
		{"GET /github/../admin HTTP/1.1", nil, "", 400, "dot_segment"},
		{"GET /github/repos/./o/r HTTP/1.1", nil, "", 400, "dot_segment"},
		{"GET /github/repos/o/r/.. HTTP/1.1", nil, "", 400, "dot_segment"},
		{"GET /github/%2e%2e/admin HTTP/1.1", nil, "", 400, "encoded_dot"},
		{"GET /github/%2E%2E/admin HTTP/1.1", nil, "", 400, "encoded_dot"},
		{"GET /github/.%2e/admin HTTP/1.1", nil, "", 400, "encoded_dot"},
		{"GET /github/repos%2fo%2fr HTTP/1.1", nil, "", 400, "encoded_slash"},
		{"GET /github/repos/o%2F..%2F..%2Fadmin HTTP/1.1", nil, "", 400, "encoded_slash"},
		{"GET /github/%252e%252e/admin HTTP/1.1", nil, "", 400, "double_encoding"},
		{"GET /github/repos/o/r%252f HTTP/1.1", nil, "", 400, "double_encoding"},
		{`GET /github\..\admin HTTP/1.1`, nil, "", 400, "backslash"},
		{"GET /github/%5c..%5cadmin HTTP/1.1", nil, "", 400, "backslash"},
		{"GET /github//repos/o/r HTTP/1.1", nil, "", 400, "empty_segment"},
		{"GET //github/repos/o/r HTTP/1.1", nil, "", 400, "empty_segment"},
		{"GET /github/repos/o/r%00 HTTP/1.1", nil, "", 400, "control_char"},
		{"GET /github/repos/o/r%0d%0aX-Injected:%201 HTTP/1.1", nil, "", 400, "control_char"},
		{"GET /github/repos/o/r% HTTP/1.1", nil, "", 400, ""}, // net/http refuses these itself
		{"GET /github/repos/o/r%zz HTTP/1.1", nil, "", 400, ""},
		{"GET /github/repos/o/r?access_token=abc HTTP/1.1", nil, "", 400, "token_in_query"},
		{"GET /github/repos/o/r?a=1;b=2 HTTP/1.1", nil, "", 400, "bad_query"},
		{"GET /gitlab/projects/g%2Fp?private_token=abc HTTP/1.1", nil, "", 400, "token_in_query"},
		{"GET /gitlab/projects/group%2F..%2Fadmin HTTP/1.1", nil, "", 400, "encoded_slash"},
		{"GET /gitlab/projects/group%2F%2Fadmin HTTP/1.1", nil, "", 400, "encoded_slash"},
		{"GET /nope/repos/o/r HTTP/1.1", nil, "", 404, "unknown_provider"},
		{"GET /github%2f..%2fgitlab/x HTTP/1.1", nil, "", 404, "unknown_provider"},
		{"TRACE /github/repos/o/r HTTP/1.1", nil, "", 405, "method"},
		{"GET /github/repos/o/r HTTP/1.1", []string{"Upgrade: websocket", "Connection: Upgrade"}, "", 400, "upgrade"},
		{"POST /github/repos/o/r/issues HTTP/1.1", []string{"Content-Length: 2048", "Content-Type: application/json"}, strings.Repeat("x", 2048), 413, "body_too_large"},
		{"POST /github/repos/o/r/issues HTTP/1.1", []string{"Transfer-Encoding: chunked", "Content-Type: application/json"},
			fmt.Sprintf("%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", 1000, strings.Repeat("x", 1000), 1000, strings.Repeat("y", 1000)), 413, "body_too_large"},
	}
	for _, c := range cases {
		resp, body := l.raw(t, c.line, c.headers, c.body)
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d %q, want %d", c.line, resp.StatusCode, body, c.status)
			continue
		}
		if c.code != "" {
			if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Errorf("%s: answered by net/http, not the gateway: %q", c.line, body)
				continue
			}
			if got := errorOf(t, body).Error; got != c.code {
				t.Errorf("%s: error %q (%s), want %q", c.line, got, body, c.code)
			}
		}
	}
	if n := l.srv.Stats().Total.Requests; n != 0 {
		t.Fatalf("%d refused requests reached the upstream", n)
	}

	// What is allowed: GitLab's encoded project paths, any Host header
	// (it chooses nothing), a body under the limit.
	for _, c := range []struct {
		line    string
		headers []string
		body    string
		status  int
	}{
		{"GET /gitlab/projects/group%2Fproject HTTP/1.1", nil, "", 200},
		{"GET /github/repos/o/r HTTP/1.1", []string{"X-Forwarded-Host: example.invalid"}, "", 200},
		{"POST /github/repos/o/r/issues HTTP/1.1", []string{"Content-Type: application/json", "Content-Length: 17"}, `{"title":"small"}`, 201},
	} {
		resp, body := l.raw(t, c.line, c.headers, c.body)
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d %q, want %d", c.line, resp.StatusCode, body, c.status)
		}
		noSecret(t, "answer", headerText(resp.Header)+body, "tok-")
	}
	gl, _ := l.srv.Stats().BucketFor("gitlab", "bob", "")
	if gl.Accepted == 0 {
		t.Fatal("the GitLab request did not reach the simulated GitLab")
	}
}

// With client keys, every route but the probes and the assets needs one.
func TestClientKeys(t *testing.T) {
	keys, err := ParseKeys("keys.txt", strings.NewReader("ci  key-ci-0123456789abcdef\ncrawler key-crawler-0123456789\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, []sim.APIConfig{githubAPI(100, time.Hour, simTokens...)}, map[string][]string{"github": {"tok-alice-1"}},
		func(o *Options) { o.Keys = keys })
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("anyone:key-crawler-0123456789"))
	cases := []struct {
		path   string
		header http.Header
		status int
	}{
		{"/github/repos/o/r", nil, 401},
		{"/github/repos/o/r", http.Header{HeaderKey: {"key-wrong-0123456789abc"}}, 401},
		{"/github/repos/o/r", http.Header{"Authorization": {"Bearer key-wrong-0123456789abc"}}, 401},
		{"/github/repos/o/r", http.Header{HeaderKey: {"key-ci-0123456789abcdef"}}, 200},
		// The key as the client's "token": checked, then replaced by the
		// gateway's (the simulator would refuse the key with 401).
		{"/github/repos/o/r", http.Header{"Authorization": {"token key-ci-0123456789abcdef"}}, 200},
		{"/nope/x", nil, 401},
		{"/nope/x", http.Header{HeaderKey: {"key-ci-0123456789abcdef"}}, 404},
		{"/status", nil, 401},
		{"/status", http.Header{"Authorization": {"Bearer key-ci-0123456789abcdef"}}, 200},
		{"/metrics", nil, 401},
		{"/metrics", http.Header{HeaderKey: {"key-crawler-0123456789"}}, 200},
		{"/", nil, 401},
		{"/", http.Header{"Authorization": {basic}}, 200},
		{"/healthz", nil, 200},
		{"/readyz", nil, 200},
		{"/assets/style.css", nil, 200},
	}
	for _, c := range cases {
		resp, body := e.do(t, http.MethodGet, c.path, c.header, nil)
		if resp.StatusCode != c.status {
			t.Errorf("%s %v: %d %s, want %d", c.path, c.header, resp.StatusCode, body, c.status)
			continue
		}
		if c.status == 401 {
			if resp.Header.Get("WWW-Authenticate") == "" || errorOf(t, body).Error != "client_key" {
				t.Errorf("%s: 401 without WWW-Authenticate or error code: %v %s", c.path, resp.Header, body)
			}
		}
		noSecret(t, "answer", headerText(resp.Header)+body, "key-ci-", "key-crawler-", "key-wrong-", "tok-")
	}
	if v := e.srv.Stats().Total.Unauthorized; v != 0 {
		t.Fatalf("%d requests reached the upstream with a bad token: a client key leaked upstream", v)
	}
}

// Without client keys the gateway listens on loopback only.
func TestListenNeedsKeysOffLoopback(t *testing.T) {
	for _, c := range []struct {
		addr string
		keys int
		ok   bool
	}{
		{"127.0.0.1:8080", 0, true},
		{"[::1]:8080", 0, true},
		{"localhost:8080", 0, true},
		{"0.0.0.0:8080", 0, false},
		{":8080", 0, false},
		{"gateway.example:8080", 0, false},
		{"0.0.0.0:8080", 1, true},
		{"127.0.0.1", 0, false},
	} {
		err := CheckListen(c.addr, c.keys)
		if (err == nil) != c.ok {
			t.Errorf("CheckListen(%q, %d) = %v", c.addr, c.keys, err)
		}
	}
	e := newEnv(t, []sim.APIConfig{githubAPI(100, time.Hour, simTokens...)}, nil, nil)
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	err = e.gw.Serve(t.Context(), ln)
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") || !strings.Contains(err.Error(), "--client-keys") {
		t.Fatalf("Serve on %s without keys: %v", ln.Addr(), err)
	}
}
