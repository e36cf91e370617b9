package fetch

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dustin/go-humanize"

	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/tasks"
	"github.com/ratekeeper/ratekeeper/transport"
)

// Entry is one request of the input with where it came from.
type Entry struct {
	// Line is the 1-based line of the input file, or the position of the
	// command-line argument.
	Line int
	// URL is the URL as written, trimmed: the output's url.
	URL string
	// JSON is the rest of the request when the line is a JSON object;
	// nil for a plain URL (a GET).
	JSON *JSONRequest
	// Problem, when set, says why the line cannot be a URL at all (too
	// long, binary); Plan reports it with the line's number.
	Problem error
}

// maxLineBytes bounds one input line; longer lines are reported, not
// silently split. No server takes a URL that long (most refuse beyond
// 8–64 KiB, with an answer that is then the URL's outcome).
const maxLineBytes = 1 << 20

// ReadEntries reads requests one a line: a URL (a GET), or a JSON object
// {"url": …, "method": …, "headers": {…}, "body": …, "id": …} (a line
// starting with {). Blank lines, lines starting with # and, on a URL line,
// anything after whitespace followed by # are ignored. A line that cannot
// be a request — a JSON line that is not one, a line longer than 1 MiB,
// or not text (a NUL byte, invalid UTF-8) — is an entry with a Problem, so
// that every bad line is reported with its number. It fails only when r cannot be read.
func ReadEntries(r io.Reader) ([]Entry, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var out []Entry
	for n := 1; ; n++ {
		line, size, err := readLine(br)
		if size > 0 || line != nil {
			if e := entryOf(n, line, size); e != nil {
				out = append(out, *e)
			}
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
}

// readLine reads one line without its end, keeping at most maxLineBytes of
// it: line is nil when the line is longer (size tells how long it is).
func readLine(br *bufio.Reader) (line []byte, size int, err error) {
	for {
		chunk, isPrefix, err := br.ReadLine()
		size += len(chunk)
		if size <= maxLineBytes {
			line = append(line, chunk...)
		} else {
			line = nil
		}
		if err != nil || !isPrefix {
			if err == nil && line == nil && size <= maxLineBytes {
				line = []byte{} // an empty line
			}
			return line, size, err
		}
	}
}

// entryOf turns input line n (nil: longer than maxLineBytes) into an
// entry, or nil for a blank line or a comment.
func entryOf(n int, line []byte, size int) *Entry {
	switch {
	case line == nil:
		return &Entry{Line: n, Problem: fmt.Errorf("%s bytes long, longer than any URL (at most %s); is this a file of URLs, one a line?",
			humanize.Comma(int64(size)), humanize.IBytes(maxLineBytes))}
	case bytes.IndexByte(line, 0) >= 0 || !utf8.Valid(line):
		return &Entry{Line: n, Problem: errors.New("not text (a NUL byte or invalid UTF-8); the input looks binary: give a file of URLs, one a line")}
	}
	if text := strings.TrimSpace(string(line)); strings.HasPrefix(text, "{") {
		e := &Entry{Line: n}
		if err := parseJSONLine(text, e); err != nil {
			e.Problem = err
		}
		return e
	}
	if text := stripComment(string(line)); text != "" {
		return &Entry{Line: n, URL: text}
	}
	return nil
}

// ArgEntries turns command-line arguments into entries numbered by
// position.
func ArgEntries(args []string) []Entry {
	out := make([]Entry, 0, len(args))
	for i, a := range args {
		out = append(out, Entry{Line: i + 1, URL: strings.TrimSpace(a)})
	}
	return out
}

// stripComment trims s and drops a comment: a line starting with #, or #
// after whitespace (a URL's own fragment has no space before it).
func stripComment(s string) string {
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	if strings.HasPrefix(s, "#") {
		return ""
	}
	for i, r := range s {
		if r == '#' && i > 0 && unicode.IsSpace(rune(s[i-1])) {
			s = s[:i]
			break
		}
	}
	return strings.TrimSpace(s)
}

// Target is one request of a batch: what the user gave and the request
// that fetches it.
type Target struct {
	Entry
	// Request is the http task's input.
	Request tasks.HTTPInput
	// Key is the task's UniqueKey: the request's URL, followed by its
	// method and headers when it has any, so that running the same input
	// again finds the same tasks.
	Key string
	// ID names the target in the output (the record's id): the input's
	// id, or, for a JSON line without one that is not a plain GET, its
	// method, URL and a digest of its body. Nil for a plain GET, which
	// its URL names.
	ID json.RawMessage
	// Provider names the provider that serves Request, or "" when none
	// does (the request goes out without credentials or pacing).
	Provider string
	// userinfo is what the input URL carried as user information: kept
	// out of Request, of Key and of the output (see userinfo.go).
	userinfo *url.Userinfo
}

// Ident is what names the target in the output: its ID, or its URL.
func (t Target) Ident() string { return identOf(t.URL, t.ID) }

// identOf names a record in the output: by its id when it has one, else
// by its URL (the two never meet: they are told apart by a prefix).
func identOf(url string, id json.RawMessage) string {
	if len(id) > 0 {
		return "id:" + string(id)
	}
	return "url:" + url
}

// Problem is one input line that cannot be fetched.
type Problem struct {
	Line int
	Err  error
}

// InputError lists every input line that cannot be fetched.
type InputError struct {
	// Source names the input: a file name, "stdin" or "arguments".
	Source   string
	Problems []Problem
}

// maxShownProblems bounds the lines an InputError spells out.
const maxShownProblems = 20

func (e *InputError) Error() string {
	var b strings.Builder
	what := "line"
	if e.Source == "arguments" {
		what = "argument"
	}
	fmt.Fprintf(&b, "%s: %d %s", e.Source, len(e.Problems), plural(len(e.Problems), "input cannot be fetched", "inputs cannot be fetched"))
	b.WriteString("; nothing was submitted")
	for i, p := range e.Problems {
		if i == maxShownProblems {
			fmt.Fprintf(&b, "\n  … and %d more", len(e.Problems)-i)
			break
		}
		fmt.Fprintf(&b, "\n  %s %d: %v", what, p.Line, p.Err)
	}
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Plan turns entries into targets: each a URL fetched with GET, a JSON
// line's request, or, with readme, a repository web URL resolved to its
// README through reg (provider.Registry.ReadmeRequest). Entries repeating
// an earlier one's request are dropped: each is fetched and written once.
// Every entry is checked, its task as the task queue will check it too
// (tasks.Validate), so that nothing a line holds can fail the batch once
// it runs; if any cannot be fetched the error is an *InputError naming
// each bad line, and no target is returned.
func Plan(entries []Entry, source string, readme bool, reg *provider.Registry) ([]Target, error) {
	var (
		out      []Target
		problems []Problem
		seen     = make(map[string]Target, len(entries))
	)
	for _, e := range entries {
		if e.Problem != nil {
			problems = append(problems, Problem{Line: e.Line, Err: e.Problem})
			continue
		}
		if e.JSON == nil {
			if _, ok := seen[identOf(e.URL, nil)]; ok {
				continue
			}
		}
		t, err := plan(e, readme, reg)
		if err == nil {
			err = t.check()
		}
		if err == nil {
			if first, ok := seen[t.Ident()]; ok {
				if first.Key == t.Key {
					continue
				}
				err = sameIdent(t, first)
			}
		}
		if err != nil {
			problems = append(problems, Problem{Line: e.Line, Err: err})
			continue
		}
		seen[t.Ident()] = t
		out = append(out, t)
	}
	if len(problems) > 0 {
		return nil, &InputError{Source: source, Problems: problems}
	}
	return out, nil
}

// sameIdent is the problem of t, a request other than first's that the
// output would name alike.
func sameIdent(t, first Target) error {
	if t.Entry.JSON != nil && t.Entry.JSON.ID != nil {
		return fmt.Errorf("id %s is line %d's too, for another request; give each request its own id", t.ID, first.Line)
	}
	return fmt.Errorf("same method, URL and body as line %d, with other headers; give each an \"id\" to tell them apart in the output", first.Line)
}

func plan(e Entry, readme bool, reg *provider.Registry) (Target, error) {
	if e.JSON != nil && readme {
		return Target{}, errors.New(`a JSON line, but with --readme every line is a repository's web URL`)
	}
	if e.JSON == nil && strings.IndexFunc(e.URL, unicode.IsSpace) >= 0 {
		return Target{}, fmt.Errorf("%q has a space in it; give one URL per line", shorten(redact(e.URL)))
	}
	given, ui := e.URL, (*url.Userinfo)(nil)
	if u, err := url.Parse(e.URL); err == nil && u.User != nil {
		var bare *url.URL
		bare, ui = splitUserinfo(u)
		given, e.URL = bare.String(), redact(e.URL)
	}
	if readme {
		req, p, err := reg.ReadmeRequest(context.Background(), given)
		if err != nil {
			return Target{}, err
		}
		in := tasks.HTTPInput{URL: req.URL.String(), Method: req.Method}
		if in.Method == "GET" {
			in.Method = ""
		}
		for name := range req.Header {
			if in.Headers == nil {
				in.Headers = map[string]string{}
			}
			in.Headers[name] = req.Header.Get(name)
		}
		return Target{Entry: e, Request: in, Key: taskKey(requestKey(in)), Provider: p.Name, userinfo: ui}, nil
	}
	u, err := url.Parse(given)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Target{}, fmt.Errorf("%q is not an absolute http:// or https:// URL; expected e.g. https://api.github.com/repos/owner/repo", shorten(redact(e.URL)))
	}
	name := ""
	if p := reg.Match(u); p != nil {
		name = p.Name
	}
	t := Target{Entry: e, Request: tasks.HTTPInput{URL: given}, Provider: name, userinfo: ui}
	if j := e.JSON; j != nil {
		t.Request.Method = j.Method
		for k, v := range j.Headers {
			if t.Request.Headers == nil {
				t.Request.Headers = map[string]string{}
			}
			t.Request.Headers[k] = v
		}
		body, isJSON := bodyText(j.Body)
		t.Request.Body = body
		if _, ok := headerValue(j.Headers, "Content-Type"); isJSON && !ok {
			if t.Request.Headers == nil {
				t.Request.Headers = map[string]string{}
			}
			t.Request.Headers["Content-Type"] = "application/json"
		}
		if len(j.Cost) > 0 {
			if t.Request.Headers == nil {
				t.Request.Headers = map[string]string{}
			}
			t.Request.Headers[transport.CostHeader] = j.Cost.String()
		}
		t.Request.SendOnce = !idempotent(t.Request.Method, t.Request.Headers, u, body)
		t.ID = j.ID
		if t.ID == nil && (t.Request.Method != "" || len(j.Body) > 0) {
			t.ID = derivedID(t.Request, e.URL)
		}
	}
	t.Key = requestKey(t.Request)
	if j := e.JSON; j != nil && j.ID != nil {
		// The id is the key the output knows; the request is in the
		// task's key too, so that another batch's id of the same name,
		// for another request, never finds this one's task.
		t.Key = "id: " + string(j.ID) + "\n" + t.Key
	}
	t.Key = taskKey(t.Key)
	return t, nil
}

// derivedID names a request without an id that is not a plain GET: its
// method, URL (as given, user information masked) and a digest of its
// body.
func derivedID(in tasks.HTTPInput, shown string) json.RawMessage {
	method := cmp.Or(in.Method, http.MethodGet)
	s := method + " " + shown
	if in.Body != "" {
		s += " sha256:" + bodyDigest(in.Body)
	}
	b, _ := json.Marshal(s)
	return b
}

// check checks t's task as Queue.SubmitMany will.
func (t Target) check() error {
	raw, err := json.Marshal(t.Request)
	if err == nil {
		err = tasks.Validate(tasks.Submission{Type: tasks.HTTPType, Input: raw, Options: tasks.SubmitOptions{UniqueKey: t.Key}})
	}
	if err != nil {
		return fmt.Errorf("%q cannot be a task: %w", shorten(redact(t.URL)), err)
	}
	return nil
}

// taskKey is the UniqueKey for request key k: k itself, readable in
// `ratekeeper tasks list`, unless it is longer than a unique key may be (a
// long search query, say); then a digest of it, which finds the same task
// run after run just the same. Keys that fit are never hashed, so that
// databases from before hashing find their tasks.
func taskKey(k string) string {
	if len(k) <= tasks.UniqueKeyLimit {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// retryKey is the UniqueKey of a retry of the task found under key, whose
// outcome (task id) was a failure: one key per failed task, so that a
// killed retry run finds its retries again.
func retryKey(key string, id int64) string {
	return taskKey(fmt.Sprintf("%s#retry-after-%d", key, id))
}

// requestKey identifies a request for UniqueKey: its URL alone for a plain
// GET, else the URL, method, headers (sorted) and a digest of the body,
// one per line.
func requestKey(in tasks.HTTPInput) string {
	if in.Method == "" && len(in.Headers) == 0 && in.Body == "" {
		return in.URL
	}
	var b strings.Builder
	b.WriteString(in.URL)
	if in.Method != "" {
		b.WriteString("\nmethod: " + in.Method)
	}
	names := make([]string, 0, len(in.Headers))
	for k := range in.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		b.WriteString("\n" + strings.ToLower(k) + ": " + in.Headers[k])
	}
	if in.Body != "" {
		b.WriteString("\nbody-sha256: " + bodyDigest(in.Body))
	}
	return b.String()
}

// shorten keeps error messages readable when a line is long.
func shorten(s string) string {
	const max = 120
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
