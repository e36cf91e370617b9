package fetch_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/transport"
)

func ptr[T any](v T) *T { return &v }

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func TestLinesFormat(t *testing.T) {
	creds := []transport.CredentialStatus{
		{Provider: "github", Credential: "#1 to…-1", State: "available", Resources: []transport.ResourceStatus{
			{Resource: "core", Limit: ptr(int64(5000)), Remaining: ptr(int64(4880)), ResetsIn: ptr(3120.0)},
			{Resource: "search"}, // nothing known: left out
		}},
		{Provider: "github", Credential: "#3 to…-1", State: "invalid", Reason: "GET /user answered 401 Unauthorized"},
	}
	var w bytes.Buffer
	l := &fetch.Lines{W: &w, Every: 10 * time.Second}
	l.Update(fetch.Snapshot{At: t0, Total: 1200, Done: 120, Failed: 3, Running: 8, Elsewhere: 2, Ready: 1000, Sleeping: 72,
		NextAt: t0.Add(200 * time.Second), Rate: 23.46, ETA: 46 * time.Second, Credentials: creds})
	l.Update(fetch.Snapshot{At: t0.Add(5 * time.Second), Total: 1200, Done: 150}) // within Every: not shown
	l.Update(fetch.Snapshot{At: t0.Add(10 * time.Second), Total: 1200, Done: 1200, Rate: 30})
	l.Finish(fetch.Snapshot{At: t0.Add(10 * time.Second), Total: 1200, Done: 1200, Rate: 30}) // the same: not repeated
	want := "fetch: 120/1,200 URLs done (3 failed), 8 running (2 by other or killed workers), 1,000 ready, 72 sleeping (next in 200s), 23.5 URLs/s, ETA 46s\n" +
		"fetch:   github #1 to…-1: available, core 4,880/5,000 (resets in 52m0s)\n" +
		"fetch:   github #3 to…-1: invalid (GET /user answered 401 Unauthorized)\n" +
		"fetch: 1,200/1,200 URLs done, 30.0 URLs/s\n"
	if w.String() != want {
		t.Errorf("lines:\n%s\nwant:\n%s", w.String(), want)
	}

	w.Reset()
	l = &fetch.Lines{W: &w, Every: time.Second}
	l.Finish(fetch.Snapshot{})
	if w.Len() != 0 {
		t.Errorf("Finish of a batch that never started wrote %q", w.String())
	}
}

// TestBarsStop: the terminal display draws and stops without a terminal
// too (the bars are then written once at the end).
func TestBarsStop(t *testing.T) {
	var w bytes.Buffer
	b := fetch.NewBars(&w)
	b.Update(fetch.Snapshot{At: t0, Total: 10, Done: 4, Credentials: []transport.CredentialStatus{{Provider: "github", Credential: "#1 to…-1", State: "available"}}})
	b.Finish(fetch.Snapshot{At: t0.Add(time.Second), Total: 10, Done: 10})
	if !bytes.Contains(w.Bytes(), []byte("10/10 URLs")) || !bytes.Contains(w.Bytes(), []byte("github #1 to…-1: available")) {
		t.Errorf("bars output %q lacks the count or the credential", w.String())
	}
	NewEmpty := fetch.NewBars(&w)
	NewEmpty.Finish(fetch.Snapshot{}) // must return
}
