package provider

import (
	"net/url"
	"strings"
)

// RepoOwner returns the account owning the repository (or organisation,
// group, namespace) a request's URL is about, in lower case, and the
// repository's name when the URL names one: what decides which
// credentials can see the request (a GitHub App installation sees only its
// account's repositories; a fine-grained token, a GitLab group token, only
// some). owner is "" for a URL about no repository (/user, /search, a
// generic API): any credential serves it.
func (p *Provider) RepoOwner(u *url.URL) (owner, repo string) {
	esc := u.EscapedPath()
	if base := strings.TrimSuffix(p.base.EscapedPath(), "/"); base != "" {
		rest, ok := strings.CutPrefix(esc, base)
		if !ok {
			return "", ""
		}
		esc = rest
	}
	owner, repo = p.api.RepoOwner(esc)
	return strings.ToLower(owner), repo
}

// escapedSegments splits an escaped path below the base into its unescaped
// segments, dropping empty ones; nil when one does not unescape.
func escapedSegments(esc string) []string {
	var out []string
	for _, s := range strings.Split(esc, "/") {
		if s == "" {
			continue
		}
		v, err := url.PathUnescape(s)
		if err != nil {
			return nil
		}
		out = append(out, v)
	}
	return out
}

// RepoOwner: /repos/OWNER/REPO/..., /orgs/ORG/... (an organisation's own
// resources, seen by its installation).
func (githubAPI) RepoOwner(esc string) (string, string) {
	s := escapedSegments(esc)
	switch {
	case len(s) >= 3 && s[0] == "repos":
		return s[1], s[2]
	case len(s) >= 2 && s[0] == "orgs":
		return s[1], ""
	}
	return "", ""
}

// RepoOwner: /projects/NAMESPACE%2FNAME/... (the namespace, subgroups
// included; a numeric project id names no owner), /groups/GROUP/....
func (gitlabAPI) RepoOwner(esc string) (string, string) {
	s := escapedSegments(strings.TrimPrefix(esc, "/api/v4"))
	switch {
	case len(s) >= 2 && s[0] == "projects":
		if i := strings.LastIndexByte(s[1], '/'); i > 0 {
			return s[1][:i], s[1][i+1:]
		}
	case len(s) >= 2 && s[0] == "groups":
		if !isDigits(s[1]) {
			return s[1], ""
		}
	}
	return "", ""
}

// RepoOwner: /api/models|datasets|spaces/OWNER/NAME/....
func (huggingFaceAPI) RepoOwner(esc string) (string, string) {
	s := escapedSegments(esc)
	if len(s) >= 4 && s[0] == "api" && (s[1] == "models" || s[1] == "datasets" || s[1] == "spaces") {
		return s[2], s[3]
	}
	return "", ""
}

// RepoOwner: a generic API names no owner.
func (GenericAPI) RepoOwner(string) (string, string) { return "", "" }

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}
