package provider

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseProviderFlag(t *testing.T) {
	tests := []struct {
		flag       string
		name       string
		kind       Kind
		base       string
		wantErr    string
		mustNotSay string
	}{
		{flag: "github=https://api.github.com", name: "github", kind: GitHub, base: "https://api.github.com"},
		{flag: "github=https://API.github.com/", name: "github", kind: GitHub, base: "https://api.github.com"},
		{flag: "github=https://api.github.com:443", name: "github", kind: GitHub, base: "https://api.github.com"},
		{flag: "sim=http://[::1]:80/a/./b/../c", name: "sim", kind: Generic, base: "http://[::1]/a/c"},
		{flag: "sim=http://localhost:8080", name: "sim", kind: Generic, base: "http://localhost:8080"},
		{flag: "ghe=https://ghe.example.com/api/v3", name: "ghe", kind: Generic, base: "https://ghe.example.com/api/v3"},
		{flag: "hf=http://127.0.0.1:8080/hf", name: "huggingface", kind: HuggingFace, base: "http://127.0.0.1:8080/hf"},
		{flag: "Codeberg=https://codeberg.example/api/v1", name: "codeberg", kind: Gitea, base: "https://codeberg.example/api/v1"},
		{flag: "forgejo=https://f.example/api/v1", name: "forgejo", kind: Gitea, base: "https://f.example/api/v1"},
		{flag: "gl=http://127.0.0.1:8080/gl/", name: "gl", kind: Generic, base: "http://127.0.0.1:8080/gl"},

		{flag: "gh=ftp://x", wantErr: "--provider gh=ftp://x: base URL must be http or https"},
		{flag: "gh", wantErr: "--provider gh: expected NAME=BASEURL, e.g. github=https://api.github.com"},
		{flag: "=https://x", wantErr: "--provider =https://x: NAME is empty"},
		{flag: "my corp=https://x", wantErr: `NAME "my corp" may contain only letters, digits`},
		{flag: "gh=", wantErr: "--provider gh=: base URL is empty"},
		{flag: "gh=api.github.com", wantErr: `--provider gh=api.github.com: base URL "api.github.com" has no scheme; write https://api.github.com`},
		{flag: "gh=127.0.0.1:8080/gh", wantErr: `has no scheme; write https://127.0.0.1:8080/gh`},
		{flag: "gh=https://", wantErr: "has no host"},
		{flag: "gh=https:///path", wantErr: "has no host"},
		{flag: "gh=https://x/api?x=1", wantErr: "must not have a query or fragment"},
		{flag: "gh=https://x/api#frag", wantErr: "must not have a query or fragment"},
		{flag: "gh=https://h%zz/", wantErr: "is not a valid URL"},
		{flag: "gh=https://bob:hunter2@x.example/api", wantErr: "must not contain a user name or password", mustNotSay: "hunter2"},
		{flag: "gh=https://bob:hunter2@x .example/api", wantErr: "gh=https://***@x .example/api", mustNotSay: "hunter2"},
	}
	for _, tt := range tests {
		p, err := ParseProviderFlag(tt.flag)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseProviderFlag(%q) err = %v, want it to contain %q", tt.flag, err, tt.wantErr)
			}
			if err != nil && tt.mustNotSay != "" && strings.Contains(err.Error(), tt.mustNotSay) {
				t.Errorf("ParseProviderFlag(%q) err repeats the password: %v", tt.flag, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseProviderFlag(%q): %v", tt.flag, err)
			continue
		}
		if p.Name != tt.name || p.Kind != tt.kind || p.BaseURL().String() != tt.base {
			t.Errorf("ParseProviderFlag(%q) = %s %s %s, want %s %s %s", tt.flag, p.Name, p.Kind, p.BaseURL(), tt.name, tt.kind, tt.base)
		}
	}
}

