package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/ratekeeper/ratekeeper/provider"
)

// requestError is a refusal the gateway answers itself, with a status and a
// message that says what was wrong and what would be right. It never
// carries a token or a client key.
type requestError struct {
	status int
	code   string // short machine-readable reason, also the metrics label
	msg    string
	header map[string]string // set on the answer
}

func (e *requestError) Error() string { return e.msg }

func badRequest(code, format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, code: code, msg: fmt.Sprintf(format, args...)}
}

// target is a request target split into its raw path and raw query, after
// the checks that apply before any routing.
type target struct {
	path  string // escaped, starts with '/'
	query string // raw, without '?'
}

// parseTarget checks the raw request target (the request line's second
// word) and splits it. Only origin-form targets ("/path?query") are
// accepted: an absolute URL ("http://host/...") is what a client sends to a
// forward proxy, and this gateway is not one. The path is refused when it
// could mean something else to the upstream than to the gateway: dot
// segments ("." and ".."), empty segments ("//"), backslashes, encoded dots
// (%2e), encoded backslashes (%5c), encoded percent signs (%25, i.e. double
// encoding), encoded control characters, and malformed escapes. Encoded
// slashes (%2F) are checked later, per provider (see checkSegments).
func parseTarget(raw string) (target, *requestError) {
	if raw == "*" {
		return target{}, badRequest("bad_target", "request target %q is not served; send a path such as /github/repos/OWNER/REPO", raw)
	}
	if !strings.HasPrefix(raw, "/") {
		return target{}, badRequest("absolute_target",
			"request target must be a path such as /github/repos/OWNER/REPO, not an absolute URL or host: this gateway is not an open proxy and only reaches its configured providers")
	}
	path, query, _ := strings.Cut(raw, "?")
	if strings.Contains(path, "#") {
		return target{}, badRequest("bad_target", "request target contains a fragment ('#'); send only the path and query")
	}
	if strings.IndexByte(path, '\\') >= 0 {
		return target{}, badRequest("backslash", "path contains a backslash; use '/' to separate segments")
	}
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c < 0x21 || c == 0x7f {
			return target{}, badRequest("control_char", "path contains a space or control character; percent-encode it")
		}
		if c != '%' {
			continue
		}
		if i+2 >= len(path) || !isHex(path[i+1]) || !isHex(path[i+2]) {
			return target{}, badRequest("bad_escape", "path contains a malformed percent-escape; '%%' must be followed by two hex digits")
		}
		b := unhex(path[i+1])<<4 | unhex(path[i+2])
		switch {
		case b == '.':
			return target{}, badRequest("encoded_dot", "path contains an encoded dot (%%2e); write dots as they are, and no '.' or '..' segments")
		case b == '%':
			return target{}, badRequest("double_encoding", "path contains an encoded percent sign (%%25), i.e. double encoding; encode each character once")
		case b == '\\':
			return target{}, badRequest("backslash", "path contains an encoded backslash (%%5c); use '/' to separate segments")
		case b < 0x20 || b == 0x7f:
			return target{}, badRequest("control_char", "path contains an encoded control character")
		}
		i += 2
	}
	segs := strings.Split(path[1:], "/")
	for i, s := range segs {
		switch {
		case s == "." || s == "..":
			return target{}, badRequest("dot_segment", "path contains a %q segment; send the path without dot segments", s)
		case s == "" && i < len(segs)-1:
			return target{}, badRequest("empty_segment", "path contains an empty segment (\"//\"); separate segments with one '/'")
		}
	}
	if query != "" {
		if _, err := url.ParseQuery(query); err != nil {
			return target{}, badRequest("bad_query", "query is malformed (%v); encode '&', '=', ';' and '%%' inside values", err)
		}
	}
	return target{path: path, query: query}, nil
}

// checkSegments checks the escaped path below a provider's route. An
// encoded slash (%2F) is refused unless the provider's API documents it —
// GitLab's does, for project paths and file paths such as
// /projects/group%2Fproject — and even then no decoded piece may be a dot
// segment, so the upstream cannot be walked out of its base path.
func checkSegments(p *provider.Provider, rel string) *requestError {
	if !strings.Contains(rel, "%2F") && !strings.Contains(rel, "%2f") {
		return nil
	}
	if !p.AllowsEncodedSlashes() {
		return badRequest("encoded_slash", "path contains an encoded slash (%%2F), which provider %s does not use; send '/' as it is", p.Name)
	}
	for _, seg := range strings.Split(strings.TrimPrefix(rel, "/"), "/") {
		dec, err := url.PathUnescape(seg)
		if err != nil {
			return badRequest("bad_escape", "path segment is not valid percent-encoding")
		}
		for _, piece := range strings.Split(dec, "/") {
			if piece == "." || piece == ".." || piece == "" {
				return badRequest("encoded_slash", "an encoded slash (%%2F) in the path hides an empty, '.' or '..' piece; send a plain project or file path")
			}
		}
	}
	return nil
}

// credentialParams are query parameters that carry tokens for some
// providers (GitLab's private_token, access_token and job_token), refused
// whatever the provider; each provider's API adds its own
// (Provider.TokenParams: Gitea's token). The gateway refuses them: a token
// in the URL bypasses both the gateway's credentials and pass-through
// accounting, and ends up in logs.
var credentialParams = []string{"private_token", "access_token", "job_token"}

// checkQuery refuses credential query parameters for provider p.
func checkQuery(p *provider.Provider, rawQuery string) *requestError {
	if rawQuery == "" {
		return nil
	}
	q, _ := url.ParseQuery(rawQuery) // parseTarget checked it
	names := append(credentialParams[:len(credentialParams):len(credentialParams)], p.TokenParams()...)
	for _, n := range names {
		if q.Has(n) {
			return badRequest("token_in_query", "query parameter %q carries a token; the gateway adds credentials itself (with --pass-through, send your token in the %s header)", n, p.Auth.Header)
		}
	}
	return nil
}

// splitRoute splits "/NAME/rest" into NAME and "/rest" ("/" when there is
// no rest).
func splitRoute(path string) (name, rel string) {
	name, rest, found := strings.Cut(path[1:], "/")
	if !found {
		return name, "/"
	}
	return name, "/" + rest
}

// upstreamURL is base joined with the escaped path rel and the raw query,
// keeping rel's escaping (GitLab's %2F) as the client sent it.
func upstreamURL(base *url.URL, rel, rawQuery string) (*url.URL, error) {
	dec, err := url.PathUnescape(rel)
	if err != nil {
		return nil, err
	}
	u := *base
	if rel == "/" {
		// The provider's root itself: https://api.github.com/ for a base
		// without a path, the base path for one with a path.
		if u.Path == "" {
			u.Path = "/"
		}
	} else {
		u.Path = base.Path + dec
		u.RawPath = base.EscapedPath() + rel
	}
	u.RawQuery = rawQuery
	return &u, nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
