package provider

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// ReadmeRequest builds the API request that fetches, as raw text, the README
// of the repository whose web page is repoURL ("https://github.com/o/r", or
// "github.com/o/r" without a scheme), and returns the provider that serves it.
// The repository is found by the longest web-root prefix among the configured
// providers, so self-hosted instances work as well as the built-in hosts.
func (r *Registry) ReadmeRequest(ctx context.Context, repoURL string) (*http.Request, *Provider, error) {
	raw := strings.TrimSpace(repoURL)
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, nil, fmt.Errorf("repository URL %q is not a URL; expected e.g. https://github.com/owner/repo", redactURL(repoURL))
	}
	p := r.MatchWeb(u)
	if p == nil {
		var roots []string
		for _, q := range r.providers {
			if q.web != nil {
				roots = append(roots, q.Name+" → "+q.web.String())
			}
		}
		return nil, nil, fmt.Errorf("no configured provider serves repository pages at %s://%s; known web roots: %s",
			u.Scheme, u.Host, strings.Join(roots, ", "))
	}
	req, err := p.ReadmeRequest(ctx, u)
	return req, p, err
}

// ReadmeRequest builds the request for the README of the repository whose web
// page is repo, which must lie under the provider's web root:
//
//	github       GET {api}/repos/{owner}/{repo}/readme with Accept: application/vnd.github.raw
//	             (GitHub picks whichever README file the repository has)
//	gitlab       GET {api}/projects/{url-encoded group/…/project}/repository/files/README.md/raw?ref=HEAD
//	             (ref=HEAD names the default branch; older GitLab versions require a ref)
//	huggingface  GET {base}/{repo id}/resolve/main/README.md, with datasets/ and spaces/ kept
//	             in the repo id (a model card is README.md on the main branch)
//	gitea        GET {api}/repos/{owner}/{repo}/raw/README.md
//	             (without ref, Gitea and Forgejo read the default branch)
//
// GitLab, Hugging Face and Gitea are asked for README.md by name, so a
// repository whose README has another name answers 404.
func (p *Provider) ReadmeRequest(ctx context.Context, repo *url.URL) (*http.Request, error) {
	if p.webPrefix == nil {
		return nil, fmt.Errorf("provider %s (kind %s) has no known repository web root; set web_url and kind in the config file", p.Name, p.Kind)
	}
	if _, ok := p.webPrefix.match(repo); !ok {
		return nil, fmt.Errorf("repository URL %s is not under %s's web root %s", repo.Redacted(), p.Name, p.web)
	}
	seg := segments(strings.TrimPrefix(cleanPath(repo.Path), p.webPrefix.path))
	example := p.web.String() + "/owner/repo"
	var u *url.URL
	accept := ""
	switch p.Kind {
	case GitHub:
		if len(seg) < 2 {
			return nil, fmt.Errorf("repository URL %s names no owner/repo; expected e.g. %s", repo.Redacted(), example)
		}
		u = withPath(p.base, p.base.Path+"/repos/"+seg[0]+"/"+trimGit(seg[1])+"/readme")
		accept = "application/vnd.github.raw"
	case GitLab:
		// A project path may have nested groups; GitLab ends it at "/-/".
		proj := seg
		for i, s := range seg {
			if s == "-" {
				proj = seg[:i]
				break
			}
		}
		if len(proj) < 2 {
			return nil, fmt.Errorf("repository URL %s names no group/project; expected e.g. %s", repo.Redacted(), strings.Replace(example, "owner/repo", "group/project", 1))
		}
		proj[len(proj)-1] = trimGit(proj[len(proj)-1])
		id := strings.Join(proj, "/")
		const tail = "/repository/files/README.md/raw"
		u = withPath(p.base, p.base.Path+"/projects/"+id+tail)
		// The project path travels as one segment, its slashes encoded.
		u.RawPath = p.base.EscapedPath() + "/projects/" + url.PathEscape(id) + tail
		u.RawQuery = "ref=HEAD"
	case HuggingFace:
		id, err := huggingFaceRepoID(seg)
		if err != nil {
			return nil, fmt.Errorf("repository URL %s: %v; expected e.g. %s", repo.Redacted(), err, example)
		}
		u = withPath(p.base, p.base.Path+"/"+id+"/resolve/main/README.md")
	case Gitea:
		if len(seg) < 2 {
			return nil, fmt.Errorf("repository URL %s names no owner/repo; expected e.g. %s", repo.Redacted(), example)
		}
		u = withPath(p.base, p.base.Path+"/repos/"+seg[0]+"/"+trimGit(seg[1])+"/raw/README.md")
	default:
		return nil, fmt.Errorf("provider %s is generic: ratekeeper does not know its README endpoint; set kind in the config file", p.Name)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	return req, nil
}

// huggingFaceRepoID extracts "owner/name", "datasets/owner/name" or
// "spaces/owner/name" (or a legacy single-segment model id) from a Hub page's
// path segments.
func huggingFaceRepoID(seg []string) (string, error) {
	if len(seg) == 0 {
		return "", fmt.Errorf("names no repository")
	}
	if seg[0] == "datasets" || seg[0] == "spaces" {
		if len(seg) < 3 {
			return "", fmt.Errorf("names no %s repository (owner/name)", seg[0])
		}
		return seg[0] + "/" + seg[1] + "/" + seg[2], nil
	}
	if len(seg) == 1 || isHubPageSegment(seg[1]) {
		return seg[0], nil // legacy model ids have no owner, e.g. gpt2
	}
	return seg[0] + "/" + seg[1], nil
}

// isHubPageSegment reports whether s is a sub-page of a Hub repository rather
// than the second half of its id.
func isHubPageSegment(s string) bool {
	switch s {
	case "tree", "blob", "resolve", "raw", "commits", "commit", "discussions", "settings":
		return true
	}
	return false
}

func trimGit(s string) string { return strings.TrimSuffix(s, ".git") }
