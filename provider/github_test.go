package provider

import (
	"net/http"
	"testing"
)

// GitHub's entity-tag rule, on vectors computed apart from this code.
func TestGitHubEntityTag(t *testing.T) {
	gh, err := Defaults().Get("github")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":1}`)
	cases := []struct {
		name   string
		header http.Header
		want   string
	}{
		{"Accept and Authorization", http.Header{"Accept": {"application/vnd.github+json"}, "Authorization": {"token ghp_example"}},
			`W/"ded0c4c2d3bc2056321d1bdec7f3a9bc13093574668afab738a6dc670551473d"`},
		{"Authorization and Cookie, no Accept", http.Header{"Authorization": {"token ghp_example"}, "Cookie": {"k=v"}, "User-Agent": {"x"}},
			`W/"a01077073d8d3fe117d01e6b59ccde8e95a0c94c3cad582d2d4628b650b74f17"`},
		{"none of them: the body alone", http.Header{"If-None-Match": {`W/"x"`}},
			`W/"037c9214eef74cc3887f3a4f085b4e17d76280dafd273b0ee160c09c4ba1cfd4"`},
	}
	for _, c := range cases {
		if got, ok := gh.EntityTag(c.header, body); !ok || got != c.want {
			t.Errorf("%s: %s %v, want %s", c.name, got, ok, c.want)
		}
	}
	gl, _ := New("gitlab", GitLab, "https://gitlab.com/api/v4")
	if tag, ok := gl.EntityTag(http.Header{}, body); ok || tag != "" {
		t.Errorf("GitLab: %q %v, want no rule", tag, ok)
	}
}
