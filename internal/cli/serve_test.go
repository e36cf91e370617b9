package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// serve refuses bad input before listening, with exit status 2 and a
// message that says what would be right.
func TestServeBadInput(t *testing.T) {
	dir := t.TempDir()
	badKeys := filepath.Join(dir, "keys.txt")
	if err := os.WriteFile(badKeys, []byte("# clients\nci 0123456789abcdef\ncrawler short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RATEKEEPER_GATEWAY_KEYS", "")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--listen", "0.0.0.0:0", "--db", "memory"}, "not a loopback address, needs client keys: give --client-keys FILE"},
		{[]string{"serve", "--client-keys", badKeys, "--db", "memory"}, `keys.txt: line 3: the key of "crawler" is 5 characters; use at least 16`},
		{[]string{"serve", "--client-keys", filepath.Join(dir, "missing"), "--db", "memory"}, "client keys: open"},
		{[]string{"serve", "--provider", "nope", "--db", "memory"}, `unknown provider "nope"`},
		{[]string{"serve", "--max-body", "lots", "--db", "memory"}, `--max-body "lots": want a size such as 10MiB`},
		{[]string{"serve", "--host", "github", "--db", "memory"}, `--host "github": expected HOST=PROVIDER`},
		{[]string{"serve", "--max-wait", "0s", "--db", "memory"}, "--max-wait 0s: want a positive duration"},
		{[]string{"serve", "--provider", "github=ftp://x", "--db", "memory"}, "base URL must be http or https"},
	}
	for _, c := range cases {
		_, stderr, code := run(t, "", c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
		if strings.Contains(stderr, "short\n") || strings.Contains(stderr, "0123456789abcdef") {
			t.Errorf("%v: stderr repeats a key: %q", c.args, stderr)
		}
	}
	t.Setenv("RATEKEEPER_GATEWAY_KEYS", "bot tiny")
	if _, stderr, code := run(t, "", "serve", "--db", "memory"); code != 2 || !strings.Contains(stderr, "RATEKEEPER_GATEWAY_KEYS: entry 1:") {
		t.Errorf("bad keys in the environment: exit %d, %q", code, stderr)
	}
}

func TestServeHelp(t *testing.T) {
	out, _, code := run(t, "", "serve", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"--pass-through", "--client-keys", "--max-body", "--max-wait duration", "(default 30s)", "NAME KEY"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}
