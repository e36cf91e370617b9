package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// run executes the CLI in-process and returns stdout, stderr and the exit
// status.
func run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Execute(args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestExplainJSONKeys(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "responses", "github-primary-exceeded.http"))
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, code := run(t, string(data), "explain", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value: %s", out)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := []string{"headers_used", "limit", "limit_kind", "rate_limited", "remaining", "reset_unix", "resource", "retry_after_seconds", "server_time", "used", "wait_seconds"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("keys = %v, want %v", keys, want)
	}
	checks := map[string]any{
		"limit": 5000.0, "remaining": 0.0, "used": 5000.0, "reset_unix": 1767229200.0,
		"retry_after_seconds": nil, "resource": "core", "rate_limited": true,
		"limit_kind": "primary", "wait_seconds": 754.0, "server_time": "2026-01-01T00:47:26Z",
	}
	for k, v := range checks {
		if !reflect.DeepEqual(m[k], v) {
			t.Errorf("%s = %#v, want %#v", k, m[k], v)
		}
	}
}

func TestExplainNowFlagAndNoHeaders(t *testing.T) {
	resp := "HTTP/1.1 200 OK\nContent-Type: text/plain\n\nhello"
	out, _, code := run(t, resp, "explain", "--json", "--now", "2026-01-01T00:00:00Z")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var s struct {
		Limit       *int64   `json:"limit"`
		RateLimited bool     `json:"rate_limited"`
		LimitKind   *string  `json:"limit_kind"`
		Wait        float64  `json:"wait_seconds"`
		Used        []string `json:"headers_used"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	if s.Limit != nil || s.RateLimited || s.LimitKind != nil || s.Wait != 0 || s.Used == nil || len(s.Used) != 0 {
		t.Fatalf("unexpected %s", out)
	}

	// --now decides the wait for a delta reset and an absolute one alike.
	resp = "HTTP/2 429\nx-ratelimit-remaining: 0\nx-ratelimit-reset: 1767229200\n\n"
	out, _, _ = run(t, resp, "explain", "--json", "--now", "2026-01-01T00:59:00Z")
	if !strings.Contains(out, `"wait_seconds":60`) {
		t.Fatalf("want a 60 s wait: %s", out)
	}
}

func TestExplainHuman(t *testing.T) {
	resp := "HTTP/2 403\ndate: Thu, 01 Jan 2026 00:47:26 GMT\nx-ratelimit-limit: 5000\nx-ratelimit-remaining: 0\nx-ratelimit-reset: 1767229200\nx-ratelimit-resource: core\n\n"
	out, _, code := run(t, resp, "explain")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	first := strings.SplitN(out, "\n", 2)[0]
	want := "GitHub primary rate limit exceeded (resource core): 0 of 5000 left; resets 2026-01-01T01:00:00Z (in 12m34s). Wait 12m34s before the next request."
	if first != want {
		t.Fatalf("got  %q\nwant %q", first, want)
	}
}

func TestExplainRejectsNonHTTP(t *testing.T) {
	for _, in := range []string{"", "not http at all\n", "GET / HTTP/1.1\n\n"} {
		out, stderr, code := run(t, in, "explain")
		if code != 2 {
			t.Errorf("input %q: exit %d, want 2", in, code)
		}
		if out != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || stderr == "" {
			t.Errorf("input %q: want one line on stderr, got out=%q err=%q", in, out, stderr)
		}
	}
	_, stderr, code := run(t, "HTTP/1.1 200 OK\n\n", "explain", "--now", "yesterday")
	if code != 2 || !strings.Contains(stderr, "RFC 3339") {
		t.Fatalf("bad --now: exit %d, %q", code, stderr)
	}
}

func TestEnvSetsFlags(t *testing.T) {
	t.Setenv("RATEKEEPER_NOW", "2026-01-01T00:59:00Z")
	t.Setenv("RATEKEEPER_JSON", "true")
	out, _, code := run(t, "HTTP/2 429\nx-ratelimit-remaining: 0\nx-ratelimit-reset: 1767229200\n\n", "explain")
	if code != 0 || !strings.Contains(out, `"wait_seconds":60`) {
		t.Fatalf("env flags not applied: exit %d, %s", code, out)
	}
	t.Setenv("RATEKEEPER_JSON", "maybe")
	_, stderr, code := run(t, "HTTP/2 200\n\n", "explain")
	if code != 2 || !strings.Contains(stderr, "RATEKEEPER_JSON") {
		t.Fatalf("bad env value: exit %d, %q", code, stderr)
	}
}
