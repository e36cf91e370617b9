package fetch_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/provider"
)

func TestReadEntries(t *testing.T) {
	in := "# urls\n\nhttps://a.example/x\n   https://b.example/y   # trailing note\n\t# indented comment\nhttps://c.example/z#frag\n"
	got, err := fetch.ReadEntries(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []fetch.Entry{{Line: 3, URL: "https://a.example/x"}, {Line: 4, URL: "https://b.example/y"}, {Line: 6, URL: "https://c.example/z#frag"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadEntries = %+v, want %+v", got, want)
	}
}

func TestPlanRejectsBadLinesWithTheirNumbers(t *testing.T) {
	entries := []fetch.Entry{
		{Line: 1, URL: "https://api.github.com/repos/o/r"},
		{Line: 2, URL: "ftp://files.example/x"},
		{Line: 3, URL: "api.github.com/repos/o/r"},
		{Line: 5, URL: "https://user:hunter2@/x y"},
		{Line: 7, URL: "https://api.github.com/repos/o/r"}, // repeated: dropped, not an error
	}
	_, err := fetch.Plan(entries, "urls.txt", false, provider.Defaults())
	var ie *fetch.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("err = %v, want an *InputError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"urls.txt: 3 inputs cannot be fetched; nothing was submitted",
		`line 2: "ftp://files.example/x" is not an absolute http:// or https:// URL`,
		`line 3: "api.github.com/repos/o/r" is not an absolute`,
		"line 5: ",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "hunter2") || strings.Contains(msg, "line 1:") || strings.Contains(msg, "line 7:") {
		t.Errorf("error shows a password or a good line:\n%s", msg)
	}
}

func TestPlanDropsRepeatsAndKeysByRequest(t *testing.T) {
	reg := provider.Defaults()
	targets, err := fetch.Plan(fetch.ArgEntries([]string{
		"https://api.github.com/repos/o/r", "https://example.com/page", "https://api.github.com/repos/o/r",
	}), "arguments", false, reg)
	if err != nil {
		t.Fatal(err)
	}
	if len(targets) != 2 {
		t.Fatalf("%d targets, want 2 (the repeat dropped)", len(targets))
	}
	if tg := targets[0]; tg.Key != "https://api.github.com/repos/o/r" || tg.Provider != "github" || tg.Request.URL != tg.URL || tg.Request.Method != "" {
		t.Errorf("target %+v, want a plain GET keyed by its URL, served by github", tg)
	}
	if tg := targets[1]; tg.Provider != "" {
		t.Errorf("example.com served by %q, want no provider", tg.Provider)
	}
}

func TestPlanReadme(t *testing.T) {
	reg := provider.Defaults()
	if err := reg.ApplyFlag("forgejo=https://forge.example.org/api/v1"); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ repo, provider, url, accept string }{
		{"https://github.com/octo/hello", "github", "https://api.github.com/repos/octo/hello/readme", "application/vnd.github.raw"},
		{"gitlab.com/group/sub/project", "gitlab", "https://gitlab.com/api/v4/projects/group%2Fsub%2Fproject/repository/files/README.md/raw?ref=HEAD", ""},
		{"https://huggingface.co/org/model", "huggingface", "https://huggingface.co/org/model/resolve/main/README.md", ""},
		{"https://codeberg.org/o/r", "codeberg", "https://codeberg.org/api/v1/repos/o/r/raw/README.md", ""},
		{"https://forge.example.org/o/r", "forgejo", "https://forge.example.org/api/v1/repos/o/r/raw/README.md", ""},
	}
	var entries []fetch.Entry
	for i, tt := range tests {
		entries = append(entries, fetch.Entry{Line: i + 1, URL: tt.repo})
	}
	targets, err := fetch.Plan(entries, "repos.txt", true, reg)
	if err != nil {
		t.Fatal(err)
	}
	for i, tt := range tests {
		tg := targets[i]
		if tg.URL != tt.repo || tg.Provider != tt.provider || tg.Request.URL != tt.url || tg.Request.Headers["Accept"] != tt.accept {
			t.Errorf("%s: %+v, want %s %s Accept=%q", tt.repo, tg, tt.provider, tt.url, tt.accept)
		}
		if tt.accept != "" && (!strings.HasPrefix(tg.Key, tt.url+"\n") || !strings.Contains(tg.Key, "accept: "+tt.accept)) {
			t.Errorf("%s: key %q, want the URL then the Accept header", tt.repo, tg.Key)
		}
	}

	_, err = fetch.Plan([]fetch.Entry{{Line: 4, URL: "https://bitbucket.org/o/r"}, {Line: 9, URL: "https://github.com/justowner"}}, "repos.txt", true, reg)
	for _, want := range []string{"line 4: no configured provider serves repository pages at https://bitbucket.org", "line 9: repository URL https://github.com/justowner names no owner/repo"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to say %q", err, want)
		}
	}
}

// Lines that cannot be URLs at all are entries with a problem, numbered,
// and Plan lists them with the other bad lines.
func TestReadEntriesNamesLinesThatCannotBeURLs(t *testing.T) {
	in := "https://a.example/x\n" + strings.Repeat("y", 2<<20) + "\nhttps://b.example/y\n\x00\x01\x02binary\r\nhttps://c.example/\xff\n"
	got, err := fetch.ReadEntries(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got[0].URL != "https://a.example/x" || got[2].URL != "https://b.example/y" || got[2].Line != 3 {
		t.Fatalf("entries = %+v", got)
	}
	_, err = fetch.Plan(got, "urls.txt", false, provider.Defaults())
	msg := fmt.Sprint(err)
	for _, want := range []string{
		"urls.txt: 3 inputs cannot be fetched",
		"line 2: 2,097,152 bytes long, longer than any URL (at most 1.0 MiB)",
		"line 4: not text (a NUL byte or invalid UTF-8); the input looks binary",
		"line 5: not text",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
}

// A long URL passes the per-line check (its key is a digest); whatever
// the task queue would refuse is refused there, with the line.
func TestPlanChecksWhatTheQueueChecks(t *testing.T) {
	long := "https://api.github.com/search/code?q=" + strings.Repeat("x", 5000)
	targets, err := fetch.Plan([]fetch.Entry{{Line: 1, URL: long}}, "urls.txt", false, provider.Defaults())
	if err != nil || len(targets) != 1 {
		t.Fatalf("Plan(long URL) = %v, %v", targets, err)
	}
	_, err = fetch.Plan([]fetch.Entry{{Line: 4, URL: "https://api.github.com/repos/o/r\x7f"}}, "urls.txt", false, provider.Defaults())
	if msg := fmt.Sprint(err); !strings.Contains(msg, "line 4: ") {
		t.Errorf("Plan(control character) = %v, want line 4 refused", err)
	}
}
