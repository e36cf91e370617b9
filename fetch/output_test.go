package fetch_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/fetch"
)

func TestJournalAppendsEachURLOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	j, err := fetch.OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	body := "<b>&</b>"
	n, err := j.Append([]fetch.Record{
		{URL: "https://a.example/1", Status: 200, Body: &body},
		{URL: "https://a.example/2", Status: 404, Error: "HTTP 404 Not Found"},
		{URL: "https://a.example/1", Status: 200}, // the same URL again: ignored
	})
	if err != nil || n != 2 {
		t.Fatalf("Append = %d, %v; want 2 records", n, err)
	}
	if n, _ := j.Append([]fetch.Record{{URL: "https://a.example/1", Status: 200}}); n != 0 {
		t.Errorf("a written URL was appended again")
	}
	// A failed URL fetched again (fetch --retry-failed): its new line
	// supersedes the failure.
	if n, _ := j.Append([]fetch.Record{{URL: "https://a.example/3", Status: 500, Error: "HTTP 500"}, {URL: "https://a.example/2", Status: 200}}); n != 2 {
		t.Errorf("a retry of a failed URL was not appended")
	}
	j.Close()

	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), `"body":"<b>&</b>"`) {
		t.Errorf("body escaped or missing: %s", b)
	}
	j, err = fetch.OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if l, ok := j.Written(urlIdent("https://a.example/1")); !ok || l.Failed {
		t.Errorf("Written(1) = %+v, %v; want written, not failed", l, ok)
	}
	if l, ok := j.Written(urlIdent("https://a.example/2")); !ok || l.Failed {
		t.Errorf("Written(2) = %+v, %v; want written, not failed: its retry succeeded", l, ok)
	}
	if l, ok := j.Written(urlIdent("https://a.example/3")); !ok || !l.Failed {
		t.Errorf("Written(3) = %+v, %v; want written, failed", l, ok)
	}
	if _, ok := j.Written(urlIdent("https://a.example/4")); ok {
		t.Error("Written(4): never written")
	}
	if j.Kept != 4 || j.Truncated != 0 {
		t.Errorf("Kept %d, Truncated %d; want 4 and 0", j.Kept, j.Truncated)
	}
}

// urlIdent names the record of a plain URL in the output.
func urlIdent(u string) string { return fetch.Record{URL: u}.Ident() }

// TestJournalCutsTornTail: a crash in the middle of a write leaves part of
// a line; reopening cuts it off so that its URL is written again, once.
func TestJournalCutsTornTail(t *testing.T) {
	for name, tail := range map[string]string{
		"half a record":                      `{"url":"https://a.example/2","sta`,
		"a whole record without its newline": `{"url":"https://a.example/2","status":200}`,
		"zeros":                              "\x00\x00\x00\x00",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "out.jsonl")
			whole := `{"url":"https://a.example/1","status":200}` + "\n"
			writeFile(t, path, whole+tail)
			j, err := fetch.OpenJournal(path)
			if err != nil {
				t.Fatal(err)
			}
			if j.Truncated != int64(len(tail)) || j.Kept != 1 {
				t.Errorf("Truncated %d, Kept %d; want %d and 1", j.Truncated, j.Kept, len(tail))
			}
			if _, ok := j.Written(urlIdent("https://a.example/2")); ok {
				t.Error("the torn record counts as written")
			}
			if _, err := j.Append([]fetch.Record{{URL: "https://a.example/2", Status: 200}}); err != nil {
				t.Fatal(err)
			}
			j.Close()
			b, _ := os.ReadFile(path)
			want := whole + `{"url":"https://a.example/2","status":200,"etag":"","from_cache":false,"attempts":0,"reschedules":0,"credential":"","sha256":"","size":0,"task_id":0}` + "\n"
			if string(b) != want {
				t.Errorf("file:\n%q\nwant\n%q", b, want)
			}
		})
	}
}

// TestJournalLeavesOtherFilesAlone: a file that is not fetch output is an
// error, and is not changed.
func TestJournalLeavesOtherFilesAlone(t *testing.T) {
	for name, text := range map[string]string{
		"text":                 "hello\nworld\n",
		"text without newline": "notes",
		"bad line first":       "not json\n" + `{"url":"https://a.example/1"}` + "\n",
		"JSON without url":     `{"status":200}` + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "notes.txt")
			writeFile(t, path, text)
			_, err := fetch.OpenJournal(path)
			if err == nil || !strings.Contains(err.Error(), "is not a result line") || !strings.Contains(err.Error(), "give another -o") {
				t.Errorf("err = %v, want a refusal naming the line", err)
			}
			if b, _ := os.ReadFile(path); string(b) != text {
				t.Errorf("file changed to %q", b)
			}
		})
	}
}

func TestJournalIsLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	j, err := fetch.OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fetch.OpenJournal(path); err == nil || !strings.Contains(err.Error(), "being written by another ratekeeper fetch") {
		t.Errorf("second open: %v, want it refused while the first holds the file", err)
	}
	j.Close()
	j, err = fetch.OpenJournal(path)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	j.Close()
}

func TestJournalUnwritable(t *testing.T) {
	_, err := fetch.OpenJournal(filepath.Join(t.TempDir(), "no", "such", "dir", "out.jsonl"))
	if err == nil || !strings.Contains(err.Error(), "output:") {
		t.Errorf("err = %v, want an output error", err)
	}
}
