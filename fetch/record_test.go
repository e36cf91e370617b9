package fetch_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/tasks"
)

func TestRecordOf(t *testing.T) {
	body := "hello"
	result := func(status int, h http.Header) json.RawMessage {
		b, err := json.Marshal(tasks.HTTPResult{Status: status, Headers: h, SHA256: "abc", Size: 5, Body: &body})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	h := http.Header{}
	h.Set("ETag", `"v1"`)
	h.Set("X-Ratekeeper-Credential", "#2 to…-1")
	h.Set("X-Ratekeeper-Cache", "revalidated")

	ok := fetch.RecordOf("https://github.com/o/r", &tasks.Task{ID: 7, State: tasks.StateCompleted, Attempt: 3, RescheduleCount: 2, Result: result(200, h)})
	want := fetch.Record{URL: "https://github.com/o/r", Status: 200, ETag: `"v1"`, FromCache: true, Attempts: 3, Reschedules: 2,
		Credential: "#2 to…-1", SHA256: "abc", Size: 5, Body: ok.Body, TaskID: 7}
	if !reflect.DeepEqual(ok, want) || ok.Body == nil || *ok.Body != "hello" || ok.Failed() {
		t.Errorf("completed: %+v\nwant %+v", ok, want)
	}

	notFound := fetch.RecordOf("u", &tasks.Task{ID: 8, State: tasks.StateCompleted, Attempt: 1, Result: result(404, http.Header{})})
	if notFound.Status != 404 || notFound.Error != "HTTP 404 Not Found" || notFound.FromCache || !notFound.Failed() {
		t.Errorf("404: %+v", notFound)
	}

	failed := fetch.RecordOf("u", &tasks.Task{ID: 9, State: tasks.StateFailed, Attempt: 4, LastError: "GET http://x/: server error 500"})
	if failed.Status != 0 || failed.Error != "task failed: GET http://x/: server error 500" || failed.Attempts != 4 || failed.TaskID != 9 {
		t.Errorf("failed: %+v", failed)
	}
	if c := fetch.RecordOf("u", &tasks.Task{ID: 10, State: tasks.StateCancelled}); c.Error != "task cancelled: no error recorded" {
		t.Errorf("cancelled: %+v", c)
	}
	if bad := fetch.RecordOf("u", &tasks.Task{ID: 11, State: tasks.StateCompleted, Result: json.RawMessage(`[1]`)}); !bad.Failed() {
		t.Errorf("a result that is not an http result: %+v, want a failure", bad)
	}
}
