package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
)

func TestSendFailure(t *testing.T) {
	local := errors.New("ratekeeper: reserving quota: store: update: database disk image is malformed (11)")
	wire := &wireError{errors.New("dial tcp 127.0.0.1:1: connect: connection refused")}
	limited := &refusedError{until: time.Unix(1, 0)}
	tests := []struct {
		name                          string
		err                           error
		ended, answered, marked, want bool // want: a local fault
	}{
		{"unmarked client: every error is the network's", local, false, false, false, false},
		{"from the wire", &url.Error{Op: "Get", URL: "u", Err: wire}, false, false, true, false},
		{"arose here", &url.Error{Op: "Get", URL: "u", Err: local}, false, false, true, true},
		{"quota returns later", &url.Error{Op: "Get", URL: "u", Err: limited}, false, false, true, false},
		{"the attempt ended", context.Canceled, true, false, true, false},
		{"a redirect the client refused", errors.New("stopped after 10 redirects"), false, true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sendFailure(tt.err, tt.ended, tt.answered, tt.marked)
			if IsLocalFault(got) != tt.want {
				t.Errorf("sendFailure(%v) = %v, local fault %v; want %v", tt.err, got, IsLocalFault(got), tt.want)
			}
			if !errors.Is(got, tt.err) {
				t.Errorf("sendFailure lost the error: %v", got)
			}
		})
	}
}

// WireTransport marks its errors and its bodies' read errors, keeps what
// net.Error says, and leaves answers alone.
func TestWireTransportMarksWhatFailsOnTheNetwork(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/cut" {
			w.Header().Set("Content-Length", "100")
			_, _ = io.WriteString(w, "only part")
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close()
			return
		}
		_, _ = io.WriteString(w, "whole")
	}))
	defer srv.Close()
	client := &http.Client{Transport: WireTransport(http.DefaultTransport.(*http.Transport).Clone())}

	resp, err := client.Get(srv.URL + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "whole" {
		t.Fatalf("body %q, %v", b, err)
	}
	resp.Body.Close()

	resp, err = client.Get(srv.URL + "/cut")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || !FromWire(err) {
		t.Errorf("cut body: %v, want an error marked as the wire's", err)
	}

	ln := httptest.NewServer(http.NotFoundHandler())
	dead := ln.URL
	ln.Close()
	_, err = client.Get(dead)
	if err == nil || !FromWire(err) {
		t.Errorf("refused connection: %v, want an error marked as the wire's", err)
	}
	if FromWire(errors.New("database disk image is malformed")) {
		t.Error("an unmarked error counts as the wire's")
	}

	timeout := &http.Client{Transport: WireTransport(http.DefaultTransport), Timeout: time.Nanosecond}
	_, err = timeout.Get(srv.URL)
	var ue *url.Error
	if !errors.As(err, &ue) || !ue.Timeout() {
		t.Errorf("client timeout: %v, want a url.Error that says it timed out", err)
	}
}

// failingTransport stands for a rate-keeping transport whose quota state
// fails before anything is sent, or for the wire itself failing.
type failingTransport struct{ err error }

func (f failingTransport) RoundTrip(req *http.Request) (*http.Response, error) { return nil, f.err }

// A local fault puts its task back untouched and stops the worker, with
// an error that says so; a failure of the wire is a failed attempt.
func TestLocalFaultStopsTheWorkerAndKeepsTheTask(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		opts := testOptions()
		opts.WireMarked = true
		opts.HTTPClient = &http.Client{Transport: failingTransport{errors.New("store: update: database disk image is malformed (11)")}}
		q := openQueue(t, dsn, opts)
		id := mustSubmit(t, q, HTTPType, `{"url":"http://127.0.0.1:1/x"}`, SubmitOptions{MaxRetries: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := q.Work(ctx, WorkOptions{WorkerID: "w-local", ShutdownTimeout: time.Second})
		if err == nil || !IsLocalFault(err) || !strings.Contains(err.Error(), "malformed") || ctx.Err() != nil {
			t.Fatalf("Work = %v, want it to stop at once with the local fault", err)
		}
		task := waitTask(t, q, id, func(task *Task) bool { return task.State == StatePending })
		if task.RetryCount != 0 || task.RescheduleCount != 0 {
			t.Errorf("task = %+v, want pending with nothing counted", task)
		}
		evs := history(t, q, id, EventInterrupted)
		if s := evs[len(evs)-1].String(); !strings.Contains(s, "fault on this machine") || !strings.Contains(s, "malformed") {
			t.Errorf("last event = %q", s)
		}

		// The same task, its client failing on the wire: retried, then failed.
		opts.HTTPClient = &http.Client{Transport: WireTransport(failingTransport{errors.New("connection refused")})}
		q2 := openQueue(t, dsn, opts)
		startWorker(t, q2, WorkOptions{WorkerID: "w-wire"})
		if got := mustAwait(t, q2, id); got.State != StateFailed || got.RetryCount != 1 || !strings.Contains(got.LastError, "connection refused") {
			t.Errorf("task = %+v, want failed after a retry with the wire's error", got)
		}
	})
}