func TestApplyFlagKeepsConfiguration(t *testing.T) {
	r := Defaults()
	cfg := mustParse(t, `
[providers.github]
max_concurrency = 7
token_env = ["BOT_TOKEN"]
`)
	if err := r.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := r.ApplyFlag("github=http://127.0.0.1:8080/gh"); err != nil {
		t.Fatal(err)
	}
	gh := r.Lookup("github")
	if gh.BaseURL().String() != "http://127.0.0.1:8080/gh" || gh.Secondary.MaxConcurrency != 7 || !slices.Equal(gh.TokenEnv, []string{"BOT_TOKEN"}) {
		t.Errorf("after flag: base %s, concurrency %d, env %v", gh.BaseURL(), gh.Secondary.MaxConcurrency, gh.TokenEnv)
	}
	if r.Match(mustURL(t, "https://api.github.com/user")) != nil {
		t.Error("old base still matched")
	}
	// A generic provider's inferred env var follows its new host.
	if err := r.ApplyFlag("corp=https://git.example.com"); err != nil {
		t.Fatal(err)
	}
	if err := r.ApplyFlag("corp=https://code.example.org"); err != nil {
		t.Fatal(err)
	}
	if got := r.Lookup("corp").TokenEnv; !slices.Equal(got, []string{"CODE_TOKEN"}) {
		t.Errorf("corp TokenEnv = %v", got)
	}
}

