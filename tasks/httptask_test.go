package tasks

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestHTTPTask(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 64) // 1 KiB, over the inline limit below
	var flaky sync.Map                            // per ?k= key: *atomic.Int32, so parallel subtests do not share
	mux := http.NewServeMux()
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Ratekeeper-Credential", "#1 tok-…e-1")
		w.Header().Set("X-Ratekeeper-Cache", "miss")
		w.Header().Set("X-Got", r.Header.Get("X-Send"))
		fmt.Fprintf(w, "you said %s", body)
	})
	mux.HandleFunc("GET /big", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) })
	mux.HandleFunc("GET /missing", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	mux.HandleFunc("GET /flaky", func(w http.ResponseWriter, r *http.Request) {
		n, _ := flaky.LoadOrStore(r.URL.Query().Get("k"), new(atomic.Int32))
		if n.(*atomic.Int32).Add(1) == 1 {
			http.Error(w, "try later", http.StatusBadGateway)
			return
		}
		io.WriteString(w, "fine")
	})
	mux.HandleFunc("GET /limited", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	})
	mux.HandleFunc("GET /secondary", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "120")
		http.Error(w, "You have exceeded a secondary rate limit", http.StatusForbidden)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close) // after the parallel subtests

	forEachDB(t, func(t *testing.T, dsn string) {
		opts := testOptions()
		opts.InlineBodyLimit = 256
		opts.HTTPClient = srv.Client()
		q := openQueue(t, dsn, opts)
		startWorker(t, q, WorkOptions{})
		submit := func(in HTTPInput) int64 {
			raw, _ := json.Marshal(in)
			return mustSubmit(t, q, HTTPType, string(raw), SubmitOptions{})
		}
		result := func(task *Task) HTTPResult {
			t.Helper()
			var r HTTPResult
			if task.State != StateCompleted {
				t.Fatalf("task = %+v, want completed", task)
			}
			if err := json.Unmarshal(task.Result, &r); err != nil {
				t.Fatalf("result %s: %v", task.Result, err)
			}
			return r
		}

		echo := submit(HTTPInput{URL: srv.URL + "/echo", Method: "POST", Headers: map[string]string{"X-Send": "hi"}, Body: "hello"})
		r := result(mustAwait(t, q, echo))
		sum := sha256.Sum256([]byte("you said hello"))
		if r.Status != 200 || r.Body == nil || *r.Body != "you said hello" || r.BodyFile != "" || r.Size != 14 || r.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("echo result = %+v, want 200, inline body, its sha256", r)
		}
		if r.Headers.Get("X-Ratekeeper-Credential") != "#1 tok-…e-1" || r.Headers.Get("X-Ratekeeper-Cache") != "miss" || r.Headers.Get("X-Got") != "hi" {
			t.Errorf("result headers = %v, want the client's X-Ratekeeper-* headers kept and the request header sent", r.Headers)
		}

		r = result(mustAwait(t, q, submit(HTTPInput{URL: srv.URL + "/big"})))
		sum = sha256.Sum256([]byte(big))
		if r.Body != nil || r.BodyFile == "" || r.Size != int64(len(big)) || r.SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("big result = %+v, want a body file", r)
		}
		if data, err := os.ReadFile(r.BodyFile); err != nil || string(data) != big {
			t.Errorf("body file %s: %d bytes, %v; want the body", r.BodyFile, len(data), err)
		}

		if r = result(mustAwait(t, q, submit(HTTPInput{URL: srv.URL + "/missing"}))); r.Status != 404 {
			t.Errorf("missing result status = %d, want 404 (a completed request, not a failure)", r.Status)
		}

		flakyTask := mustAwait(t, q, submit(HTTPInput{URL: srv.URL + "/flaky?k=" + t.Name()}))
		if r = result(flakyTask); r.Status != 200 || flakyTask.RetryCount != 1 || !strings.Contains(flakyTask.LastError, "server error 502 Bad Gateway") {
			t.Errorf("flaky task = %+v, want completed after one retry of the 502", flakyTask)
		}

		for path, wait := range map[string]time.Duration{"/limited": time.Hour, "/secondary": 2 * time.Minute} {
			before := time.Now()
			id := submit(HTTPInput{URL: srv.URL + path})
			got := waitTask(t, q, id, func(t *Task) bool { return t.RescheduleCount == 1 })
			if got.State != StatePending || got.RetryCount != 0 || got.AvailableAt.Before(before.Add(wait-time.Second)) || got.AvailableAt.After(time.Now().Add(wait+time.Second)) {
				t.Errorf("%s task = %+v, want rescheduled by Retry-After (%s), not retried", path, got, wait)
			}
		}
	})
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 2 * time.Minute, true},
		{" 0 ", 0, true},
		{"Sun, 01 Jun 2025 12:01:30 GMT", 90 * time.Second, true},
		{"Sunday, 01-Jun-25 12:01:30 GMT", 90 * time.Second, true},
		{"Sun Jun  1 12:01:30 2025", 90 * time.Second, true},
		{"Sun, 01 Jun 2025 11:00:00 GMT", 0, true}, // in the past: now
		{"-5", 0, false},
		{"soon", 0, false},
		{"", 0, false},
	} {
		got, ok := parseRetryAfter(c.in, now)
		if got != c.want || ok != c.ok {
			t.Errorf("parseRetryAfter(%q) = %s, %v; want %s, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
