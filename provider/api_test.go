package provider

import (
	"net/url"
	"strings"
	"testing"
)

func TestKnownKinds(t *testing.T) {
	want := "github, gitlab, huggingface (alias hf), gitea (aliases codeberg, forgejo), openai, anthropic, generic"
	if got := KnownKinds(); got != want {
		t.Errorf("KnownKinds() = %q, want %q", got, want)
	}
}

// renamed is an API whose names are set by the test, to try Register's
// checks.
type renamed struct {
	GenericAPI
	kind    Kind
	aliases []string
	builtin Builtin
}

func (a renamed) Kind() Kind        { return a.kind }
func (a renamed) Aliases() []string { return a.aliases }
func (a renamed) Builtin() Builtin  { return a.builtin }

// No name may mean two things: a kind, an alias of a kind, a built-in
// provider's name or spelling each belong to one API.
func TestRegisterRefusesTakenNames(t *testing.T) {
	for _, c := range []struct {
		api  renamed
		want string
	}{
		{renamed{kind: "github"}, `kind name "github" is taken by kind github`},
		{renamed{kind: "generic"}, `kind name "generic" is taken by kind generic`},
		{renamed{kind: "bitbucket", aliases: []string{"forgejo"}}, `kind name "forgejo" is taken by kind gitea`},
		{renamed{kind: "bitbucket", builtin: Builtin{Name: "codeberg", BaseURL: "https://bitbucket.example"}}, `provider name "codeberg" is taken by the built-in provider codeberg`},
		{renamed{kind: "bitbucket", builtin: Builtin{Name: "bitbucket", BaseURL: "https://bitbucket.example", Aliases: []string{"HF"}}}, `provider name "HF" is taken by the built-in provider huggingface`},
		{renamed{kind: "bitbucket", builtin: Builtin{Name: "bitbucket", BaseURL: "bitbucket.example"}}, `kind bitbucket: built-in provider bitbucket: base URL "bitbucket.example" has no scheme`},
		{renamed{kind: "bitbucket", builtin: Builtin{Name: "bitbucket", BaseURL: "https://API.github.com/"}}, `base URL https://api.github.com is the built-in provider github's`},
		{renamed{kind: "Bit Bucket"}, `kind "Bit Bucket" may contain only`},
	} {
		err := Register(c.api)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Register(%+v) = %v, want an error saying %q", c.api, err, c.want)
		}
	}
	if got := KnownKinds(); strings.Contains(got, "bitbucket") {
		t.Errorf("a refused API is known: %s", got)
	}
}

// New takes an alias for its kind and stores the kind itself.
func TestNewNormalisesKind(t *testing.T) {
	p, err := New("fj", "forgejo", "https://git.example.com/api/v1")
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != Gitea || p.Auth.Prefix != "token" || p.WebURL().String() != "https://git.example.com" {
		t.Errorf("New(fj, forgejo) = %s, auth %+v, web %v", p, p.Auth, p.WebURL())
	}
	if _, err := New("x", "bitbucket", "https://x.example"); err == nil || !strings.Contains(err.Error(), "known kinds: github") {
		t.Errorf("New with an unknown kind: %v", err)
	}
}

// Every built-in API's provider owns the endpoints its API names, and
// answers each question the way its kind's table in the package
// documentation says.
func TestBuiltinAPIsAnswerForTheirProviders(t *testing.T) {
	r := Defaults()
	for _, c := range []struct {
		name, whoAmI, status, graphql, web string
		apps, slashes                      bool
		params                             string
	}{
		{"github", "/user", "/rate_limit", "/graphql", "https://github.com", true, false, ""},
		{"gitlab", "/user", "", "", "https://gitlab.com", false, true, "private_token access_token job_token"},
		{"huggingface", "/api/whoami-v2", "", "", "https://huggingface.co", false, false, ""},
		{"codeberg", "/user", "", "", "https://codeberg.org", false, false, "access_token token"},
	} {
		p := r.Lookup(c.name)
		base := p.BaseURL().String()
		for what, got := range map[string]*url.URL{"who am I": first(p.ValidationURL()), "status": first(p.StatusURL()), "graphql": p.GraphQLURL()} {
			want := map[string]string{"who am I": c.whoAmI, "status": c.status, "graphql": c.graphql}[what]
			switch {
			case want == "" && got != nil:
				t.Errorf("%s: %s URL %s, want none", c.name, what, got)
			case want != "" && (got == nil || got.String() != base+want || !p.Owns(got)):
				t.Errorf("%s: %s URL %v, want %s%s, owned", c.name, what, got, base, want)
			}
		}
		if p.WebURL().String() != c.web || p.SupportsApps() != c.apps || p.AllowsEncodedSlashes() != c.slashes ||
			strings.Join(p.TokenParams(), " ") != c.params {
			t.Errorf("%s: web %s, apps %v, encoded slashes %v, token params %q; want %s, %v, %v, %q",
				c.name, p.WebURL(), p.SupportsApps(), p.AllowsEncodedSlashes(), p.TokenParams(), c.web, c.apps, c.slashes, c.params)
		}
	}
}

func first(u *url.URL, _ bool) *url.URL { return u }
