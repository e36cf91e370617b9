package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestHTTPSendOnce: a send_once request is never sent after an attempt
// that may have reached the server, and a 5xx or a failed send is its
// outcome, not a retry; a reschedule (a wait for quota, a refusal, a
// connection that could not be made) does not count as an attempt that
// reached the server.
func TestHTTPSendOnce(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/broken" {
			http.Error(w, "oops", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	h := httpHandler(srv.Client(), t.TempDir(), 1024, nil, false)
	task := func(path string, once bool, attempt, reschedules int) *Task {
		in, _ := json.Marshal(HTTPInput{URL: srv.URL + path, Method: "POST", Body: "{}", SendOnce: once})
		return &Task{ID: 1, Type: HTTPType, Input: in, Attempt: attempt, RescheduleCount: reschedules}
	}
	ctx := context.Background()

	if _, err := h(ctx, task("/new", true, 2, 0)); !errors.Is(err, ErrUnknownOutcome) || !IsPermanent(err) {
		t.Errorf("second attempt after one that may have sent: %v, want a permanent unknown outcome", err)
	}
	if hits.Load() != 0 {
		t.Fatalf("sent %d times, want none", hits.Load())
	}
	if res, err := h(ctx, task("/new", true, 3, 2)); err != nil || res == nil {
		t.Errorf("after two reschedules: %v, want it sent", err)
	}
	if res, err := h(ctx, task("/broken", true, 1, 0)); err != nil {
		t.Errorf("a 502 to a send_once request: %v, want it completed with the answer", err)
	} else {
		var r HTTPResult
		if json.Unmarshal(res, &r) != nil || r.Status != http.StatusBadGateway {
			t.Errorf("result %s", res)
		}
	}
	if _, err := h(ctx, task("/broken", false, 1, 0)); err == nil || IsPermanent(err) {
		t.Errorf("a 502 to a plain POST: %v, want a failed attempt, retried", err)
	}
	if hits.Load() != 3 {
		t.Errorf("%d requests, want 3", hits.Load())
	}

	// A server that reads the request and hangs up: it may have acted.
	hangUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer hangUp.Close()
	in, _ := json.Marshal(HTTPInput{URL: hangUp.URL + "/x", Method: "POST", SendOnce: true})
	if _, err := h(ctx, &Task{ID: 2, Type: HTTPType, Input: in, Attempt: 1}); !errors.Is(err, ErrUnknownOutcome) || !IsPermanent(err) {
		t.Errorf("a send that failed once the request was out: %v, want a permanent unknown outcome", err)
	}
	// No server at all: nothing left this machine, so it may be retried.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	in, _ = json.Marshal(HTTPInput{URL: dead.URL + "/x", Method: "POST", SendOnce: true})
	var re *RescheduleError
	if _, err := h(ctx, &Task{ID: 3, Type: HTTPType, Input: in, Attempt: 1}); !errors.As(err, &re) {
		t.Errorf("a connection refused: %v, want a reschedule (not an attempt that may have sent)", err)
	}
}
