package fetch

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/ratekeeper/ratekeeper/tasks"
)

// Record is one line of a batch's output: what became of one URL.
type Record struct {
	// URL is the URL as the input gave it (for --readme, the repository's
	// web URL).
	URL string `json:"url"`
	// ID is the input's id (a JSON line's), echoed; for a JSON line
	// without one that is not a plain GET, its method, URL and a digest of
	// its body. Absent for a plain GET. It names the request in the output
	// (see Ident).
	ID json.RawMessage `json:"id,omitempty"`
	// Method is the request's method when it is not GET.
	Method string `json:"method,omitempty"`
	// Page is the page number, from 1, with --paginate (Options.Paginate);
	// absent otherwise.
	Page int `json:"page,omitempty"`
	// PageURL is the URL this page came from, when it is not URL (a REST
	// listing's pages after the first), and Cursor the endCursor this page
	// was asked for with (a GraphQL listing's pages after the first).
	PageURL string `json:"page_url,omitempty"`
	Cursor  string `json:"cursor,omitempty"`
	// Next is the page after this one, which the run fetches next; absent
	// on the last page.
	Next *NextPage `json:"next,omitempty"`
	// Status is the HTTP status of the final answer; 0 when there was none
	// (the task failed before any answer).
	Status int `json:"status"`
	// ETag is the answer's entity tag, if it had one.
	ETag string `json:"etag"`
	// FromCache is true when the answer came from the client's cache: a
	// conditional request the server answered 304 (the stored body was
	// reused), or a stored answer still fresh for its max-age, served
	// without a request. fetch's own requests ask the cache to store
	// nothing (the output holds the body), so it is false for them.
	FromCache bool `json:"from_cache"`
	// NotModified is true when the URL was revalidated against a previous
	// run's answer (fetch --since) and the server answered 304: Status,
	// ETag, SHA256, Size and Body or BodyFile repeat that answer.
	NotModified bool `json:"not_modified,omitempty"`
	// Attempts counts the task's attempts (reschedules included).
	Attempts int `json:"attempts"`
	// Reschedules counts the times the task slept until quota returned.
	Reschedules int `json:"reschedules"`
	// Credential is the masked credential that sent the final request.
	Credential string `json:"credential"`
	// SHA256 is the hex SHA-256 of the body, and Size its length.
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Body is the body when it is small UTF-8 text; otherwise BodyFile is
	// the absolute path of a file holding it.
	Body     *string `json:"body,omitempty"`
	BodyFile string  `json:"body_file,omitempty"`
	// Error says why the URL failed: a task that failed, or an answer that
	// is not a success (2xx).
	Error string `json:"error,omitempty"`
	// UnknownOutcome says that the request, not idempotent, may or may not
	// have reached the server (an attempt was cut short by a crash, say),
	// and was not sent again: look at the server to know (see Error).
	UnknownOutcome bool `json:"unknown_outcome,omitempty"`
	// TaskID is the task that fetched the URL (see `ratekeeper tasks
	// history ID`).
	TaskID int64 `json:"task_id"`
}

// NextPage says which page follows: the URL of a REST listing's next page
// (its Link rel="next", or GitLab's X-Next-Page), or the endCursor a
// GraphQL listing's next page is asked for with.
type NextPage struct {
	URL    string `json:"url,omitempty"`
	Cursor string `json:"cursor,omitempty"`
}

// Failed reports whether the URL finally failed.
func (r Record) Failed() bool { return r.Error != "" }

// Ident names the request r answers, as Target.Ident does: its ID, or its
// URL.
func (r Record) Ident() string { return identOf(r.URL, r.ID) }

// RecordOf describes what task t, which must be in a final state, did for
// the input URL url.
func RecordOf(url string, t *tasks.Task) Record {
	r := Record{URL: url, Attempts: t.Attempt, Reschedules: t.RescheduleCount, TaskID: t.ID}
	switch t.State {
	case tasks.StateCompleted:
		var res tasks.HTTPResult
		if err := json.Unmarshal(t.Result, &res); err != nil {
			r.Error = fmt.Sprintf("task %d completed with a result that is not an http result: %v", t.ID, err)
			return r
		}
		r.Status = res.Status
		r.ETag = res.Headers.Get("ETag")
		switch res.Headers.Get("X-Ratekeeper-Cache") {
		case "revalidated", "fresh", "stale":
			r.FromCache = true
		}
		r.Credential = res.Headers.Get("X-Ratekeeper-Credential")
		r.SHA256, r.Size, r.Body, r.BodyFile = res.SHA256, res.Size, res.Body, res.BodyFile
		r.NotModified = res.NotModified
		if !success(res.Status) {
			r.Error = fmt.Sprintf("HTTP %d %s", res.Status, http.StatusText(res.Status))
		}
	case tasks.StateFailed, tasks.StateCancelled:
		msg := t.LastError
		if msg == "" {
			msg = "no error recorded"
		}
		r.Error = fmt.Sprintf("task %s: %s", t.State, msg)
		r.UnknownOutcome = strings.Contains(msg, tasks.ErrUnknownOutcome.Error()+": ")
	default:
		r.Error = fmt.Sprintf("task %d is still %s", t.ID, t.State)
	}
	return r
}

// success tells whether an answer delivered the resource: 2xx, or a 304
// to a conditional request (the caller has the body).
func success(status int) bool {
	return status >= 200 && status < 300 || status == http.StatusNotModified
}

// MarshalLine renders r as one line of JSON, newline included. HTML
// characters are not escaped: the output is data, not a web page.
func (r Record) MarshalLine() ([]byte, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}
