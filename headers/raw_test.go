package headers

import (
	"errors"
	"strings"
	"testing"
)

func TestReadRaw(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		status int
		header string // one header to check, "Name: value"
		body   string
	}{
		{"curl -i HTTP/1.1 CRLF", "HTTP/1.1 403 Forbidden\r\nX-RateLimit-Remaining: 0\r\n\r\n{\"m\":1}", 403, "X-Ratelimit-Remaining: 0", `{"m":1}`},
		{"HTTP/2 without reason, LF", "HTTP/2 429\nretry-after: 5\n\n", 429, "Retry-After: 5", ""},
		{"headers only, no blank line", "HTTP/2 200\nx-ratelimit-limit: 60", 200, "X-Ratelimit-Limit: 60", ""},
		{"leading blank lines", "\n\n  HTTP/1.0 200 OK\nA: b\n\nbody", 200, "A: b", "body"},
		{"100 continue first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nA: b\r\n\r\nx", 201, "A: b", "x"},
		{"proxy connect then response", "HTTP/1.1 200 Connection established\r\n\r\nHTTP/2 429\r\nretry-after: 9\r\n\r\n", 429, "Retry-After: 9", ""},
		{"redirect followed by -L", "HTTP/2 301\nlocation: /x\n\nHTTP/2 200\nx-ratelimit-remaining: 7\n\nok", 200, "X-Ratelimit-Remaining: 7", "ok"},
		{"folded header line", "HTTP/1.1 200 OK\nA: one\n two\n\n", 200, "A: one two", ""},
		{"junk line ignored", "HTTP/1.1 200 OK\nnot a header\nA: b\n\n", 200, "A: b", ""},
		{"curl -v", "* Trying 127.0.0.1\n> GET / HTTP/1.1\n> Host: x\n>\n< HTTP/1.1 429 Too Many Requests\n< Retry-After: 3\n<\n{}\n* Connection left intact\n", 429, "Retry-After: 3", "{}\n"},
		{"HTTP/3", "HTTP/3 200\nA: b\n\n", 200, "A: b", ""},
		{"documentation quoting", "> HTTP/2 200\n> Date: Mon, 01 Jul 2013 17:27:06 GMT\n> x-ratelimit-remaining: 56\n", 200, "X-Ratelimit-Remaining: 56", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw, err := ReadRaw(strings.NewReader(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if raw.Status != c.status {
				t.Errorf("status = %d, want %d", raw.Status, c.status)
			}
			k, v, _ := strings.Cut(c.header, ": ")
			if got := raw.Header.Get(k); got != v {
				t.Errorf("%s = %q, want %q (header %v)", k, got, v, raw.Header)
			}
			if string(raw.Body) != c.body {
				t.Errorf("body = %q, want %q", raw.Body, c.body)
			}
		})
	}
}

func TestReadRawRejects(t *testing.T) {
	for _, in := range []string{"", "   \n", "hello world", "GET / HTTP/1.1\nHost: x\n\n", "HTTP/1.1 abc\n", "HTTP/1.1 20\n", "{\"json\":true}"} {
		_, err := ReadRaw(strings.NewReader(in))
		if !errors.Is(err, ErrNotHTTP) {
			t.Errorf("ReadRaw(%q) error = %v, want ErrNotHTTP", in, err)
		}
	}
}
