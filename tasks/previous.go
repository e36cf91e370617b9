package tasks

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/ratekeeper/ratekeeper/cache"
)

// heldBodyLimit bounds the previous body read into memory to compute a
// credential's entity tag from it; a larger one is checked (streamed
// through SHA-256) and revalidated with its stored tag alone.
const heldBodyLimit = 8 << 20

// check reports a Previous that cannot be used at all.
func (p *HTTPPrevious) check(in HTTPInput) error {
	switch {
	case p == nil:
		return nil
	case in.Method != "" && !strings.EqualFold(in.Method, http.MethodGet):
		return fmt.Errorf("previous: only a GET is revalidated, not %s", in.Method)
	case p.ETag == "" && p.LastModified == "":
		return errors.New("previous: give its etag or last_modified")
	case p.Status < 200 || p.Status > 299:
		return fmt.Errorf("previous: status %d: only a 2xx answer is revalidated", p.Status)
	case (p.Body == nil) == (p.BodyFile == ""):
		return errors.New("previous: give its body or its body_file, one of them")
	case len(p.SHA256) != 64 || strings.Trim(strings.ToLower(p.SHA256), "0123456789abcdef") != "":
		return fmt.Errorf("previous: sha256 %q: want 64 hex digits", p.SHA256)
	}
	return nil
}

// usable makes req conditional on p, when p's body is still what its
// sha256 says, and returns it with p; otherwise it returns req as it is
// and nil, and the answer is fetched afresh. The body, when small enough,
// goes in the request's context for the client (cache.WithHeldBody).
// Validators the input's own headers set are kept.
func (p *HTTPPrevious) usable(req *http.Request) (*http.Request, *HTTPPrevious) {
	if p == nil {
		return req, nil
	}
	body, ok := p.load()
	if !ok {
		return req, nil
	}
	if p.ETag != "" && req.Header.Get("If-None-Match") == "" {
		req.Header.Set("If-None-Match", p.ETag)
	}
	if p.LastModified != "" && req.Header.Get("If-Modified-Since") == "" {
		req.Header.Set("If-Modified-Since", p.LastModified)
	}
	// A re-sync is there to see what changed since: it always asks the
	// server, never takes a cache's fresh copy, whatever else the input's
	// Cache-Control says (the task's no-store keeps the body out of the
	// cache; no-cache says why the request must reach the server).
	if !strings.Contains(strings.ToLower(strings.Join(req.Header.Values("Cache-Control"), ",")), "no-cache") {
		req.Header.Add("Cache-Control", "no-cache")
	}
	if body != nil {
		req = req.WithContext(cache.WithHeldBody(req.Context(), body))
	}
	return req, p
}

// load reads p's body and checks it against p.SHA256: ok is false when it
// is gone or changed. body is nil for a file beyond heldBodyLimit.
func (p *HTTPPrevious) load() (body []byte, ok bool) {
	if p.Body != nil {
		body = []byte(*p.Body)
		return body, digest(bytes.NewReader(body)) == strings.ToLower(p.SHA256)
	}
	f, err := os.Open(p.BodyFile)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	if p.Size <= heldBodyLimit {
		body, err = io.ReadAll(io.LimitReader(f, heldBodyLimit+1))
		return body, err == nil && digest(bytes.NewReader(body)) == strings.ToLower(p.SHA256)
	}
	return nil, digest(f) == strings.ToLower(p.SHA256)
}

// digest is the hex SHA-256 of what r yields ("" if reading fails).
func digest(r io.Reader) string {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// repeated is the result of a 304 to p: p's answer, with the headers of
// the 304 (which carry the client's credential and the server's state)
// and p's own tag, the representation being p's.
func (p *HTTPPrevious) repeated(h http.Header) HTTPResult {
	if p.ETag != "" {
		h.Set("Etag", p.ETag)
	}
	return HTTPResult{Status: p.Status, Headers: h, SHA256: strings.ToLower(p.SHA256), Size: p.Size,
		Body: p.Body, BodyFile: p.BodyFile, NotModified: true}
}
