package fetch

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"

	"github.com/ratekeeper/ratekeeper/creds"
)

// A URL of the input may carry credentials in its user information
// (https://user:TOKEN@host/…, or https://TOKEN@host/…). They must reach
// the server, but a task's input is stored in the database and the output
// is a file anyone reading the results reads: so the request a task holds
// is the URL without them, the output's url shows them masked
// (https://user:…a1b2@host/…), and they stay in this process's memory,
// added to its own requests for that URL as Basic credentials, as
// http.Client does with a URL's user information. A task of such a URL
// that another worker runs goes with that worker's credentials.

// splitUserinfo returns u without its user information, and the user
// information (nil when there is none).
func splitUserinfo(u *url.URL) (*url.URL, *url.Userinfo) {
	if u.User == nil {
		return u, nil
	}
	c := *u
	c.User = nil
	return &c, u.User
}

// redact masks the user information of a URL-like string, even one that
// does not parse: a password as a token is masked ("user:…a1b2"), a user
// name without password as one too (GitHub takes a token there), so the
// text can be shown or written anywhere.
func redact(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	authority, path := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return s
	}
	masked := creds.MaskToken(authority[:at])
	if user, pass, hasPass := strings.Cut(authority[:at], ":"); hasPass {
		masked = user + ":" + creds.MaskToken(pass)
	}
	return scheme + "://" + masked + authority[at:] + path
}

// userinfoTransport adds, to requests for the URLs it knows, the
// credentials their input URL carried, as Basic credentials, unless the
// request carries an Authorization of its own.
type userinfoTransport struct {
	base  http.RoundTripper
	byURL map[string]*url.Userinfo // by the request's URL without them
}

func (t userinfoTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ui, ok := t.byURL[req.URL.String()]
	if !ok || req.Header.Get("Authorization") != "" {
		return t.base.RoundTrip(req)
	}
	out := req.Clone(req.Context())
	pass, _ := ui.Password()
	out.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(ui.Username()+":"+pass)))
	return t.base.RoundTrip(out)
}

// withUserinfo returns client, or, when some targets' URLs carried
// credentials, a client that adds them to those targets' requests.
func withUserinfo(client *http.Client, targets []Target) *http.Client {
	byURL := map[string]*url.Userinfo{}
	for _, t := range targets {
		if t.userinfo != nil {
			byURL[t.Request.URL] = t.userinfo
		}
	}
	if len(byURL) == 0 {
		return client
	}
	c := *client
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = userinfoTransport{base: base, byURL: byURL}
	return &c
}
