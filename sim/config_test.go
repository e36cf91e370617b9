package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidateNamesTheField(t *testing.T) {
	gh := func(mod func(*APIConfig)) Config {
		a := APIConfig{Dialect: "github", Tokens: []TokenConfig{{Token: "tok-1"}}}
		mod(&a)
		return Config{APIs: []APIConfig{a}}
	}
	cases := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"no API", Config{}, []string{"apis: no API configured"}},
		{"unknown dialect", gh(func(a *APIConfig) { a.Dialect = "gitbucket" }), []string{`apis[0].dialect: unknown dialect "gitbucket"`, "want github, gitlab, huggingface, gitea, openai or anthropic"}},
		{"missing dialect", gh(func(a *APIConfig) { a.Dialect = "" }), []string{"apis[0].dialect: missing"}},
		{"negative limit", gh(func(a *APIConfig) { a.Limit = -1 }), []string{"apis[0].limit: -1 is negative"}},
		{"negative anonymous limit", gh(func(a *APIConfig) { a.AnonymousLimit = -5 }), []string{"apis[0].anonymous_limit: -5 is negative"}},
		{"negative window", gh(func(a *APIConfig) { a.Window = -time.Hour }), []string{"apis[0].window: -1h0m0s is negative"}},
		{"fractional window", gh(func(a *APIConfig) { a.Window = 1500 * time.Millisecond }), []string{"apis[0].window: 1.5s is not a whole number of seconds"}},
		{"window mode", gh(func(a *APIConfig) { a.WindowMode = "sliding" }), []string{`apis[0].window_mode: unknown mode "sliding" (want rolling or fixed)`}},
		{"status", gh(func(a *APIConfig) { a.ExhaustedStatus = 500 }), []string{"apis[0].exhausted_status: 500 is not a rate-limit status (want 403 or 429)"}},
		{"unknown resource", gh(func(a *APIConfig) { a.Resources = map[string]ResourceConfig{"searches": {Limit: 5}} }), []string{"apis[0].resources.searches: unknown resource for github (want search, code_search, graphql)"}},
		{"main resource", gh(func(a *APIConfig) { a.Resources = map[string]ResourceConfig{"core": {Limit: 5}} }), []string{"apis[0].resources.core: core is the main resource"}},
		{"resource window", gh(func(a *APIConfig) { a.Resources = map[string]ResourceConfig{"search": {Window: -time.Second}} }), []string{"apis[0].resources.search.window: -1s is negative"}},
		{"empty token", gh(func(a *APIConfig) { a.Tokens = []TokenConfig{{Owner: "x"}} }), []string{"apis[0].tokens[0].token: empty"}},
		{"duplicate token", gh(func(a *APIConfig) { a.Tokens = []TokenConfig{{Token: "tok-s3cret"}, {Token: "tok-s3cret"}} }), []string{"apis[0].tokens[1].token: same text as tokens[0]"}},
		{"owner limits disagree", gh(func(a *APIConfig) {
			a.Tokens = []TokenConfig{{Token: "a1", Owner: "al", Limit: 10}, {Token: "a2", Owner: "al", Limit: 20}}
		}), []string{`apis[0].tokens[1].limit: 20 differs from tokens[0].limit 10 of the same owner "al"`}},
		{"secondary", gh(func(a *APIConfig) { a.Secondary = &SecondaryConfig{MaxConcurrent: -1, Status: 200} }), []string{"apis[0].secondary.max_concurrent: -1 is negative", "apis[0].secondary.status: 200"}},
		{"fault rates", gh(func(a *APIConfig) { a.Faults = FaultConfig{ErrorRate: 0.7, DropRate: 0.6} }), []string{"apis[0].faults: the rates add up to 1.3"}},
		{"fault rate range", gh(func(a *APIConfig) { a.Faults = FaultConfig{SlowRate: -0.1} }), []string{"apis[0].faults.slow_rate: -0.1 is not a fraction"}},
		{"prefix", gh(func(a *APIConfig) { a.Prefix = "github" }), []string{`apis[0].prefix: "github" does not start with /`}},
		{"reserved prefix", gh(func(a *APIConfig) { a.Prefix = "/_stats" }), []string{"reserved for the simulator"}},
		{"poll interval", gh(func(a *APIConfig) { a.PollInterval = 1500 * time.Millisecond }), []string{"apis[0].poll_interval"}},
		{"latency", gh(func(a *APIConfig) { a.Latency = -time.Second }), []string{"apis[0].latency: -1s is negative"}},
		{"duplicate names", Config{APIs: []APIConfig{{Dialect: "github"}, {Dialect: "github"}}}, []string{`apis[1].name: "github" is also the name of apis[0]`, `apis[1].prefix: "/github" is also the prefix of apis[0]`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if err == nil {
				t.Fatal("valid, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "tok-s3cret") {
				t.Errorf("error %q shows a token", err)
			}
			if _, err := New(tc.cfg); err == nil {
				t.Error("New accepted an invalid config")
			}
		})
	}
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const exampleTOML = `
seed = 7

[[apis]]
name = "github"
dialect = "github"
prefix = "/github"
limit = 100
window = "1m"
window_mode = "fixed"
exhausted_status = 429
skew = "-30s"

  [[apis.tokens]]
  token = "tok-alice-1"
  owner = "alice"

  [[apis.tokens]]
  token = "tok-alice-2"
  owner = "alice"

  [apis.resources.search]
  limit = 5

  [apis.secondary]
  max_concurrent = 4
  write_spacing = "1s"
  retry_after = true

  [apis.faults]
  error_rate = 0.01
  slow_delay = "3s"

[[apis]]
dialect = "huggingface"
prefix = "/hf"
`

