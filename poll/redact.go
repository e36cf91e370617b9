package poll

import (
	"net/url"
	"strings"
)

// secretParams are substrings of query parameter names whose values are
// masked wherever a URL is shown (GitLab's private_token, Gitea's
// access_token, api_key, sig…).
var secretParams = []string{"token", "key", "secret", "password", "passwd", "auth", "sig", "credential"}

// Redact returns u as it may be shown in output, logs and metrics: with
// the password of its user information, or its user name when there is no
// password (GitHub takes a token there), and the values of query
// parameters that look like credentials replaced by REDACTED.
func Redact(u *url.URL) string {
	c := *u
	if c.User != nil {
		if _, has := c.User.Password(); has {
			c.User = url.UserPassword(c.User.Username(), "REDACTED")
		} else if c.User.Username() != "" {
			c.User = url.User("REDACTED")
		}
	}
	if c.RawQuery != "" {
		q := c.Query()
		changed := false
		for name, vals := range q {
			lower := strings.ToLower(name)
			for _, s := range secretParams {
				if strings.Contains(lower, s) {
					for i := range vals {
						vals[i] = "REDACTED"
					}
					changed = true
					break
				}
			}
		}
		if changed {
			c.RawQuery = q.Encode()
		}
	}
	return c.String()
}
