package provider

import "net/url"

// Gitea is the kind of Gitea, Forgejo and Codeberg.
const Gitea Kind = "gitea"

// CodebergAPI is the built-in codeberg provider's base URL.
const CodebergAPI = "https://codeberg.org/api/v1"

// giteaAPI is what ratekeeper knows of the Gitea and Forgejo API: a
// "token" Authorization scheme, one "api" bucket (no rate-limit headers
// by default; Codeberg limits at its proxy), "who am I" at /user, and
// tokens the gateway must refuse in a query.
type giteaAPI struct{ GenericAPI }

func (giteaAPI) Kind() Kind { return Gitea }

var giteaAliases = []string{"codeberg", "forgejo"}

func (giteaAPI) Aliases() []string { return giteaAliases }

func (giteaAPI) Builtin() Builtin { return Builtin{Name: "codeberg", BaseURL: CodebergAPI} }

func (giteaAPI) Auth() Auth { return Auth{Header: "Authorization", Prefix: "token"} }

func (giteaAPI) TokenEnv(string, *url.URL) []string {
	return []string{"CODEBERG_TOKEN", "GITEA_TOKEN", "FORGEJO_TOKEN"}
}

// WebURL is the API root without its /api/v1 suffix.
func (giteaAPI) WebURL(base *url.URL) *url.URL { return webBelow(base, "/api/v1") }

// WhoAmIURL is GET /user, answered {"login", "id"}.
func (giteaAPI) WhoAmIURL(base *url.URL) *url.URL { return below(base, "/user") }

func (giteaAPI) ParseOwner(body []byte) (Owner, error) {
	return parseOwner(body, func(v ownerJSON) string { return v.Login })
}

// ReadmeURL is GET {api}/repos/{owner}/{repo}/raw/README.md: without a
// ref, Gitea and Forgejo read the default branch.
func (giteaAPI) ReadmeURL(page RepoPage) (*url.URL, string, error) {
	owner, repo, err := page.OwnerRepo()
	if err != nil {
		return nil, "", err
	}
	return below(page.Base, "/repos/"+owner+"/"+repo+"/raw/README.md"), "", nil
}

// TokenParams are access_token and token.
func (giteaAPI) TokenParams() []string { return []string{"access_token", "token"} }
