package tasks

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// An http task's URL may not carry credentials: its input would keep the
// token in the database (and `tasks list` would show it). The refusal
// names the URL without them, even when it does not parse.
func TestHTTPInputRefusesCredentialsInTheURL(t *testing.T) {
	for _, c := range []struct{ url, says string }{
		{"https://x:ghp_secret123@api.github.com/repos/o/r", "url https://api.github.com/repos/o/r carries credentials"},
		{"https://ghp_secret123@api.github.com/repos/o/r", "url https://api.github.com/repos/o/r carries credentials"},
		{"https://x:ghp_secret123@api.github.com:bad/x", `url "https://…@api.github.com:bad/x": want an absolute`},
	} {
		in, _ := json.Marshal(HTTPInput{URL: c.url})
		err := Validate(Submission{Type: HTTPType, Input: in})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: %v; want ErrInvalid saying %q, without the token", c.url, err, c.says)
		}
	}
}