func mustParse(t *testing.T, doc string) *Config {
	t.Helper()
	c, err := ParseConfig([]byte(doc), "rk.toml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConfigFull(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ratekeeper.toml")
	doc := `# ratekeeper configuration
[providers.github]
token_env = ["BOT_A_TOKEN", "BOT_B_TOKEN"]
max_concurrency = 10
write_spacing = "2s"
policy = "Spread"
reserve = 100
max_wait = "10m"
max_pause = "20m"
secondary_wait = "6s"
velocity = 1
min_interval = "100ms"
max_interval = "30s"
burst = 10

[providers.gitea]
kind = "gitea"
base_url = "https://gitea.example/api/v1"
reserve = "12.5%"

[providers.ghe]
kind = "github"
base_url = "https://ghe.example.com/api/v3"
default_limit = 5000
default_window = "1h"

[providers.ghe.app]
app_id = 42
private_key_file = "keys/app.pem"
installation_ids = [111, 222]

[providers."corp"]
base_url = "https://api.corp.example/v2"
auth_header = "X-Api-Key"
auth_prefix = ""
token_env = "CORP_KEY"

[providers.gitlab]
auth_header = "Authorization"
auth_prefix = "Bearer"

[providers.selfgl]
kind = "gitlab"
base_url = "https://gl.example.com/api/v4"
web_url = "https://code.example.com"
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Names(); !slices.Equal(got, []string{"github", "gitea", "ghe", "corp", "gitlab", "selfgl"}) {
		t.Errorf("Names = %v (want file order)", got)
	}
	r := Defaults()
	if err := r.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	gh := r.Lookup("github")
	if l := gh.Limits; l.Velocity != 1 || l.MinInterval != 100*time.Millisecond || l.MaxInterval != 30*time.Second || l.Burst != 10 {
		t.Errorf("github pacing: velocity %v, intervals %v–%v, burst %d", l.Velocity, l.MinInterval, l.MaxInterval, l.Burst)
	}
	if !slices.Equal(gh.TokenEnv, []string{"BOT_A_TOKEN", "BOT_B_TOKEN"}) || gh.Secondary.MaxConcurrency != 10 ||
		gh.Secondary.WriteSpacing != 2*time.Second || gh.Limits.Policy != PolicySpread || gh.Limits.Reserve != 100 ||
		gh.Limits.MaxWait != 10*time.Minute || gh.BaseURL().String() != GitHubAPI ||
		gh.Limits.MaxPause != 20*time.Minute || gh.Secondary.Wait != 6*time.Second {
		t.Errorf("github = %+v %+v %+v", gh.TokenEnv, gh.Secondary, gh.Limits)
	}
	if gt := r.Lookup("gitea"); gt.Limits.ReservePercent != 12.5 || gt.Limits.Reserve != 0 {
		t.Errorf("gitea reserve = %d, %v%%; want 12.5%%", gt.Limits.Reserve, gt.Limits.ReservePercent)
	}
	ghe := r.Lookup("ghe")
	if ghe.Kind != GitHub || ghe.Limits.DefaultLimit != 5000 || ghe.Limits.DefaultWindow != time.Hour ||
		ghe.GraphQLURL().String() != "https://ghe.example.com/api/graphql" || !slices.Equal(ghe.TokenEnv, []string{"GITHUB_TOKEN", "GH_TOKEN"}) {
		t.Errorf("ghe = %s %+v graphql %s env %v", ghe.Kind, ghe.Limits, ghe.GraphQLURL(), ghe.TokenEnv)
	}
	wantApp := AppConfig{AppID: 42, PrivateKeyFile: filepath.Join(dir, "keys", "app.pem"), InstallationIDs: []int64{111, 222}}
	if ghe.App == nil || ghe.App.AppID != wantApp.AppID || ghe.App.PrivateKeyFile != wantApp.PrivateKeyFile || !slices.Equal(ghe.App.InstallationIDs, wantApp.InstallationIDs) {
		t.Errorf("ghe.App = %+v, want %+v", ghe.App, wantApp)
	}
	corp := r.Lookup("corp")
	if corp.Kind != Generic || corp.Auth != (Auth{Header: "X-Api-Key"}) || !slices.Equal(corp.TokenEnv, []string{"CORP_KEY"}) {
		t.Errorf("corp = %s %+v %v", corp.Kind, corp.Auth, corp.TokenEnv)
	}
	if got := r.Lookup("gitlab").Auth; got != (Auth{Header: "Authorization", Prefix: "Bearer"}) {
		t.Errorf("gitlab auth = %+v", got)
	}
	if got := r.Lookup("selfgl").WebURL().String(); got != "https://code.example.com" {
		t.Errorf("selfgl web = %s", got)
	}
}

func TestConfigKindChangeRestartsFromKindDefaults(t *testing.T) {
	r := Defaults()
	if err := r.ApplyFlag("sim=http://127.0.0.1:8080/gh"); err != nil {
		t.Fatal(err)
	}
	if err := r.ApplyConfig(mustParse(t, "[providers.sim]\nkind = \"github\"\n")); err != nil {
		t.Fatal(err)
	}
	sim := r.Lookup("sim")
	if sim.Kind != GitHub || sim.Auth.Prefix != "Bearer" || sim.Secondary.WritePoints != 5 || sim.BaseURL().String() != "http://127.0.0.1:8080/gh" {
		t.Errorf("sim = %s %+v %+v %s", sim.Kind, sim.Auth, sim.Secondary, sim.BaseURL())
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"syntax", "[providers.github\nreserve = 1\n", "rk.toml:2: expected '.' or ']' to end table name"},
		{"unknown top-level key", "\n\nverbose = true\n", `rk.toml:3: verbose: unknown key`},
		{"unknown provider key", "[providers.github]\nreserve = 1\nconcurrency = 5\n", `rk.toml:3: providers.github.concurrency: unknown key; known keys: app, auth_header`},
		{"unknown app key", "[providers.github.app]\napp_id = 1\nprivate_key_file = \"k.pem\"\ninstallation_ids = [1]\ninstall_ids = [2]\n", `rk.toml:5: providers.github.app.install_ids: unknown key`},
		{"reserve words", "[providers.github]\n\nreserve = \"ten\"\n", `rk.toml:3: providers.github.reserve: want a count of requests kept back in every bucket, such as 100, or a percentage of each bucket's limit, such as "10%"`},
		{"reserve whole bucket", "[providers.github]\nreserve = \"100%\"\n", `rk.toml:2: providers.github.reserve: want a percentage from 0% up to (not including) 100%`},
		{"reserve float", "[providers.github]\nreserve = 0.1\n", `rk.toml:2: providers.github.reserve: expected a count of requests such as 100 or a percentage such as "10%", got float 0.1`},
		{"secondary wait", "[providers.github]\nsecondary_wait = \"10ms\"\n", `rk.toml:2: providers.github.secondary_wait: "10ms" is shorter than 1s`},
		{"max pause", "[providers.github]\nmax_pause = 60\n", `rk.toml:2: providers.github.max_pause: expected a duration string`},
		{"float for int", "[providers.github]\nmax_concurrency = 2.5\n", `rk.toml:2: providers.github.max_concurrency: expected an integer, got float 2.5`},
		{"negative", "[providers.github]\nreserve = -1\n", `rk.toml:2: providers.github.reserve: must be at least 0, got -1`},
		{"zero default limit", "[providers.github]\ndefault_limit = 0\n", `providers.github.default_limit: must be at least 1`},
		{"int duration", "[providers.github]\nwrite_spacing = 1\n", `rk.toml:2: providers.github.write_spacing: expected a duration string such as "500ms", "2s" or "10m", got integer 1`},
		{"bad duration", "[providers.github]\nmax_wait = \"ten minutes\"\n", `providers.github.max_wait: "ten minutes" is not a duration`},
		{"negative duration", "[providers.github]\nmax_wait = \"-1s\"\n", `providers.github.max_wait: "-1s" is negative`},
		{"velocity zero", "[providers.github]\nvelocity = 0\n", `rk.toml:2: providers.github.velocity: 0: want a number above 0 such as 1.5`},
		{"velocity words", "[providers.github]\nvelocity = \"fast\"\n", `providers.github.velocity: expected a number such as 1.5, got string`},
		{"negative burst", "[providers.github]\nburst = -2\n", `rk.toml:2: providers.github.burst: must be at least 0, got -2`},
		{"min above max", "[providers.github]\nmin_interval = \"2s\"\nmax_interval = \"1s\"\n", `providers.github.min_interval: min_interval 2s is above max_interval 1s; want the min at most the max`},
		{"short window", "[providers.github]\ndefault_window = \"10ms\"\n", `providers.github.default_window: "10ms" is shorter than 1s`},
		{"policy", "[providers.github]\npolicy = \"fast\"\n", `rk.toml:2: providers.github.policy: unknown policy "fast"; expected spread, adaptive or greedy`},
		{"kind", "[providers.bb]\nkind = \"bitbucket\"\nbase_url = \"https://api.bitbucket.org\"\n", `rk.toml:2: providers.bb.kind: unknown kind "bitbucket"; known kinds:`},
		{"kind type", "[providers.bb]\nkind = 3\n", `providers.bb.kind: expected a string, got integer 3`},
		{"base url scheme", "[providers.corp]\nbase_url = \"ftp://x\"\n", `rk.toml:2: providers.corp.base_url: base URL must be http or https`},
		{"web url", "[providers.github]\nweb_url = \"github.com\"\n", `providers.github.web_url: base URL "github.com" has no scheme`},
		{"token env name", "[providers.github]\ntoken_env = [\"GITHUB TOKEN\"]\n", `providers.github.token_env: entry #1: "GITHUB TOKEN" is not an environment variable name`},
		{"token env type", "[providers.github]\ntoken_env = 5\n", `providers.github.token_env: expected a list of environment variable names`},
		{"auth header", "[providers.github]\nauth_header = \"X Api\"\n", `providers.github.auth_header: "X Api" is not a valid HTTP header name`},
		{"auth prefix", "[providers.github]\nauth_prefix = \"Bearer \"\n", `providers.github.auth_prefix: "Bearer " must be one word`},
		{"provider not a table", "providers = 3\n", `rk.toml:1: providers: expected tables [providers.NAME], got integer 3`},
		{"provider value not a table", "[providers]\ngithub = 3\n", `rk.toml:2: providers.github: expected a table of settings`},
		{"bad name", "[providers.\"my corp\"]\nbase_url = \"https://x\"\n", `rk.toml:1: providers.my corp: provider name may contain only`},
		{"unknown provider without base", "\n[providers.corp]\nreserve = 1\n", `rk.toml:2: providers.corp: base_url is required for a provider that is not built in or already configured (known: anthropic, codeberg, github, gitlab, huggingface, openai)`},
		{"app on gitlab", "[providers.gitlab.app]\napp_id = 1\nprivate_key_file = \"k.pem\"\ninstallation_ids = [1]\n", `rk.toml:1: providers.gitlab.app: GitHub App installations need a provider of kind github`},
		{"app missing id", "[providers.github.app]\nprivate_key_file = \"k.pem\"\ninstallation_ids = [1]\n", `providers.github.app: app_id is missing`},
		{"app missing key", "[providers.github.app]\napp_id = 1\ninstallation_ids = [1]\n", `providers.github.app: private_key_file is missing`},
		{"app bad installation", "[providers.github.app]\napp_id = 1\nprivate_key_file = \"k.pem\"\ninstallation_ids = [1, \"2\"]\n", `rk.toml:4: providers.github.app.installation_ids: entry #2: expected an integer, got string "2"`},
		{"app dup installation", "[providers.github.app]\napp_id = 1\nprivate_key_file = \"k.pem\"\ninstallation_ids = [1, 1]\n", `installation 1 is listed twice`},
		{"app zero id", "[providers.github.app]\napp_id = 0\n", `rk.toml:2: providers.github.app.app_id: must be at least 1, got 0`},
		{"app inline", "[providers.github]\napp = { app_id = \"x\" }\n", `rk.toml:2: providers.github.app.app_id: expected an integer`},
		{"same base as builtin", "[providers.mine]\nbase_url = \"https://api.github.com\"\n", `rk.toml:1: providers.mine: provider "mine" has the same base URL as provider "github"`},
		{"dotted keys", "[providers]\ngithub.reserve = 1\ngithub.reservee = 2\n", `rk.toml:3: providers.github.reservee: unknown key`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(tt.doc), "rk.toml")
			if err == nil {
				r := Defaults()
				before := r.Names()
				err = r.ApplyConfig(cfg)
				if err != nil && !slices.Equal(before, r.Names()) {
					t.Errorf("failed ApplyConfig changed the registry")
				}
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestLoadConfigUnreadable(t *testing.T) {
	_, err := LoadConfig(filepath.Join(t.TempDir(), "missing.toml"))
	if err == nil || !strings.Contains(err.Error(), "cannot read config file") || !strings.Contains(err.Error(), "missing.toml") {
		t.Fatalf("err = %v", err)
	}
}

func TestKeyLines(t *testing.T) {
	doc := `a = 1
s = """
x = 2
"""
[t . "q.k"]
'lit' = 3
[[arr]]
b.c = 4
`
	got := keyLines(doc)
	want := map[string]int{
		"a": 1, "s": 2, "t": 5, "t\x00q.k": 5, "t\x00q.k\x00lit": 6, "arr": 7, "arr\x00b": 8, "arr\x00b\x00c": 8,
	}
	for k, line := range want {
		if got[k] != line {
			t.Errorf("line of %q = %d, want %d", strings.ReplaceAll(k, "\x00", "."), got[k], line)
		}
	}
	if _, ok := got["x"]; ok {
		t.Error("key inside a multi-line string was recorded")
	}
}

func TestParseReserve(t *testing.T) {
	for _, c := range []struct {
		in      string
		count   int
		percent float64
		err     string
	}{
		{"", 0, 0, ""}, {"0", 0, 0, ""}, {" 100 ", 100, 0, ""}, {"10%", 0, 10, ""}, {"2.5 %", 0, 2.5, ""}, {"0%", 0, 0, ""},
		{"-1", 0, 0, "want a count of requests"}, {"ten", 0, 0, "want a count of requests"},
		{"100%", 0, 0, "up to (not including) 100%"}, {"-5%", 0, 0, "up to (not including) 100%"}, {"x%", 0, 0, "such as \"10%\""},
	} {
		n, pct, err := ParseReserve(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), fmt.Sprintf("%q", c.in)) {
				t.Errorf("ParseReserve(%q) err = %v, want it to name the value and say %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || n != c.count || pct != c.percent {
			t.Errorf("ParseReserve(%q) = %d, %v, %v; want %d, %v", c.in, n, pct, err, c.count, c.percent)
		}
	}
}

// A file with many mistakes shows them all at once, each with its line
// and key, not only the first.
func TestConfigEveryProblem(t *testing.T) {
	doc := `verbose = true

[providers.github]
reserve = "ten"
concurency = 5

[providers.github.limits]
"GET /users/*" = "many"

[providers.github.app]
app_id = 0
installation_ids = [1, 1]

[providers.corp]
reserve = 1

[providers.gitlab]
policy = "fast"
`
	_, err := ParseConfig([]byte(doc), "rk.toml")
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`rk.toml:1: verbose: unknown key`,
		`rk.toml:4: providers.github.reserve: want a count`,
		`rk.toml:5: providers.github.concurency: unknown key`,
		`rk.toml:8: providers.github.limits.GET /users/*: `,
		`rk.toml:11: providers.github.app.app_id: must be at least 1, got 0`,
		`rk.toml:12: providers.github.app.installation_ids: installation 1 is listed twice`,
		`rk.toml:10: providers.github.app: private_key_file is missing`,
		`rk.toml:18: providers.gitlab.policy: unknown policy "fast"`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Errorf("%d problems, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if i >= len(lines) || !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d: want it to start with %q\n%v", i+1, w, err)
		}
	}
	if strings.Contains(err.Error(), "app_id is missing") {
		t.Errorf("an app_id given but wrong is also said to be missing:\n%v", err)
	}

	// CheckConfig goes on to what applying finds: corp, whose settings
	// parse, has no base_url.
	_, _, problems := CheckConfig([]byte(doc), "rk.toml")
	if len(problems) != len(want)+1 || !strings.Contains(problems[len(problems)-1].Error(), "rk.toml:14: providers.corp: base_url is required") {
		t.Errorf("CheckConfig: %d problems, want %d ending with corp's base_url:\n%v", len(problems), len(want)+1, errors.Join(problems...))
	}
}

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rk.toml")
	doc := "[providers.ghe]\nkind = \"github\"\nbase_url = \"https://ghe.example.com/api/v3\"\n\n[providers.ghe.app]\napp_id = 1\nprivate_key_file = \"app.pem\"\ninstallation_ids = [1]\n"
	_, _, problems := CheckConfig([]byte(doc), file)
	if len(problems) != 1 || !strings.Contains(problems[0].Error(), "rk.toml:7: providers.ghe.app.private_key_file: cannot read the App's private key") {
		t.Fatalf("an unreadable key file: %v", problems)
	}
	if err := os.WriteFile(filepath.Join(dir, "app.pem"), []byte("a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, reg, problems := CheckConfig([]byte(doc), file)
	if len(problems) != 0 || cfg == nil {
		t.Fatalf("a good file: %v", problems)
	}
	if p := reg.Lookup("ghe"); p == nil || p.Kind != GitHub || p.App == nil {
		t.Fatalf("the registry has ghe as %+v", p)
	}
	if _, _, problems := CheckConfig([]byte("[providers\n"), file); len(problems) != 1 {
		t.Errorf("a syntax error: %v", problems)
	}
}

// A simulator pattern copied into the client's limits is told apart from
// a mistyped *, with what to write instead.
func TestConfigLimitsDoubleStar(t *testing.T) {
	_, err := ParseConfig([]byte("[providers.gitlab.limits]\n\"GET /api/v4/users/**\" = \"100/1m\"\n\"/api/v4/**/raw\" = \"10/1m\"\n"), "rk.toml")
	want := `rk.toml:2: providers.gitlab.limits.GET /api/v4/users/**: ** is the simulator's (ratekeeper sim) way to say one or more segments; here * is one segment and a final * the rest of the path: write "GET /api/v4/users/*"
rk.toml:3: providers.gitlab.limits./api/v4/**/raw: ** is the simulator's (ratekeeper sim) way to say one or more segments; here * is one segment and a final * the rest of the path`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
}
