package tasks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ratekeeper/ratekeeper/headers"
)

// HTTPType is the built-in task type that sends one HTTP request.
const HTTPType = "http"

// HTTPInput is the input of an http task.
//
// The request carries Cache-Control: no-store unless Headers set
// Cache-Control: the task's result is where the body is kept, so the
// rate-keeping client's conditional-request cache keeps no second copy.
type HTTPInput struct {
	URL string `json:"url"`
	// Method defaults to GET.
	Method  string            `json:"method,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
	// SendOnce says the request must not reach the server twice: a write
	// that is not idempotent and carries no Idempotency-Key. Such a task
	// sends nothing once an earlier attempt may have reached the server
	// (one that was retried, cut short by a crash or a shutdown, or
	// abandoned): it fails with ErrUnknownOutcome instead. A failed send
	// and a 5xx are that attempt's end, never retried; only a rate-limit
	// refusal (a request the server did not process) or a wait for quota
	// before sending reschedules it.
	SendOnce bool `json:"send_once,omitempty"`
	// Previous is an earlier answer to the same GET, kept by the caller
	// (a previous run's output): the request is sent conditional on it,
	// and a 304 completes the task with that answer (see HTTPPrevious).
	Previous *HTTPPrevious `json:"previous,omitempty"`
}

// ErrUnknownOutcome is the error of a SendOnce task that may or may not
// have done its work on the server: it is not sent again.
var ErrUnknownOutcome = errors.New("unknown outcome")

// mayHaveSent reports whether an attempt of t before the current one may
// have reached the server: every earlier attempt that was not a
// reschedule (a wait for quota, or a refusal the server did not process)
// or given back unsent as its worker stopped may have.
func mayHaveSent(t *Task) bool {
	return t.Attempt-1 > t.RescheduleCount+t.unsent
}

// HTTPPrevious is an earlier answer an http task revalidates: its
// validator and where its body is. The request carries If-None-Match (and
// If-Modified-Since) from it, and, with a rate-keeping client, the body so
// that a server whose tags depend on the credential (GitHub) gets the tag
// it gives the credential sent now. If the server answers 304 the result
// repeats this answer — its status, sha256, size and body or body_file —
// with NotModified set; any other answer is the result as usual. A body
// that is gone or no longer matches SHA256 is not trusted: the request
// then goes unconditional.
type HTTPPrevious struct {
	// Status is the earlier answer's status (2xx).
	Status int `json:"status"`
	// ETag and LastModified are its validators; at least one is needed.
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	// SHA256 and Size describe its body, which is Body, or the file
	// BodyFile.
	SHA256   string  `json:"sha256"`
	Size     int64   `json:"size"`
	Body     *string `json:"body,omitempty"`
	BodyFile string  `json:"body_file,omitempty"`
}

// HTTPResult is the result of a completed http task. Every response
// header is kept, so those the rate-limit-aware client adds
// (X-Ratekeeper-Credential with the masked credential used,
// X-Ratekeeper-Attempts) are there too.
type HTTPResult struct {
	Status  int         `json:"status"`
	Headers http.Header `json:"headers"`
	SHA256  string      `json:"sha256"`
	Size    int64       `json:"size"`
	// Body is the body when it is valid UTF-8 and at most
	// Options.InlineBodyLimit bytes; otherwise BodyFile is the absolute path
	// of a file holding it, named by its SHA-256.
	Body     *string `json:"body,omitempty"`
	BodyFile string  `json:"body_file,omitempty"`
	// NotModified says the server answered 304 to the input's Previous:
	// the fields above repeat that answer.
	NotModified bool `json:"not_modified,omitempty"`
}

func parseHTTPInput(raw json.RawMessage) (HTTPInput, error) {
	var in HTTPInput
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, fmt.Errorf(`want {"url": "https://…", "method": "GET", "headers": {"Name": "value"}, "body": "…"}: %v`, err)
	}
	if _, err := in.request(context.Background()); err != nil {
		return in, err
	}
	if err := in.Previous.check(in); err != nil {
		return in, err
	}
	return in, nil
}

// request builds the request, checking the input.
func (in HTTPInput) request(ctx context.Context) (*http.Request, error) {
	u, err := url.Parse(in.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url %q: want an absolute http:// or https:// URL", shownURL(in.URL))
	}
	if u.User != nil {
		// A task's input is stored in the database, and shown by
		// `tasks list`: no place for a token.
		return nil, fmt.Errorf("url %s carries credentials (user information before @): a task's input is stored in the database; give the worker the token instead (GITHUB_TOKEN, …)", printableURL(u))
	}
	method := in.Method
	if method == "" {
		method = http.MethodGet
	}
	var body io.Reader
	if in.Body != "" {
		body = strings.NewReader(in.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, in.URL, body)
	if err != nil {
		return nil, fmt.Errorf("method %q: %v", method, err)
	}
	req.Header.Set("Cache-Control", "no-store")
	for k, v := range in.Headers {
		if !validHeaderName(k) {
			return nil, fmt.Errorf("header name %q: use letters, digits and -", k)
		}
		req.Header.Set(k, v)
	}
	return req, nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// shownURL is raw as a message may show it: without what comes before an
// @ in its authority (user information, which may hold a token), even
// when raw does not parse.
func shownURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if at := strings.LastIndexByte(rest[:end], '@'); at >= 0 {
		return scheme + "://…@" + rest[at+1:]
	}
	return raw
}

// printableURL drops the query and user info, which may carry secrets.
func printableURL(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}

// httpHandler is the handler of the http type. failOn, when not nil, says
// which final statuses fail the task instead of completing it; wireMarked
// is Options.WireMarked.
func httpHandler(client *http.Client, bodyDir string, inlineLimit int64, failOn func(status int) bool, wireMarked bool) HandlerFunc {
	return func(ctx context.Context, t *Task) (json.RawMessage, error) {
		in, err := parseHTTPInput(t.Input)
		if err != nil {
			return nil, Permanent(err)
		}
		req, err := in.request(ctx)
		if err != nil {
			return nil, Permanent(err)
		}
		req, prev := in.Previous.usable(req)
		if in.SendOnce && mayHaveSent(t) {
			return nil, Permanent(fmt.Errorf("%w: %s %s: an earlier attempt was cut short (a crash, a shutdown or a failed send) and may have reached the server; not sent again, since %s is not idempotent and the request has no Idempotency-Key",
				ErrUnknownOutcome, req.Method, printableURL(req.URL), req.Method))
		}
		resp, err := client.Do(req)
		if err != nil {
			if in.SendOnce {
				switch err := sendFailure(err, ctx.Err() != nil, resp != nil, wireMarked); {
				case IsLocalFault(err), isRetryAt(err), errors.Is(err, ErrStopping):
					return nil, err
				case neverSent(err):
					// A retry would count as an attempt that may have
					// sent; a reschedule does not.
					return nil, Reschedule(min(time.Second<<min(t.Attempt, 10), 10*time.Minute))
				}
				return nil, Permanent(fmt.Errorf("%w: %s %s: %v; not sent again, since %s is not idempotent and the request has no Idempotency-Key",
					ErrUnknownOutcome, req.Method, printableURL(req.URL), err, req.Method))
			}
			// An error carrying RetryAt (the rate-limit-aware client's "quota
			// returns at T") stays in the chain: the task is rescheduled.
			// One of the network or the server (a timeout too) is retried
			// with backoff; one that arose here is a local fault.
			return nil, sendFailure(err, ctx.Err() != nil, resp != nil, wireMarked)
		}
		defer resp.Body.Close()
		var prefix []byte
		if resp.StatusCode >= 400 {
			// A refusal may say so only in its body (GitHub's secondary
			// limits); the prefix goes back in front of the rest.
			prefix, _ = io.ReadAll(io.LimitReader(resp.Body, refusalPeek))
		}
		what := req.Method + " " + printableURL(req.URL)
		v := judge(resp.StatusCode, resp.Header, prefix, time.Now(), failOn)
		if in.SendOnce && v.err == errServer && !notProcessed(resp.StatusCode, prefix) {
			// The server had the request: its answer is the outcome.
			// (An overloaded server says it did not process it: that
			// one goes again like any server error.)
			v = verdict{}
		}
		if v.err != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			return nil, v.describe(what, resp.Status)
		}
		if prev != nil && resp.StatusCode == http.StatusNotModified {
			return json.Marshal(in.Previous.repeated(resp.Header))
		}
		res := HTTPResult{Status: resp.StatusCode, Headers: resp.Header}
		if err := storeBody(io.MultiReader(bytes.NewReader(prefix), resp.Body), bodyDir, inlineLimit, &res); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return json.Marshal(res)
	}
}

// isRetryAt reports whether err says when to try again (a wait for quota
// that outlasted the client's MaxWait: nothing was sent).
func isRetryAt(err error) bool {
	var ra retryAter
	return errors.As(err, &ra)
}

// neverSent reports whether err says the request never left this
// machine: no connection could be made.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// refusalPeek is how much of an error answer's body is read to tell a
// rate-limit refusal (as the transport reads it).
const refusalPeek = 8 << 10

// verdict is what an http task makes of an answer.
type verdict struct {
	// err is nil for an answer that completes the task; otherwise one of
	// errRefused, errServer, errFailStatus.
	err error
	// until is when a refusal's quota returns.
	until time.Time
	// limit is the refusal's kind: primary or secondary.
	limit headers.Limited
}

var (
	errRefused    = errors.New("refused by a rate limit")
	errServer     = errors.New("server error")
	errFailStatus = errors.New("status that fails the task")
)

// judge decides what an answer does to its task, the rate-limit question
// answered by package headers alone (as the transport answers it): a
// refusal that still reached the task (the client could not absorb it)
// reschedules it until the reading says quota returns; a 5xx is a failed
// attempt, retried; a status failOn accepts fails the task; anything else
// (other 4xx included) completes it. now is when the answer arrived. Pure.
func judge(status int, h http.Header, bodyPrefix []byte, now time.Time, failOn func(int) bool) verdict {
	r := headers.Parse(status, h, bodyPrefix, now)
	if r.Limited != headers.NotLimited {
		if !r.ServerTime.IsZero() {
			// Measure the wait on the server's clock: an absolute reset is
			// on it. Date has whole seconds, so this errs on the long side.
			r = headers.Parse(status, h, bodyPrefix, r.ServerTime)
		}
		return verdict{err: errRefused, until: now.Add(r.Wait), limit: r.Limited}
	}
	switch {
	case status >= 500:
		return verdict{err: errServer}
	case failOn != nil && failOn(status):
		return verdict{err: errFailStatus}
	}
	return verdict{}
}

// describe turns a verdict other than completion into the handler's error
// for request what, answered with status (e.g. "404 Not Found").
func (v verdict) describe(what, status string) error {
	switch v.err {
	case errRefused:
		return &refusedError{what: what, status: status, limit: v.limit, until: v.until}
	case errServer:
		return fmt.Errorf("%s: %w %s", what, errServer, status)
	default:
		return Permanent(fmt.Errorf("%s: HTTP %s, a %w", what, status, errFailStatus))
	}
}

// refusedError is a rate-limit refusal that reached an http task. Its
// RetryAt makes the task a durable sleep until quota returns, like the
// rate-limit-aware client's own wait error.
type refusedError struct {
	what, status string
	limit        headers.Limited
	until        time.Time
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("%s: HTTP %s, refused by a %s rate limit until %s", e.what, e.status, e.limit, e.until.UTC().Format(time.RFC3339))
}

// RetryAt is when the quota returns.
func (e *refusedError) RetryAt() time.Time { return e.until }

// storeBody reads the body, hashing it, into res: inline when small and
// UTF-8, else into a file in dir named by its hash.
func storeBody(body io.Reader, dir string, inlineLimit int64, res *HTTPResult) error {
	h := sha256.New()
	head, err := io.ReadAll(io.LimitReader(body, inlineLimit+1))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	h.Write(head)
	if int64(len(head)) <= inlineLimit && utf8.Valid(head) {
		s := string(head)
		res.Body, res.Size, res.SHA256 = &s, int64(len(head)), hex.EncodeToString(h.Sum(nil))
		return nil
	}
	path, size, err := spillBody(head, body, h, dir)
	if err != nil {
		return err
	}
	res.BodyFile, res.Size, res.SHA256 = path, size, hex.EncodeToString(h.Sum(nil))
	return nil
}

// spillBody writes head and the rest of body to dir/<sha256>.body through a
// temporary file, so that a crash never leaves a partial file under the
// final name, and two tasks fetching the same body share one file. Failing
// to write the file (a full disk, a directory that cannot be created) is a
// LocalFault; failing to read the body is not.
func spillBody(head []byte, rest io.Reader, h hash.Hash, dir string) (string, int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, LocalFault(fmt.Errorf("body directory: %w", err))
	}
	f, err := os.CreateTemp(dir, ".body-*")
	if err != nil {
		return "", 0, LocalFault(fmt.Errorf("body file: %w", err))
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	w := localWriter{f}
	n1, err := w.Write(head)
	if err == nil {
		var n2 int64
		n2, err = io.Copy(io.MultiWriter(w, h), rest)
		n1 += int(n2)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = LocalFault(cerr)
	}
	if err != nil {
		return "", 0, fmt.Errorf("write body file: %w", err)
	}
	final := filepath.Join(dir, hex.EncodeToString(h.Sum(nil))+".body")
	if err := os.Rename(tmp, final); err != nil {
		return "", 0, LocalFault(fmt.Errorf("write body file: %w", err))
	}
	abs, err := filepath.Abs(final)
	if err != nil {
		return "", 0, LocalFault(errors.New("body file: cannot make its path absolute"))
	}
	return abs, int64(n1), nil
}

// localWriter marks the errors of writing to a file of this machine, so
// that io.Copy's error says which side failed.
type localWriter struct{ w io.Writer }

func (l localWriter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	return n, LocalFault(err)
}

// notProcessed reports whether an answer says the server did not process
// its request: Anthropic's 529 overloaded_error, or a 503 whose body says
// the server is overloaded (OpenAI's "The engine is currently
// overloaded").
func notProcessed(status int, prefix []byte) bool {
	switch status {
	case 529:
		return true
	case http.StatusServiceUnavailable:
		return bytes.Contains(bytes.ToLower(prefix), []byte("overloaded"))
	}
	return false
}
