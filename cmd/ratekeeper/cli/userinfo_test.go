package cli

import (
	"net"
	"strings"
	"testing"
)

// A URL whose user information holds a token (as the password, or as the
// user name) never shows it, even in the error of a request that failed.
func TestGetErrorsMaskURLCredentials(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more: the request fails
	t.Setenv("RATEKEEPER_DB", "memory")
	for _, u := range []string{"http://ghp_tok123456@" + addr + "/x", "http://x:ghp_tok123456@" + addr + "/x"} {
		_, stderr, code := run(t, "", "get", "-v", u)
		if code != 1 || strings.Contains(stderr, "tok123456") || !strings.Contains(stderr, addr) {
			t.Errorf("get %s: exit %d, stderr %q; want 1 and the address without the token", strings.Replace(u, "tok123456", "…", 1), code, stderr)
		}
	}
}
