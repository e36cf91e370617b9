package gateway

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/provider"
)

func TestParseKeys(t *testing.T) {
	k, err := ParseKeys("keys.txt", strings.NewReader(`# clients of this gateway
ci        0123456789abcdef0123

  crawler   abcdefghijklmnop-_.~+/=
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(k.Names(), ","); got != "ci,crawler" {
		t.Fatalf("names %s", got)
	}
	if name, ok := k.Lookup("abcdefghijklmnop-_.~+/="); !ok || name != "crawler" {
		t.Fatalf("lookup: %q %v", name, ok)
	}
	if _, ok := k.Lookup("0123456789abcdef012"); ok {
		t.Fatal("a prefix of a key matched")
	}
	if _, ok := k.Lookup(""); ok {
		t.Fatal("the empty key matched")
	}
}

func TestParseKeysErrors(t *testing.T) {
	cases := []struct{ text, want string }{
		{"", "keys.txt: no keys; write one line per client: NAME KEY"},
		{"# only comments\n\n", "no keys"},
		{"ci\n", "keys.txt: line 1: expected NAME KEY (two fields separated by spaces), found 1 field(s)"},
		{"ok 0123456789abcdef\nci secret-0123456789 extra\n", "line 2: expected NAME KEY (two fields separated by spaces), found 3 field(s)"},
		{"c:i 0123456789abcdef\n", `line 1: client name "c:i" may contain only letters, digits`},
		{"ci short-secret\n", `line 1: the key of "ci" is 12 characters; use at least 16`},
		{"ci 0123456789abcdef\"x\n", `line 1: the key of "ci" contains a character outside letters, digits and "-._~+/=" (position 17)`},
		{"ci 0123456789abcdef\n\nci fedcba9876543210\n", `line 3: client "ci" is already defined on line 1`},
		{"ci 0123456789abcdef\nbot 0123456789abcdef\n", `line 2: the key of "bot" is the same as the key on line 1`},
	}
	for _, c := range cases {
		_, err := ParseKeys("keys.txt", strings.NewReader(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.text, err, c.want)
			continue
		}
		for _, secret := range []string{"short-secret", "0123456789abcdef", "fedcba9876543210", "secret-0123456789"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%q: error %q repeats a key", c.text, err)
			}
		}
	}
}

func TestKeysFromFileAndEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte("ci 0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := LoadKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	env, err := ParseKeysEnv(KeysEnv, "bot fedcba9876543210, crawler abcdefghijklmnop")
	if err != nil {
		t.Fatal(err)
	}
	all, err := file.Merge(env)
	if err != nil || all.Len() != 3 {
		t.Fatalf("merged %d keys, %v", all.Len(), err)
	}
	if _, err := file.Merge(file); err == nil || !strings.Contains(err.Error(), `client "ci" is defined twice`) {
		t.Fatalf("merging twice: %v", err)
	}
	if _, err := ParseKeysEnv(KeysEnv, "bot short"); err == nil || !strings.Contains(err.Error(), KeysEnv+": entry 1:") {
		t.Fatalf("env error: %v", err)
	}
	if _, err := LoadKeys(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "client keys:") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestParseTarget(t *testing.T) {
	ok := []struct{ raw, path, query string }{
		{"/", "/", ""},
		{"/github/repos/o/r?per_page=5&page=2", "/github/repos/o/r", "per_page=5&page=2"},
		{"/github/", "/github/", ""},
		{"/gitlab/projects/g%2Fp", "/gitlab/projects/g%2Fp", ""},
		{"/hf/api/models/o/m.v1.2", "/hf/api/models/o/m.v1.2", ""},
		{"/github/search/issues?q=a%20b", "/github/search/issues", "q=a%20b"},
	}
	for _, c := range ok {
		tgt, err := parseTarget(c.raw)
		if err != nil || tgt.path != c.path || tgt.query != c.query {
			t.Errorf("parseTarget(%q) = %+v, %v", c.raw, tgt, err)
		}
	}
	bad := map[string]string{
		"http://x/y":    "absolute_target",
		"x":             "absolute_target",
		"*":             "bad_target",
		"/a/../b":       "dot_segment",
		"/a/.":          "dot_segment",
		"/a/%2E/b":      "encoded_dot",
		"/a/%25":        "double_encoding",
		"/a\\b":         "backslash",
		"/a/%5C":        "backslash",
		"/a//b":         "empty_segment",
		"/a/%7f":        "control_char",
		"/a/b c":        "control_char",
		"/a/%g0":        "bad_escape",
		"/a/%4":         "bad_escape",
		"/a?x=%zz":      "bad_query",
		"/a#frag":       "bad_target",
		"/a/\x00":       "control_char",
		"/a/%2e%2e/etc": "encoded_dot",
	}
	for raw, code := range bad {
		if _, err := parseTarget(raw); err == nil || err.code != code || err.status != 400 {
			t.Errorf("parseTarget(%q) = %v, want %s", raw, err, code)
		}
	}
}

func TestUpstreamURLAndLinks(t *testing.T) {
	base, _ := url.Parse("https://ghe.example.com/api/v3")
	u, err := upstreamURL(base, "/repos/o/r", "page=2")
	if err != nil || u.String() != "https://ghe.example.com/api/v3/repos/o/r?page=2" {
		t.Fatalf("%v %v", u, err)
	}
	u, _ = upstreamURL(base, "/projects/g%2Fp/files/a%2Fb.go", "")
	if u.String() != "https://ghe.example.com/api/v3/projects/g%2Fp/files/a%2Fb.go" {
		t.Fatalf("escaping lost: %s", u)
	}
	root, _ := url.Parse("https://api.github.com")
	if u, _ := upstreamURL(root, "/", ""); u.String() != "https://api.github.com/" {
		t.Fatalf("root: %s", u)
	}

	link := `<https://ghe.example.com/api/v3/repos/o/r/issues?page=2>; rel="next", <https://elsewhere.example/x>; rel="help", <https://ghe.example.com/api/v30/x>; rel="other"`
	got := rewriteLinks(link, base, "http://gw:8080/ghe")
	want := `<http://gw:8080/ghe/repos/o/r/issues?page=2>; rel="next", <https://elsewhere.example/x>; rel="help", <https://ghe.example.com/api/v30/x>; rel="other"`
	if got != want {
		t.Fatalf("links\n%s\nwant\n%s", got, want)
	}
	if loc, ok := rewriteURL("/api/v3/repositories/12", base, "http://gw/ghe"); !ok || loc != "http://gw/ghe/repositories/12" {
		t.Fatalf("relative Location: %q %v", loc, ok)
	}
}

func TestCheckSegmentsAndQuery(t *testing.T) {
	gl, _ := provider.New("gitlab", provider.GitLab, "https://gitlab.example.com/api/v4")
	gh, _ := provider.New("github", provider.GitHub, "https://api.github.com")
	gt, _ := provider.New("codeberg", provider.Gitea, "https://codeberg.org/api/v1")
	if err := checkSegments(gl, "/projects/group%2Fsub%2Fproject/repository/files/src%2Fmain.go/raw"); err != nil {
		t.Fatalf("GitLab path refused: %v", err)
	}
	for _, rel := range []string{"/projects/g%2F..%2Fx", "/projects/g%2F.", "/projects/%2Fetc"} {
		if err := checkSegments(gl, rel); err == nil {
			t.Errorf("GitLab %s accepted", rel)
		}
	}
	if err := checkSegments(gh, "/repos/o%2Fr"); err == nil || err.code != "encoded_slash" {
		t.Fatalf("GitHub encoded slash: %v", err)
	}
	if err := checkQuery(gt, "token=x"); err == nil {
		t.Fatal("Gitea ?token= accepted")
	}
	if err := checkQuery(gh, "token=x&q=1"); err != nil {
		t.Fatalf("GitHub ?token= is an ordinary parameter there: %v", err)
	}
	if err := checkQuery(gh, "per_page=1&access_token=x"); err == nil || err.code != "token_in_query" {
		t.Fatalf("access_token: %v", err)
	}
}

func TestHistory(t *testing.T) {
	h := &History{}
	t0 := time.Date(2030, 1, 1, 12, 0, 30, 0, time.UTC)
	h.Add(t0, func(m *Minute) { m.Requests += 2 })
	h.Add(t0.Add(29*time.Second), func(m *Minute) { m.Requests++; m.Waits++ })
	h.Add(t0.Add(5*time.Minute), func(m *Minute) { m.Refused++ })
	last := h.Last(t0.Add(5 * time.Minute))
	if len(last) != HistoryMinutes {
		t.Fatalf("%d minutes", len(last))
	}
	if m := last[HistoryMinutes-6]; !m.Start.Equal(t0.Truncate(time.Minute)) || m.Requests != 3 || m.Waits != 1 {
		t.Fatalf("first minute %+v", m)
	}
	if m := last[HistoryMinutes-1]; m.Refused != 1 || m.Requests != 0 {
		t.Fatalf("last minute %+v", m)
	}
	// An hour later the slot is reused: old counts are gone.
	later := t0.Add(time.Hour)
	h.Add(later, func(m *Minute) { m.Requests++ })
	for _, m := range h.Last(later) {
		if m.Start.Equal(t0.Truncate(time.Minute)) {
			t.Fatal("a minute older than an hour is still shown")
		}
		if m.Start.Equal(later.Truncate(time.Minute)) && m.Requests != 1 {
			t.Fatalf("reused slot %+v", m)
		}
	}
	// Before 1970 too.
	h.Add(time.Unix(-90, 0), func(m *Minute) { m.Requests++ })
}

func TestTokenOf(t *testing.T) {
	gh, _ := provider.New("github", provider.GitHub, "https://api.github.com")
	gl, _ := provider.New("gitlab", provider.GitLab, "https://gitlab.com/api/v4")
	for _, c := range []struct {
		p     *provider.Provider
		value string
		want  string
	}{
		{gh, "Bearer tok-1", "tok-1"},
		{gh, "bearer  tok-1 ", "tok-1"},
		{gh, "token tok-1", "tok-1"},
		{gl, "tok-1", "tok-1"},
	} {
		got, err := tokenOf(c.p, c.value)
		if err != nil || got != c.want {
			t.Errorf("tokenOf(%s, %q) = %q, %v", c.p.Name, c.value, got, err)
		}
	}
	for _, v := range []string{"Basic dXNlcjpwYXNz", "Digest x", "Bearer ", "Bearer a b"} {
		if _, err := tokenOf(gh, v); err == nil {
			t.Errorf("tokenOf(%q) accepted", v)
		}
	}
}

func TestNextTry(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	deadline := t0.Add(5 * time.Second)
	cases := []struct {
		name  string
		now   time.Time
		until time.Time
		d     time.Duration
		ok    bool
	}{
		{"quota returns before the deadline: wait for it", t0, t0.Add(2 * time.Second), 2 * time.Second, true},
		{"quota returns at the deadline", t0, deadline, 5 * time.Second, true},
		{"quota returns after the deadline: refuse now", t0, deadline.Add(time.Nanosecond), 0, false},
		{"a wait that rounds to nothing does not spin", t0, t0, minRetry, true},
		{"quota is back already", t0.Add(time.Second), t0, minRetry, true},
		{"the pause never ends past the deadline", deadline.Add(-time.Microsecond), deadline, time.Microsecond, true},
		{"past the deadline, quota back: ask at once", deadline.Add(time.Second), deadline, 0, true},
	}
	for _, c := range cases {
		d, ok := nextTry(c.now, c.until, deadline)
		if d != c.d || ok != c.ok {
			t.Errorf("%s: nextTry = %s, %v; want %s, %v", c.name, d, ok, c.d, c.ok)
		}
	}
}

func TestLRU(t *testing.T) {
	c := newLRU[string, int](2)
	c.add("a", 1)
	c.add("b", 2)
	if v, ok := c.get("a"); !ok || v != 1 {
		t.Fatalf("get a = %d, %v", v, ok)
	}
	c.add("c", 3) // b is the least recently used
	if _, ok := c.get("b"); ok {
		t.Fatal("b kept beyond the bound")
	}
	c.add("a", 4)
	if got := c.values(); len(got) != 2 || got[0] != 4 || got[1] != 3 {
		t.Fatalf("values %v, want [4 3]", got)
	}
	c.remove("a")
	if c.len() != 1 {
		t.Fatalf("len %d after remove", c.len())
	}
}
