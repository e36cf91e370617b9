package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// serve refuses bad input before listening, with exit status 2 and a
// message that says what would be right.
func TestServeBadInput(t *testing.T) {
	dir := t.TempDir()
	badKeys := filepath.Join(dir, "keys.txt")
	if err := os.WriteFile(badKeys, []byte("# clients\nci 0123456789abcdef\ncrawler short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RATEKEEPER_GATEWAY_KEYS", "")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--listen", "0.0.0.0:0", "--db", "memory"}, "not a loopback address, needs client keys: give --client-keys FILE"},
		{[]string{"serve", "--client-keys", badKeys, "--db", "memory"}, `keys.txt: line 3: the key of "crawler" is 5 characters; use at least 16`},
		{[]string{"serve", "--client-keys", filepath.Join(dir, "missing"), "--db", "memory"}, "client keys: open"},
		{[]string{"serve", "--provider", "nope", "--db", "memory"}, `unknown provider "nope"`},
		{[]string{"serve", "--max-body", "lots", "--db", "memory"}, `--max-body "lots": want a size such as 10MiB`},
		{[]string{"serve", "--host", "github", "--db", "memory"}, `--host "github": expected HOST=PROVIDER`},
		{[]string{"serve", "--max-wait", "0s", "--db", "memory"}, "--max-wait 0s: want a positive duration"},
		{[]string{"serve", "--provider", "github=ftp://x", "--db", "memory"}, "base URL must be http or https"},
		{[]string{"serve", "--read-timeout", "0s", "--db", "memory"}, "--read-timeout 0s: want a positive duration such as 30s"},
		{[]string{"serve", "--upstream-timeout", "-1s", "--db", "memory"}, "--upstream-timeout -1s: want a positive duration"},
		{[]string{"serve", "--max-unauthenticated", "0", "--db", "memory"}, "--max-unauthenticated 0: want at least 1 connection, such as 256"},
		{[]string{"serve", "--max-pending-per-address", "0", "--db", "memory"}, "--max-pending-per-address 0: want at least 1 connection, such as 64"},
		{[]string{"serve", "--max-pass-through", "0", "--db", "memory"}, "--max-pass-through 0: want at least 1 token, such as 1024"},
		{[]string{"serve", "--pass-through-refusal", "-1m", "--db", "memory"}, "--pass-through-refusal -1m0s: want 0 (never refuse) or a duration such as 10m"},
		{[]string{"serve", "--refresh", "-1s", "--db", "memory"}, "--refresh -1s: want 0 (never) or a duration such as 15m"},
	}
	for _, c := range cases {
		_, stderr, code := run(t, "", c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
		if strings.Contains(stderr, "short\n") || strings.Contains(stderr, "0123456789abcdef") {
			t.Errorf("%v: stderr repeats a key: %q", c.args, stderr)
		}
	}
	t.Setenv("RATEKEEPER_GATEWAY_KEYS", "bot tiny")
	if _, stderr, code := run(t, "", "serve", "--db", "memory"); code != 2 || !strings.Contains(stderr, "RATEKEEPER_GATEWAY_KEYS: entry 1:") {
		t.Errorf("bad keys in the environment: exit %d, %q", code, stderr)
	}
}

func TestServeHelp(t *testing.T) {
	out, _, code := run(t, "", "serve", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"--pass-through", "--client-keys", "--max-body", "--max-wait duration", "(default 30s)", "NAME KEY",
		"queueing included", "--read-timeout duration", "--max-unauthenticated int", "--max-pending-per-address int", "--max-pass-through int", "--pass-through-refusal duration",
		"checked before a request's body is read"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe to write from a running command and
// read from the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServe runs `ratekeeper serve` in-process on a free loopback port
// and returns the gateway's base URL; the command stops at the test's end.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	root := NewRoot()
	root.SetArgs(append([]string{"serve", "--listen", "127.0.0.1:0", "--db", "memory", "--refresh", "0"}, args...))
	var out, errOut lockedBuffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v\n%s", err, errOut.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, rest, ok := strings.Cut(out.String(), "ratekeeper gateway on "); ok {
			base, _, _ := strings.Cut(rest, " ")
			return base
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start: %s %s", out.String(), errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serve's flags reach the gateway: a body slower than --read-timeout is
// cut with 408, and a pass-through token the upstream rejected is refused
// for --pass-through-refusal without being sent again.
func TestServeTimeoutsAndRefusals(t *testing.T) {
	var upstream atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstream.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"message":"Bad credentials"}`)
	}))
	defer up.Close()
	base := startServe(t, "--provider", "up="+up.URL, "--pass-through", "--read-timeout", "300ms", "--pass-through-refusal", "1h")

	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "POST /up/things HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\nonly a part")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "within 300ms (--read-timeout)") {
		t.Fatalf("trickled body: %d %s", resp.StatusCode, body)
	}

	for i, want := range []string{"token_rejected", "token_refused", "token_refused"} {
		req, _ := http.NewRequest(http.MethodGet, base+"/up/things", nil)
		req.Header.Set("Authorization", "Bearer made-up-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		if want != "token_rejected" && !strings.Contains(string(body), `"error":"`+want+`"`) {
			t.Fatalf("request %d: %s, want %s", i, body, want)
		}
		if strings.Contains(string(body), "made-up-token") {
			t.Fatalf("the answer repeats the token: %s", body)
		}
	}
	if n := upstream.Load(); n != 1 {
		t.Fatalf("the rejected token was sent upstream %d times, want once", n)
	}
}

// The gateway's answers say what the pool of tokens can do, the server's
// own under X-Ratekeeper-Upstream-; --upstream-rate-limit-headers passes
// the server's as they came.
func TestServeUpstreamRateLimitHeaders(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "5000")
		w.Header().Set("X-RateLimit-Remaining", "4999")
		w.Header().Set("X-RateLimit-Used", "1")
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
		w.Header().Set("X-RateLimit-Resource", "core")
		io.WriteString(w, `{}`)
	}))
	defer up.Close()
	t.Setenv("GITHUB_TOKEN", "tok-serve-0001,tok-serve-0002")
	for _, c := range []struct {
		flags         []string
		limit, server string
	}{
		{nil, "10000", "5000"},
		{[]string{"--upstream-rate-limit-headers"}, "5000", ""},
	} {
		base := startServe(t, append([]string{"--provider", "github=" + up.URL}, c.flags...)...)
		resp, err := http.Get(base + "/github/repos/o/r")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get("X-Ratelimit-Limit"); got != c.limit {
			t.Errorf("%v: X-RateLimit-Limit %q, want %s", c.flags, got, c.limit)
		}
		if got := resp.Header.Get("X-Ratekeeper-Upstream-X-Ratelimit-Limit"); got != c.server {
			t.Errorf("%v: X-Ratekeeper-Upstream-X-RateLimit-Limit %q, want %q", c.flags, got, c.server)
		}
	}
}
