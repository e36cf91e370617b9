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
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// HTTPType is the built-in task type that sends one HTTP request.
const HTTPType = "http"

// HTTPInput is the input of an http task.
type HTTPInput struct {
	URL string `json:"url"`
	// Method defaults to GET.
	Method  string            `json:"method,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
}

// HTTPResult is the result of a completed http task. Every response
// header is kept, so those the rate-limit-aware client adds
// (X-Ratekeeper-Credential with the masked credential used,
// X-Ratekeeper-Cache) are there too.
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
}

// DefaultRateLimitWait is how long an http task sleeps after a 429 that
// does not say (Retry-After) when to come back.
const DefaultRateLimitWait = 60 * time.Second

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
	return in, nil
}

// request builds the request, checking the input.
func (in HTTPInput) request(ctx context.Context) (*http.Request, error) {
	u, err := url.Parse(in.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url %q: want an absolute http:// or https:// URL", in.URL)
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

// printableURL drops the query and user info, which may carry secrets.
func printableURL(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}

// httpHandler is the handler of the http type.
func httpHandler(client *http.Client, bodyDir string, inlineLimit int64) HandlerFunc {
	return func(ctx context.Context, t *Task) (json.RawMessage, error) {
		in, err := parseHTTPInput(t.Input)
		if err != nil {
			return nil, Permanent(err)
		}
		req, err := in.request(ctx)
		if err != nil {
			return nil, Permanent(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			// An error carrying RetryAt (the rate-limit-aware client's "quota
			// returns at T") stays in the chain: the task is rescheduled.
			return nil, err
		}
		defer resp.Body.Close()
		if wait, limited := rateLimitWait(resp, time.Now()); limited {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			return nil, Reschedule(wait)
		}
		if resp.StatusCode >= 500 {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			return nil, fmt.Errorf("%s %s: server error %s", req.Method, printableURL(req.URL), resp.Status)
		}
		res := HTTPResult{Status: resp.StatusCode, Headers: resp.Header}
		if err := storeBody(resp.Body, bodyDir, inlineLimit, &res); err != nil {
			return nil, fmt.Errorf("%s %s: %w", req.Method, printableURL(req.URL), err)
		}
		return json.Marshal(res)
	}
}

// rateLimitWait tells whether a response is a rate limit that reached the
// task (the client did not absorb it) and how long to sleep: a 429, or a
// 403 with Retry-After (a 403 without it may be a permission error, which
// sleeping does not fix).
func rateLimitWait(resp *http.Response, now time.Time) (time.Duration, bool) {
	wait, ok := parseRetryAfter(resp.Header.Get("Retry-After"), now)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests && ok:
		return wait, true
	case resp.StatusCode == http.StatusTooManyRequests:
		return DefaultRateLimitWait, true
	case resp.StatusCode == http.StatusForbidden && ok:
		return wait, true
	}
	return 0, false
}

// parseRetryAfter reads Retry-After as delta seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, int64(365*24*3600))) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

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
// final name, and two tasks fetching the same body share one file.
func spillBody(head []byte, rest io.Reader, h hash.Hash, dir string) (string, int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, fmt.Errorf("body directory: %w", err)
	}
	f, err := os.CreateTemp(dir, ".body-*")
	if err != nil {
		return "", 0, fmt.Errorf("body file: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	n1, err := f.Write(head)
	if err == nil {
		var n2 int64
		n2, err = io.Copy(io.MultiWriter(f, h), rest)
		n1 += int(n2)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, fmt.Errorf("write body file: %w", err)
	}
	final := filepath.Join(dir, hex.EncodeToString(h.Sum(nil))+".body")
	if err := os.Rename(tmp, final); err != nil {
		return "", 0, fmt.Errorf("write body file: %w", err)
	}
	abs, err := filepath.Abs(final)
	if err != nil {
		return "", 0, errors.New("body file: cannot make its path absolute")
	}
	return abs, int64(n1), nil
}
