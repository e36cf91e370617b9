package provider

import (
	"net/url"
	"testing"
)

func TestRepoOwner(t *testing.T) {
	gh, _ := New("ghes", GitHub, "https://ghe.example/api/v3")
	gl, _ := New("gitlab", GitLab, "https://gitlab.example")
	hf, _ := New("hf", HuggingFace, "https://huggingface.co")
	gen, _ := New("x", Generic, "https://x.example")
	for _, c := range []struct {
		p           *Provider
		url         string
		owner, repo string
	}{
		{gh, "https://ghe.example/api/v3/repos/Acme/App/issues?page=2", "acme", "App"},
		{gh, "https://ghe.example/api/v3/orgs/Globex/repos", "globex", ""},
		{gh, "https://ghe.example/api/v3/user", "", ""},
		{gh, "https://ghe.example/api/v3/users/dora/events", "", ""},
		{gh, "https://ghe.example/api/v3/repos/acme", "", ""},
		{gl, "https://gitlab.example/api/v4/projects/Group%2Fsub%2Fproj/merge_requests", "group/sub", "proj"},
		{gl, "https://gitlab.example/api/v4/projects/42", "", ""},
		{gl, "https://gitlab.example/api/v4/groups/team/projects", "team", ""},
		{hf, "https://huggingface.co/api/models/Org/model/revision/main", "org", "model"},
		{gen, "https://x.example/repos/a/b", "", ""},
	} {
		u, _ := url.Parse(c.url)
		o, r := c.p.RepoOwner(u)
		if o != c.owner || r != c.repo {
			t.Errorf("%s: RepoOwner = %q, %q; want %q, %q", c.url, o, r, c.owner, c.repo)
		}
	}
}
