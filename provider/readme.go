package provider

import (
	"context"
	"errors"
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
// page is repo, which must lie under the provider's web root. The API says
// which request that is (see each API's ReadmeURL):
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
	page := RepoPage{Base: clone(p.base), Web: clone(p.web), URL: repo,
		Path: segments(strings.TrimPrefix(cleanPath(repo.Path), p.webPrefix.path))}
	u, accept, err := p.api.ReadmeURL(page)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, fmt.Errorf("provider %s is %s: ratekeeper does not know its README endpoint; set kind in the config file", p.Name, p.Kind)
	}
	if err != nil {
		return nil, err
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

// RepoPage is a repository's web page under a provider's web root, as an
// [API]'s ReadmeURL is given it.
type RepoPage struct {
	Base *url.URL // the provider's API root
	Web  *url.URL // the provider's web root
	URL  *url.URL // the page
	Path []string // the page's path segments below Web
}

// OwnerRepo returns the first two segments of the page's path, the second
// without a .git suffix, for APIs that name a repository owner/repo.
func (r RepoPage) OwnerRepo() (owner, repo string, err error) {
	if len(r.Path) < 2 {
		return "", "", r.NamesNo("owner/repo")
	}
	return r.Path[0], trimGit(r.Path[1]), nil
}

// NamesNo is the error for a page whose path does not name a repository
// the way the API does: "repository URL … names no owner/repo; expected
// e.g. https://github.com/owner/repo".
func (r RepoPage) NamesNo(shape string) error {
	return fmt.Errorf("repository URL %s names no %s; expected e.g. %s/%s", r.URL.Redacted(), shape, r.Web, shape)
}

func trimGit(s string) string { return strings.TrimSuffix(s, ".git") }
