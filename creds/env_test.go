package creds

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/provider"
)

func tokensOf(t *testing.T, pool *Pool) []string {
	t.Helper()
	var out []string
	for _, c := range pool.Credentials() {
		tok, err := c.Token(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tok)
	}
	return out
}

func TestLoad(t *testing.T) {
	gh := builtin(t, "github")
	pool, notes, err := Load(gh, Options{LookupEnv: envOf(map[string]string{
		"GITHUB_TOKEN": "tok-alice-1,tok-bot-2",
		"GH_TOKEN":     "tok-bot-2,tok-carol-3",
		"GITLAB_TOKEN": "tok-gitlab-9",
	})})
	if err != nil {
		t.Fatal(err)
	}
	if got := tokensOf(t, pool); !slices.Equal(got, []string{"tok-alice-1", "tok-bot-2", "tok-carol-3"}) {
		t.Errorf("tokens = %v", got)
	}
	var masked, sources []string
	for i, c := range pool.Credentials() {
		if c.Index() != i+1 || c.Provider() != "github" || c.Kind() != Static {
			t.Errorf("credential %d: index %d provider %s kind %s", i, c.Index(), c.Provider(), c.Kind())
		}
		masked = append(masked, c.Masked())
		sources = append(sources, c.Source())
	}
	if !slices.Equal(masked, []string{"#1 …-1", "#2 …-2", "#3 …-3"}) {
		t.Errorf("masked = %v", masked)
	}
	if !slices.Equal(sources, []string{"GITHUB_TOKEN entry #1", "GITHUB_TOKEN entry #2", "GH_TOKEN entry #2"}) {
		t.Errorf("sources = %v", sources)
	}
	if len(notes) != 1 || notes[0] != "github: GH_TOKEN entry #1 repeats GITHUB_TOKEN entry #2 (#2 …-2); using it once" {
		t.Errorf("notes = %q", notes)
	}
	for _, n := range notes {
		if strings.Contains(n, "tok-bot-2") {
			t.Errorf("note reveals a token: %s", n)
		}
	}
}

func TestLoadAnonymousFallback(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{"GITHUB_TOKEN": ""}, // set but empty: the usual "optional secret" in CI
	} {
		pool, notes, err := Load(builtin(t, "github"), Options{LookupEnv: envOf(env)})
		if err != nil {
			t.Fatal(err)
		}
		cs := pool.Credentials()
		if len(cs) != 1 || cs[0].Kind() != Anonymous || cs[0].Masked() != "#1 anonymous" || cs[0].BucketOwner() != "anonymous" {
			t.Fatalf("pool = %v", cs)
		}
		if tok, err := cs[0].Token(context.Background()); tok != "" || err != nil {
			t.Errorf("anonymous token = %q, %v", tok, err)
		}
		if len(notes) != 1 || !strings.Contains(notes[0], "no token in GITHUB_TOKEN, GH_TOKEN") || !strings.Contains(notes[0], "anonymous limits") {
			t.Errorf("notes = %q", notes)
		}
	}
}

func TestLoadPerKindEnv(t *testing.T) {
	env := envOf(map[string]string{
		"GITLAB_TOKEN":      "tok-gl",
		"HUGGINGFACE_TOKEN": "tok-hf",
		"FORGEJO_TOKEN":     "tok-fj",
		"GIT_TOKEN":         "tok-corp",
	})
	corp, err := provider.New("corp", provider.Generic, "https://git.example.com")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[*provider.Provider]string{
		builtin(t, "gitlab"):      "tok-gl",
		builtin(t, "huggingface"): "tok-hf",
		builtin(t, "codeberg"):    "tok-fj",
		corp:                      "tok-corp",
	} {
		pool, _, err := Load(p, Options{LookupEnv: env})
		if err != nil {
			t.Fatal(err)
		}
		if got := tokensOf(t, pool); !slices.Equal(got, []string{want}) {
			t.Errorf("%s: tokens %v, want %s", p.Name, got, want)
		}
	}
}

func TestLoadBadInput(t *testing.T) {
	tests := []struct {
		value, want string
	}{
		{"tok-a,,tok-b", "GITHUB_TOKEN: entry #2 is empty"},
		{"tok-a,tok-b,", "GITHUB_TOKEN: entry #3 is empty"},
		{",tok-a", "GITHUB_TOKEN: entry #1 is empty"},
		{"   ", "GITHUB_TOKEN: entry #1 is empty"},
		{"tok-a, tok-bob-22", "GITHUB_TOKEN: entry #2 (…22) has leading or trailing whitespace"},
		{"tok-alice-1\n", "GITHUB_TOKEN: entry #1 (…-1) has leading or trailing whitespace"},
		{"tok-a,ghp_test000000000000000000000000000a1b2 ", "GITHUB_TOKEN: entry #2 (ghp_…a1b2) has leading or trailing whitespace"},
		{"tok alice", "GITHUB_TOKEN: entry #1 (…ce) contains whitespace"},
		{"tok-\x7falice", "GITHUB_TOKEN: entry #1 (…ce) contains a control character"},
	}
	for _, tt := range tests {
		_, _, err := Load(builtin(t, "github"), Options{LookupEnv: envOf(map[string]string{"GITHUB_TOKEN": tt.value})})
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("GITHUB_TOKEN=%q: err = %v, want %q", tt.value, err, tt.want)
		}
	}
}