const exampleJSON = `{
  "seed": 7,
  "apis": [
    {"name": "github", "dialect": "github", "prefix": "/github", "limit": 100, "window": "1m", "window_mode": "fixed",
     "exhausted_status": 429, "skew": "-30s",
     "tokens": [{"token": "tok-alice-1", "owner": "alice"}, {"token": "tok-alice-2", "owner": "alice"}],
     "resources": {"search": {"limit": 5}},
     "secondary": {"max_concurrent": 4, "write_spacing": "1s", "retry_after": true},
     "faults": {"error_rate": 0.01, "slow_delay": "3s"}},
    {"dialect": "huggingface", "prefix": "/hf"}
  ]
}`

func TestLoadConfig(t *testing.T) {
	for _, file := range []string{writeFile(t, "sim.toml", exampleTOML), writeFile(t, "sim.json", exampleJSON), writeFile(t, "sim.conf", exampleJSON)} {
		cfg, err := LoadConfig(file)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		a := cfg.APIs[0]
		if cfg.Seed != 7 || len(cfg.APIs) != 2 || a.Window != time.Minute || a.Skew != -30*time.Second || a.Limit != 100 ||
			a.Tokens[1].Owner != "alice" || a.Resources["search"].Limit != 5 || a.Secondary.WriteSpacing != time.Second ||
			!a.Secondary.RetryAfter || a.Faults.SlowDelay != 3*time.Second || cfg.APIs[1].Dialect != "huggingface" {
			t.Errorf("%s: loaded %+v", file, cfg)
		}
		srv, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		info := srv.APIs()
		if info[0].Resources[0].WindowMode != WindowFixed || info[0].ExhaustedStatus != 429 || info[1].Resources[0].Limit != 1000 {
			t.Errorf("%s: resolved %+v", file, info)
		}
	}
}

