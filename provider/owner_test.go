package provider

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestValidationRequest(t *testing.T) {
	r := Defaults()
	ghes, _ := New("ghes", GitHub, "https://ghe.example.com/api/v3")
	hfsim, _ := New("hf", HuggingFace, "http://127.0.0.1:9/hf")
	corp, _ := New("corp", Generic, "https://git.example.com")
	tests := []struct {
		p    *Provider
		want string
	}{
		{r.Lookup("github"), "https://api.github.com/user"},
		{ghes, "https://ghe.example.com/api/v3/user"},
		{r.Lookup("gitlab"), "https://gitlab.com/api/v4/user"},
		{r.Lookup("huggingface"), "https://huggingface.co/api/whoami-v2"},
		{hfsim, "http://127.0.0.1:9/hf/api/whoami-v2"},
		{r.Lookup("codeberg"), "https://codeberg.org/api/v1/user"},
	}
	for _, tt := range tests {
		req, err := tt.p.ValidationRequest(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", tt.p.Name, err)
		}
		if req.Method != "GET" || req.URL.String() != tt.want {
			t.Errorf("%s: %s %s, want GET %s", tt.p.Name, req.Method, req.URL, tt.want)
		}
		if !tt.p.Owns(req.URL) {
			t.Errorf("%s does not own its validation URL", tt.p.Name)
		}
		if req.Header.Get("Authorization") != "" {
			t.Errorf("%s: validation request already authorized", tt.p.Name)
		}
	}
	if _, err := corp.ValidationRequest(context.Background()); !errors.Is(err, ErrNoValidation) {
		t.Errorf("generic ValidationRequest err = %v", err)
	}
}

func TestParseOwner(t *testing.T) {
	r := Defaults()
	corp, _ := New("corp", Generic, "https://git.example.com")
	tests := []struct {
		p       *Provider
		body    string
		want    Owner
		key     string
		wantErr string
	}{
		{p: r.Lookup("github"), body: `{"login":"octocat","id":583231,"type":"User"}`, want: Owner{ID: "583231", Name: "octocat"}, key: "user:583231"},
		{p: r.Lookup("gitlab"), body: `{"id":1,"username":"root","name":"Administrator"}`, want: Owner{ID: "1", Name: "root"}, key: "user:1"},
		{p: r.Lookup("huggingface"), body: `{"type":"user","id":"63f0c1a2b3","name":"alice","fullname":"Alice"}`, want: Owner{ID: "63f0c1a2b3", Name: "alice"}, key: "user:63f0c1a2b3"},
		{p: r.Lookup("huggingface"), body: `{"type":"user","name":"bob"}`, want: Owner{Name: "bob"}, key: "user:bob"},
		{p: r.Lookup("codeberg"), body: `{"id":42,"login":"gitea-bot","full_name":""}`, want: Owner{ID: "42", Name: "gitea-bot"}, key: "user:42"},
		{p: corp, body: `{"username":"svc"}`, want: Owner{Name: "svc"}, key: "user:svc"},
		{p: r.Lookup("github"), body: `not json`, wantErr: "not the expected JSON object"},
		{p: r.Lookup("github"), body: `{"message":"Bad credentials"}`, wantErr: "names no owner"},
		{p: r.Lookup("github"), body: `[]`, wantErr: "not the expected JSON object"},
	}
	for _, tt := range tests {
		got, err := tt.p.ParseOwner([]byte(tt.body))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s %s: err = %v, want %q", tt.p.Name, tt.body, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want || got.Key() != tt.key {
			t.Errorf("%s %s = %+v (key %s), %v; want %+v (key %s)", tt.p.Name, tt.body, got, got.Key(), err, tt.want, tt.key)
		}
	}
	if s := (Owner{ID: "1", Name: "root"}).String(); s != "root (id 1)" {
		t.Errorf("String = %q", s)
	}
}