// A body that cannot be written (here: its directory is a file) is a
// local fault, whatever the client.
func TestBodyFileThatCannotBeWrittenIsALocalFault(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte{0xff, 0xfe, 0x00}) // not UTF-8: goes to a file
	}))
	defer srv.Close()
	dir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(dir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := httpHandler(http.DefaultClient, dir, 10, nil, false)
	in, _ := json.Marshal(HTTPInput{URL: srv.URL})
	_, err := h(context.Background(), &Task{ID: 1, Type: HTTPType, Input: in})
	if !IsLocalFault(err) {
		t.Fatalf("error %v, want a local fault", err)
	}
}

// Reclaim takes back the running tasks of gone workers only, at once and
// uncounted; they then run like any pending task.
func TestReclaimTakesBackOnlyGoneWorkersTasks(t *testing.T) {
	forEachDB(t, func(t *testing.T, dsn string) {
		h := &scripted{steps: []step{succeed(`"ok"`)}}
		q := openQueue(t, dsn, withHandlers(map[string]HandlerFunc{"t.r": h.handle}))
		orphan := mustSubmit(t, q, "t.r", `{"n":1}`, SubmitOptions{})
		live := mustSubmit(t, q, "t.r", `{"n":2}`, SubmitOptions{})
		// What a kill -9 leaves: attempts River claimed for workers that
		// recorded nothing more.
		b := rawBackend(q).(interface{ pool() runner })
		claim := "UPDATE river_job SET state = 'running', attempt = 1, attempted_at = datetime('now', 'subsec'), attempted_by = json_array($2) WHERE id = $1"
		if strings.HasPrefix(dsn, "postgres") {
			claim = "UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = ARRAY[$2::text] WHERE id = $1"
		}
		for id, worker := range map[int64]string{orphan: "fetch-dead-1", live: "fetch-alive-1"} {
			if err := b.pool().exec(ctxT(t), claim, id, worker); err != nil {
				t.Fatal(err)
			}
		}
		ids, err := q.Reclaim(ctxT(t), "its process ended", func(w string) bool { return strings.HasPrefix(w, "fetch-dead-") })
		if err != nil || len(ids) != 1 || ids[0] != orphan {
			t.Fatalf("Reclaim = %v, %v; want [%d]", ids, err, orphan)
		}
		if again, err := q.Reclaim(ctxT(t), "again", func(string) bool { return true }); err != nil || len(again) != 1 || again[0] != live {
			t.Fatalf("second Reclaim = %v, %v; want only the other running task", again, err)
		}

		got, err := q.Get(ctxT(t), orphan)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != StatePending || got.Attempt != 1 || got.RetryCount != 0 || got.RescheduleCount != 0 || got.AvailableAt.After(time.Now()) {
			t.Fatalf("reclaimed task = %+v, want pending now, attempt 1, nothing counted", got)
		}
		startWorker(t, q, WorkOptions{WorkerID: "w-next"})
		done := mustAwait(t, q, orphan)
		if done.State != StateCompleted || done.Attempt != 2 || done.RetryCount != 0 || done.RescheduleCount != 0 {
			t.Fatalf("task = %+v, want completed on attempt 2 with nothing counted", done)
		}
		evs := history(t, q, orphan, EventCompleted)
		wantKinds(t, evs, EventCreated, EventClaimed, EventReclaimed, EventClaimed, EventCompleted)
		if s := evs[2].String(); s != "attempt 1 by worker fetch-dead-1 taken back: its process ended; back to pending" {
			t.Errorf("reclaimed event = %q", s)
		}
	})
}

func TestReclaimedEventsAreKeyedByAttempt(t *testing.T) {
	at := time.Unix(1000, 0).UTC()
	// River attempt 2 plus one snooze: attempt 3; the record ends at 1.
	row := fakeRunningRow(t, 7, 2, map[string]any{"snoozes": 1, "output": record{Claims: 1, Retries: 1}}, "w-a", "w-b")
	patch, evs, err := reclaimed(row, "w-b", "gone", at)
	if err != nil {
		t.Fatal(err)
	}
	// Attempt 3 (2 River attempts + 1 snooze); attempt 2 has no outcome:
	// abandoned, as at a claim.
	var keys []string
	for _, e := range evs {
		keys = append(keys, fmt.Sprintf("%s:%s", e.Key, e.Kind))
	}
	if want := "end-2:abandoned claim-3:claimed end-3:reclaimed"; strings.Join(keys, " ") != want {
		t.Errorf("events %v, want %s", keys, want)
	}
	var m struct {
		Snoozes int    `json:"snoozes"`
		Output  record `json:"output"`
	}
	if err := json.Unmarshal(patch, &m); err != nil {
		t.Fatal(err)
	}
	if m.Snoozes != 2 || m.Output.Claims != 3 || m.Output.Interrupted != 1 || m.Output.Retries != 2 {
		t.Errorf("patch %s", patch)
	}
}

// fakeRunningRow is a running row of River attempt attempt, with metadata
// meta, claimed by the last of workers.
func fakeRunningRow(t *testing.T, id int64, attempt int, meta map[string]any, workers ...string) *rivertype.JobRow {
	t.Helper()
	raw, err := json.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(900, 0).UTC()
	return &rivertype.JobRow{ID: id, Kind: "t.r", EncodedArgs: []byte(`{"input":{}}`), State: rivertype.JobStateRunning,
		Attempt: attempt, MaxAttempts: 4, Metadata: raw, CreatedAt: at, AttemptedAt: &at, AttemptedBy: workers, ScheduledAt: at}
}
