package sim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// t0 is the start of every testing/synctest bubble: 2000-01-01 00:00:00 UTC.
const t0 = int64(946684800)

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	body   string
}

func (a answer) h(key string) string { return a.header.Get(key) }

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(a.body), &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %q", err, a.body)
	}
	return m
}

// client sends requests to a server in-process (so synctest bubbles work).
type client struct {
	t    *testing.T
	rt   http.RoundTripper
	base string
}

func newClient(t *testing.T, srv *Server) *client {
	return &client{t: t, rt: srv.Transport(""), base: "http://sim.test"}
}

func (c *client) from(remoteAddr string, srv *Server) *client {
	return &client{t: c.t, rt: srv.Transport(remoteAddr), base: c.base}
}

// do sends method path with the given header pairs ("Name", "value", ...)
// and an optional body (the last argument if the count is odd).
func (c *client) do(method, path string, kv ...string) answer {
	c.t.Helper()
	a, err := c.try(method, path, kv...)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return a
}

func (c *client) try(method, path string, kv ...string) (answer, error) {
	var body io.Reader
	if len(kv)%2 == 1 {
		body = strings.NewReader(kv[len(kv)-1])
		kv = kv[:len(kv)-1]
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		return answer{}, err
	}
	for i := 0; i < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := c.rt.RoundTrip(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}

func (c *client) get(path, token string, kv ...string) answer {
	c.t.Helper()
	if token != "" {
		kv = append([]string{"Authorization", "Bearer " + token}, kv...)
	}
	return c.do(http.MethodGet, path, kv...)
}

func mustNew(t *testing.T, cfg Config) *Server {
	t.Helper()
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// wantHeaders checks exact header values ("" means absent).
func wantHeaders(t *testing.T, a answer, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got, present := a.header[http.CanonicalHeaderKey(k)]
		switch {
		case v == "" && present:
			t.Errorf("%s = %q, want it absent", k, got)
		case v != "" && a.h(k) != v:
			t.Errorf("%s = %q, want %q", k, a.h(k), v)
		}
	}
}

func noSecondary() *SecondaryConfig { return &SecondaryConfig{} }

func boolp(b bool) *bool { return &b }

func unix(sec int64) string { return time.Unix(sec, 0).UTC().Format(http.TimeFormat) }

func mustJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("bad JSON %q: %v", s, err)
	}
}

func contextWithTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}