func TestStatus(t *testing.T) {
	r := Defaults()
	u, ok := r.Lookup("github").StatusURL()
	if !ok || u.String() != "https://api.github.com/rate_limit" {
		t.Errorf("StatusURL = %v %v", u, ok)
	}
	ghes, _ := New("ghes", GitHub, "https://ghe.example.com/api/v3")
	if u, _ := ghes.StatusURL(); u.String() != "https://ghe.example.com/api/v3/rate_limit" {
		t.Errorf("GHES StatusURL = %v", u)
	}
	if _, ok := r.Lookup("gitlab").StatusURL(); ok {
		t.Error("gitlab has a status URL")
	}
	body := `{
  "resources": {
    "core": {"limit": 5000, "used": 1, "remaining": 4999, "reset": 1691591363},
    "search": {"limit": 30, "used": 12, "remaining": 18, "reset": 1691591091},
    "graphql": {"limit": 5000, "used": 7, "remaining": 4993, "reset": 1691593228},
    "code_search": {"limit": 10, "remaining": 10, "reset": 1691591091}
  },
  "rate": {"limit": 5000, "used": 1, "remaining": 4999, "reset": 1691591363}
}`
	got, err := ParseStatus([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ResourceLimit{
		"core":        {Resource: "core", Limit: 5000, Used: 1, Remaining: 4999, Reset: time.Unix(1691591363, 0)},
		"search":      {Resource: "search", Limit: 30, Used: 12, Remaining: 18, Reset: time.Unix(1691591091, 0)},
		"graphql":     {Resource: "graphql", Limit: 5000, Used: 7, Remaining: 4993, Reset: time.Unix(1691593228, 0)},
		"code_search": {Resource: "code_search", Limit: 10, Used: 0, Remaining: 10, Reset: time.Unix(1691591091, 0)},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d resources: %v", len(got), got)
	}
	for k, w := range want {
		if g := got[k]; g != w {
			t.Errorf("%s = %+v, want %+v", k, g, w)
		}
	}
	// Only the deprecated rate object: read as core.
	got, err = ParseStatus([]byte(`{"rate":{"limit":60,"remaining":59,"reset":1700000000}}`))
	if err != nil || got["core"].Limit != 60 || got["core"].Used != 1 {
		t.Errorf("rate only: %v %v", got, err)
	}
	for _, bad := range []string{`<html>`, `{}`, `{"resources":{"core":{"limit":1}}}`} {
		if _, err := ParseStatus([]byte(bad)); err == nil {
			t.Errorf("ParseStatus(%s) accepted", bad)
		}
	}
}

func TestReadmeRequest(t *testing.T) {
	r := Defaults()
	for _, f := range []string{"ghsim=http://127.0.0.1:8080/gh"} {
		if err := r.ApplyFlag(f); err != nil {
			t.Fatal(err)
		}
	}
	cfg := mustParse(t, `
[providers.ghsim]
kind = "github"
[providers.ghe]
kind = "github"
base_url = "https://ghe.example.com/api/v3"
[providers.selfgl]
kind = "gitlab"
base_url = "https://gitlab.example.com/api/v4"
[providers.forge]
kind = "forgejo"
base_url = "https://forge.example.org/api/v1"
`)
	if err := r.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		repo, provider, url, accept string
	}{
		{"https://github.com/octo/hello", "github", "https://api.github.com/repos/octo/hello/readme", "application/vnd.github.raw"},
		{"github.com/octo/hello.git", "github", "https://api.github.com/repos/octo/hello/readme", "application/vnd.github.raw"},
		{"https://github.com/octo/hello/tree/main/docs", "github", "https://api.github.com/repos/octo/hello/readme", "application/vnd.github.raw"},
		{"https://ghe.example.com/team/tool", "ghe", "https://ghe.example.com/api/v3/repos/team/tool/readme", "application/vnd.github.raw"},
		{"http://127.0.0.1:8080/gh/o/r", "ghsim", "http://127.0.0.1:8080/gh/repos/o/r/readme", "application/vnd.github.raw"},
		{"https://gitlab.com/g/sub/p", "gitlab", "https://gitlab.com/api/v4/projects/g%2Fsub%2Fp/repository/files/README.md/raw?ref=HEAD", ""},
		{"https://gitlab.com/g/p/-/tree/main", "gitlab", "https://gitlab.com/api/v4/projects/g%2Fp/repository/files/README.md/raw?ref=HEAD", ""},
		{"https://gitlab.example.com/team/p.git", "selfgl", "https://gitlab.example.com/api/v4/projects/team%2Fp/repository/files/README.md/raw?ref=HEAD", ""},
		{"https://huggingface.co/o/m", "huggingface", "https://huggingface.co/o/m/resolve/main/README.md", ""},
		{"https://huggingface.co/gpt2", "huggingface", "https://huggingface.co/gpt2/resolve/main/README.md", ""},
		{"https://huggingface.co/gpt2/tree/main", "huggingface", "https://huggingface.co/gpt2/resolve/main/README.md", ""},
		{"https://huggingface.co/datasets/o/d", "huggingface", "https://huggingface.co/datasets/o/d/resolve/main/README.md", ""},
		{"https://huggingface.co/spaces/o/s/blob/main/app.py", "huggingface", "https://huggingface.co/spaces/o/s/resolve/main/README.md", ""},
		{"https://codeberg.org/o/r", "codeberg", "https://codeberg.org/api/v1/repos/o/r/raw/README.md", ""},
		{"https://forge.example.org/o/r/src/branch/main", "forge", "https://forge.example.org/api/v1/repos/o/r/raw/README.md", ""},
	}
	for _, tt := range tests {
		req, p, err := r.ReadmeRequest(context.Background(), tt.repo)
		if err != nil {
			t.Errorf("%s: %v", tt.repo, err)
			continue
		}
		if p.Name != tt.provider || req.Method != "GET" || req.URL.String() != tt.url || req.Header.Get("Accept") != tt.accept {
			t.Errorf("%s: %s %s %s Accept=%q\nwant %s GET %s Accept=%q", tt.repo, p.Name, req.Method, req.URL, req.Header.Get("Accept"), tt.provider, tt.url, tt.accept)
		}
		if !p.Owns(req.URL) {
			t.Errorf("%s: %s does not own %s", tt.repo, p.Name, req.URL)
		}
	}
	for repo, want := range map[string]string{
		"https://github.com/octo":            "names no owner/repo; expected e.g. https://github.com/owner/repo",
		"https://gitlab.com/justone":         "names no group/project",
		"https://huggingface.co/datasets/o":  "names no datasets repository",
		"https://bitbucket.org/o/r":          "no configured provider serves repository pages at https://bitbucket.org; known web roots: codeberg → https://codeberg.org",
		"https://codeberg.org/o":             "names no owner/repo",
		"https://huggingface.co/":            "names no repository",
		"http://user:hunter2@[bad/o/r":       "is not a URL",
		"https://api.github.com/repos/o/r/x": "no configured provider serves repository pages",
	} {
		_, _, err := r.ReadmeRequest(context.Background(), repo)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", repo, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error repeats the password", repo)
		}
	}
	corp, _ := New("corp", Generic, "https://git.example.com")
	if _, err := corp.ReadmeRequest(context.Background(), mustURL(t, "https://git.example.com/o/r")); err == nil || !strings.Contains(err.Error(), "no known repository web root") {
		t.Errorf("generic README err = %v", err)
	}
}

func TestMayRejectCredential(t *testing.T) {
	reg := Defaults()
	hf, gh := reg.Lookup("huggingface"), reg.Lookup("github")
	hfHeader := http.Header{"X-Error-Message": {"Invalid credentials in Authorization header"}}
	for _, c := range []struct {
		name   string
		p      *Provider
		status int
		h      http.Header
		body   string
		want   bool
	}{
		{"github 401", gh, 401, nil, `{"message":"Bad credentials"}`, true},
		{"github 403", gh, 403, nil, `{"message":"Bad credentials"}`, false},
		{"hf invalid credentials header", hf, 401, hfHeader, ``, true},
		{"hf invalid credentials body", hf, 401, nil, `{"error":"Invalid credentials in Authorization header"}`, true},
		{"hf repository not found", hf, 401, http.Header{"X-Error-Code": {"RepoNotFound"}}, `{"error":"Repository not found"}`, false},
	} {
		if got := c.p.MayRejectCredential(c.status, c.h, []byte(c.body)); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
