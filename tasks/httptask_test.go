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
	"strconv"
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
	mux.HandleFunc("GET /cache-control", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Header.Get("Cache-Control")) })
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
		stopFirst := startWorker(t, q, WorkOptions{})
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

		// The result keeps the body: the client's cache is asked not to.
		if r = result(mustAwait(t, q, submit(HTTPInput{URL: srv.URL + "/cache-control"}))); r.Body == nil || *r.Body != "no-store" {
			t.Errorf("request Cache-Control = %v, want no-store", r.Body)
		}
		if r = result(mustAwait(t, q, submit(HTTPInput{URL: srv.URL + "/cache-control", Headers: map[string]string{"Cache-Control": "max-age=0"}}))); r.Body == nil || *r.Body != "max-age=0" {
			t.Errorf("request Cache-Control = %v, want the input's", r.Body)
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

		// FailOnStatus: a 404 fails the task at once, with no result.
		stopFirst() // the next worker alone works the database
		failing := testOptions()
		failing.HTTPClient = srv.Client()
		failing.FailOnStatus = func(status int) bool { return status == http.StatusNotFound }
		qf := openQueue(t, dsn, failing)
		stop := startWorker(t, qf, WorkOptions{})
		defer stop()
		raw, _ := json.Marshal(HTTPInput{URL: srv.URL + "/missing"})
		got := mustAwait(t, qf, mustSubmit(t, qf, HTTPType, string(raw), SubmitOptions{}))
		if got.State != StateFailed || got.RetryCount != 0 || got.Result != nil || !strings.Contains(got.LastError, "/missing: HTTP 404 Not Found, a status that fails the task") {
			t.Errorf("404 task with FailOnStatus = %+v, want failed at once saying why", got)
		}
	})
}

// TestJudge: the http type asks package headers whether an answer is a
// rate-limit refusal and until when; 5xx retries; failOn picks the
// statuses that fail the task; everything else completes it.
func TestJudge(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	fail404 := func(s int) bool { return s == 404 }
	for _, c := range []struct {
		name   string
		status int
		h      http.Header
		body   string
		failOn func(int) bool
		err    error
		wait   time.Duration
	}{
		{"ok", 200, nil, "", nil, nil, 0},
		{"not found completes", 404, nil, "", nil, nil, 0},
		{"not found fails when asked", 404, nil, "", fail404, errFailStatus, 0},
		{"gone still completes", 410, nil, "", fail404, nil, 0},
		{"server error", 502, nil, "", nil, errServer, 0},
		{"429 with Retry-After", 429, hdr("Retry-After", "120"), "", nil, errRefused, 2 * time.Minute},
		{"429 with an HTTP date", 429, hdr("Retry-After", "Sun, 01 Jun 2025 12:01:30 GMT"), "", nil, errRefused, 90 * time.Second},
		{"429 saying nothing", 429, nil, "", nil, errRefused, 60 * time.Second},
		{"GitHub primary 403 until reset", 403, hdr("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset", strconv.FormatInt(now.Add(17*time.Minute).Unix(), 10)), "", fail404, errRefused, 17 * time.Minute},
		{"GitHub secondary 403 by its body", 403, hdr("Retry-After", "30"), `{"message":"You have exceeded a secondary rate limit"}`, nil, errRefused, 30 * time.Second},
		{"permission 403 is no rate limit", 403, hdr("X-RateLimit-Remaining", "4999"), `{"message":"Resource not accessible"}`, nil, nil, 0},
		{"a reset on a server clock 1h ahead", 403, hdr("Date", now.Add(time.Hour).Format(http.TimeFormat), "X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset", strconv.FormatInt(now.Add(time.Hour+5*time.Minute).Unix(), 10)), "", nil, errRefused, 5 * time.Minute},
	} {
		v := judge(c.status, c.h, []byte(c.body), now, c.failOn)
		if v.err != c.err {
			t.Errorf("%s: verdict %v, want %v", c.name, v.err, c.err)
			continue
		}
		if c.err == errRefused && !v.until.Equal(now.Add(c.wait)) {
			t.Errorf("%s: refused until %s, want %s later", c.name, v.until, c.wait)
		}
	}
}
