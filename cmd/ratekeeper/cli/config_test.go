package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, doc string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	bad := write("bad.toml", "verbose = true\n[providers.github]\nreserve = \"ten\"\n[providers.corp]\nreserve = 1\n")
	stdout, stderr, code := run(t, "", "config", "check", bad)
	want := []string{
		bad + ":1: verbose: unknown key; the file has one key, auto_hosts, and one section, [providers.NAME]",
		bad + `:3: providers.github.reserve: want a count of requests kept back in every bucket, such as 100, or a percentage of each bucket's limit, such as "10%"`,
		bad + ":4: providers.corp: base_url is required for a provider that is not built in or already configured (known: anthropic, codeberg, github, gitlab, huggingface, openai)",
	}
	if code != 2 || stdout != strings.Join(want, "\n")+"\n" || stderr != "ratekeeper: "+bad+": 3 problems\n" {
		t.Errorf("a bad file: exit %d\nstdout:\n%s\nstderr: %s\nwant exit 2 and\n%s", code, stdout, stderr, strings.Join(want, "\n"))
	}

	good := write("good.toml", "auto_hosts = false\n[providers.gitlab]\nbase_url = \"https://gitlab.example.com/api/v4\"\n[providers.gitlab.limits]\n\"GET /api/v4/users/*\" = \"300/10m\"\n[providers.corp]\nbase_url = \"https://api.corp.example\"\n")
	stdout, stderr, code = run(t, "", "config", "check", good)
	wantOut := good + `: no problems; 2 providers configured; auto_hosts = false: hosts no provider owns are left alone
  gitlab: built in, refined, kind gitlab, https://gitlab.example.com/api/v4 (1 endpoint limit)
  corp: new, kind generic, https://api.corp.example
`
	if code != 0 || stdout != wantOut || stderr != "" {
		t.Errorf("a good file: exit %d\nstdout:\n%s\nstderr: %s\nwant exit 0 and\n%s", code, stdout, stderr, wantOut)
	}

	if _, stderr, code := run(t, "", "config", "check", filepath.Join(dir, "missing.toml")); code != 2 || !strings.Contains(stderr, "cannot read config file") {
		t.Errorf("a missing file: exit %d, %s", code, stderr)
	}
	if _, _, code := run(t, "", "config", "check"); code != 2 {
		t.Errorf("no file: exit %d, want 2", code)
	}
}
