package tasks

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ratekeeper/ratekeeper/cache"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// An http task carrying a previous answer is sent conditional on it: a
// 304 completes it with that answer (marked not modified), a change with
// the new one, and a previous body that is gone or changed is not trusted.
func TestHTTPTaskRevalidatesAPreviousAnswer(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{} // path → If-None-Match
	held := map[string]bool{}   // path → the client was given the body
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{name}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = r.Header.Get("If-None-Match")
		if r.Header.Get("If-None-Match") != "" && !strings.Contains(strings.Join(r.Header.Values("Cache-Control"), ","), "no-cache") {
			// A re-sync always asks the server.
			seen[r.URL.Path] += " without no-cache"
		}
		mu.Unlock()
		body := "v1 of " + r.PathValue("name")
		if r.PathValue("name") == "changed" {
			body = "v2"
		}
		tag := `"` + sha(body)[:8] + `"`
		w.Header().Set("Etag", tag)
		if r.Header.Get("If-None-Match") == tag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		io.WriteString(w, body)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		mu.Lock()
		held[req.URL.Path] = cache.HeldBody(req.Context()) != nil
		mu.Unlock()
		return http.DefaultTransport.RoundTrip(req)
	})}
	dir := t.TempDir()
	file := filepath.Join(dir, "big.body")
	if err := os.WriteFile(file, []byte("v1 of file"), 0o644); err != nil {
		t.Fatal(err)
	}
	inline := func(name string) *HTTPPrevious {
		b := "v1 of " + name
		return &HTTPPrevious{Status: 200, ETag: `"` + sha(b)[:8] + `"`, SHA256: sha(b), Size: int64(len(b)), Body: &b}
	}
	forEachDB(t, func(t *testing.T, dsn string) {
		opts := testOptions()
		opts.HTTPClient = client
		q := openQueue(t, dsn, opts)
		startWorker(t, q, WorkOptions{})
		run := func(name string, prev *HTTPPrevious) HTTPResult {
			t.Helper()
			raw, _ := json.Marshal(HTTPInput{URL: srv.URL + "/" + name, Previous: prev})
			task := mustAwait(t, q, mustSubmit(t, q, HTTPType, string(raw), SubmitOptions{}))
			var r HTTPResult
			if err := json.Unmarshal(task.Result, &r); task.State != StateCompleted || err != nil {
				t.Fatalf("%s: %+v (%v)", name, task, err)
			}
			return r
		}
		same := inline("same")
		if r := run("same", same); !r.NotModified || r.Status != 200 || *r.Body != *same.Body || r.SHA256 != same.SHA256 || r.Headers.Get("Etag") != same.ETag {
			t.Errorf("unchanged: %+v, want the previous answer, not modified", r)
		}
		if r := run("changed", inline("changed")); r.NotModified || *r.Body != "v2" {
			t.Errorf("changed: %+v, want the new answer", r)
		}
		prevFile := &HTTPPrevious{Status: 200, ETag: `"` + sha("v1 of file")[:8] + `"`, SHA256: sha("v1 of file"), Size: 10, BodyFile: file}
		if r := run("file", prevFile); !r.NotModified || r.BodyFile != file || r.Body != nil {
			t.Errorf("body file: %+v, want the same file, not modified", r)
		}
		stale := inline("stale")
		stale.SHA256 = sha("something else")
		if r := run("stale", stale); r.NotModified || *r.Body != "v1 of stale" {
			t.Errorf("a body that does not match its sha256: %+v, want a fresh answer", r)
		}
		mu.Lock()
		defer mu.Unlock()
		if seen["/same"] != same.ETag || seen["/stale"] != "" || !held["/same"] || !held["/file"] || held["/stale"] {
			t.Errorf("If-None-Match sent %v; held body given %v", seen, held)
		}
	})
	for _, bad := range []struct{ input, want string }{
		{`{"url":"http://x/","method":"POST","previous":{"status":200,"etag":"\"a\"","sha256":"` + sha("") + `","body":""}}`, "only a GET"},
		{`{"url":"http://x/","previous":{"status":200,"sha256":"` + sha("") + `","body":""}}`, "etag or last_modified"},
		{`{"url":"http://x/","previous":{"status":404,"etag":"\"a\"","sha256":"` + sha("") + `","body":""}}`, "only a 2xx"},
		{`{"url":"http://x/","previous":{"status":200,"etag":"\"a\"","sha256":"` + sha("") + `"}}`, "body or its body_file"},
		{`{"url":"http://x/","previous":{"status":200,"etag":"\"a\"","sha256":"xyz","body":""}}`, "64 hex digits"},
	} {
		if _, err := parseHTTPInput(json.RawMessage(bad.input)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.input, err, bad.want)
		}
	}
}

// roundTripFunc is a RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
