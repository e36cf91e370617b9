package provider

import (
	"net/url"
	"strings"
)

// GitLab is the kind of gitlab.com and self-managed GitLab.
const GitLab Kind = "gitlab"

// GitLabAPI is the built-in gitlab provider's base URL.
const GitLabAPI = "https://gitlab.com/api/v4"

// gitlabAPI is what ratekeeper knows of GitLab's REST API: a token in
// PRIVATE-TOKEN from GITLAB_TOKEN, one "api" bucket (its headers show only
// the most restrictive throttle), "who am I" at /user, project paths
// with encoded slashes, and tokens the gateway must refuse in a query.
type gitlabAPI struct{ GenericAPI }

func (gitlabAPI) Kind() Kind { return GitLab }

func (gitlabAPI) Builtin() Builtin { return Builtin{Name: "gitlab", BaseURL: GitLabAPI} }

// Auth puts personal, project and group access tokens in PRIVATE-TOKEN;
// OAuth tokens need Authorization: Bearer (set auth_header and
// auth_prefix in the config file).
func (gitlabAPI) Auth() Auth { return Auth{Header: "PRIVATE-TOKEN"} }

func (gitlabAPI) TokenEnv(string, *url.URL) []string { return []string{"GITLAB_TOKEN"} }

// WebURL is the API root without its /api/v4 suffix.
func (gitlabAPI) WebURL(base *url.URL) *url.URL { return webBelow(base, "/api/v4") }

// WhoAmIURL is GET /user, answered {"username", "id"}.
func (gitlabAPI) WhoAmIURL(base *url.URL) *url.URL { return below(base, "/user") }

func (gitlabAPI) ParseOwner(body []byte) (Owner, error) {
	return parseOwner(body, func(v ownerJSON) string { return v.Username })
}

// ReadmeURL is GET {api}/projects/{url-encoded group/…/project}/repository/files/README.md/raw?ref=HEAD:
// ref=HEAD names the default branch (older GitLab versions require a
// ref). A project path may have nested groups; GitLab ends it at "/-/".
func (gitlabAPI) ReadmeURL(page RepoPage) (*url.URL, string, error) {
	proj := page.Path
	for i, s := range proj {
		if s == "-" {
			proj = proj[:i]
			break
		}
	}
	if len(proj) < 2 {
		return nil, "", page.NamesNo("group/project")
	}
	proj[len(proj)-1] = trimGit(proj[len(proj)-1])
	id := strings.Join(proj, "/")
	const tail = "/repository/files/README.md/raw"
	u := below(page.Base, "/projects/"+id+tail)
	// The project path travels as one segment, its slashes encoded.
	u.RawPath = page.Base.EscapedPath() + "/projects/" + url.PathEscape(id) + tail
	u.RawQuery = "ref=HEAD"
	return u, "", nil
}

// Group is the GitLab API a request belongs to, for the per-endpoint
// limits GitLab enforces without announcing them while they are not
// exceeded: issue creation and project export (their own limits), and the
// Users, Projects and Groups APIs. Anything else has none: a refusal
// there is the main throttle's.
func (gitlabAPI) Group(method, rel string) string {
	segs := segments(rel)
	if len(segs) == 0 {
		return ""
	}
	switch {
	case method == "POST" && len(segs) == 3 && segs[0] == "projects" && segs[2] == "issues":
		return "POST /projects/*/issues"
	case method == "POST" && len(segs) == 3 && segs[0] == "projects" && segs[2] == "export":
		return "POST /projects/*/export"
	}
	switch segs[0] {
	case "users", "projects", "groups":
		return "/" + segs[0] + "/*"
	}
	return ""
}

// EncodedSlashes: GitLab's API documents project and file paths with
// encoded slashes, such as /projects/group%2Fproject.
func (gitlabAPI) EncodedSlashes() bool { return true }

// TokenParams are private_token, access_token and job_token.
func (gitlabAPI) TokenParams() []string {
	return []string{"private_token", "access_token", "job_token"}
}