func TestLoadConfigErrors(t *testing.T) {
	cases := []struct {
		name, file, text string
		want             []string
	}{
		{"malformed TOML", "a.toml", "[[apis]]\ndialect = 'github\nlimit = 5\n", []string{"a.toml", "malformed TOML at line 2"}},
		{"malformed JSON", "a.json", "{\n  \"apis\": [\n    {\"dialect\": \"github\",}\n  ]\n}", []string{"a.json", "malformed JSON at line 3"}},
		{"unknown TOML key", "a.toml", "[[apis]]\ndialect = 'github'\nlimt = 5\n", []string{"apis.limt: unknown field"}},
		{"unknown JSON key", "a.json", `{"apis": [{"dialect": "github", "limt": 5}]}`, []string{"apis[0].limt: unknown field", "known:", "limit"}},
		{"unknown dialect TOML", "a.toml", "[[apis]]\ndialect = 'bitbucket'\n", []string{`apis[0].dialect: unknown dialect "bitbucket"`}},
		{"negative limit JSON", "a.json", `{"apis": [{"dialect": "gitlab", "limit": -3}]}`, []string{"apis[0].limit: -3 is negative"}},
		{"negative window TOML", "a.toml", "[[apis]]\ndialect = 'gitlab'\nwindow = '-1m'\n", []string{"apis[0].window: -1m0s is negative"}},
		{"bad duration JSON", "a.json", `{"apis": [{"dialect": "github", "window": "an hour"}]}`, []string{`apis[0].window: "an hour" is not a duration`}},
		{"number duration JSON", "a.json", `{"apis": [{"dialect": "github", "window": 3600}]}`, []string{`apis[0].window: want a duration string`}},
		{"wrong type JSON", "a.json", `{"apis": [{"dialect": "github", "tokens": [{"token": 5}]}]}`, []string{"apis[0].tokens[0].token: want a string"}},
		{"wrong type TOML", "a.toml", "[[apis]]\ndialect = 'github'\nlimit = 'many'\n", []string{"malformed TOML", "limit"}},
		{"fractional limit JSON", "a.json", `{"apis": [{"dialect": "github", "limit": 1.5}]}`, []string{"apis[0].limit: 1.5 is not a whole number"}},
		{"empty", "a.toml", "", []string{"apis: no API configured"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfig(writeFile(t, tc.file, tc.text))
			if err == nil {
				t.Fatal("loaded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "missing.toml")); err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestMaskToken(t *testing.T) {
	cases := map[string]string{
		"ghp_FAKE-not-a-token-just-a-test": "#2 ghp_…test",
		"tok-alice-1":                      "#2 to…-1",
		"abc":                              "#2 …",
		"sim-token-1":                      "#2 si…-1",
	}
	for tok, want := range cases {
		if got := MaskToken(2, tok); got != want {
			t.Errorf("MaskToken(%q) = %q, want %q", tok, got, want)
		}
	}
}

func TestParseTokens(t *testing.T) {
	toks, err := ParseTokens("3")
	if err != nil || len(toks) != 3 || toks[2].Token != "sim-token-3" || toks[2].Owner != "" {
		t.Errorf("count: %v %v", toks, err)
	}
	toks, err = ParseTokens("alice:tok-a1, alice:tok-a2,tok-b")
	if err != nil || len(toks) != 3 || toks[0].Owner != "alice" || toks[1].Token != "tok-a2" || toks[2].Owner != "" || toks[2].Token != "tok-b" {
		t.Errorf("list: %+v %v", toks, err)
	}
	for _, bad := range []string{"-1", "a,,b", ":tok", "alice:"} {
		if _, err := ParseTokens(bad); err == nil {
			t.Errorf("ParseTokens(%q) accepted", bad)
		}
	}
}

func TestListenAllowed(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:0": true, "localhost:9000": true, "127.1.2.3:80": true,
		":8080": false, "0.0.0.0:8080": false, "192.168.1.5:80": false, "example.com:80": false, "nonsense": false,
	} {
		if err := ListenAllowed(addr, false); (err == nil) != ok {
			t.Errorf("ListenAllowed(%q) = %v, want allowed=%v", addr, err, ok)
		}
	}
	if err := ListenAllowed("0.0.0.0:8080", true); err != nil {
		t.Errorf("allow-remote: %v", err)
	}
}

func TestQuickConfig(t *testing.T) {
	cfg, err := QuickConfig(QuickOptions{Dialects: []string{"github", "gitlab"}, Tokens: []TokenConfig{{Token: "t1"}}, Limit: 10, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	srv := mustNew(t, cfg)
	info := srv.APIs()
	if len(info) != 2 || info[0].Prefix != "/github" || info[1].Prefix != "/gitlab" || info[1].Resources[0].Limit != 10 {
		t.Errorf("quick config %+v", info)
	}
	if _, err := QuickConfig(QuickOptions{Dialects: []string{"github", "gitlab"}, Prefix: "/x"}); err == nil {
		t.Error("a prefix for two APIs was accepted")
	}
	if _, err := QuickConfig(QuickOptions{Dialects: []string{"svn"}}); err == nil || !strings.Contains(err.Error(), "apis[0].dialect") {
		t.Errorf("unknown dialect: %v", err)
	}
}
