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

// GitHub's published formula, on its own example and a few more, and the
// shape that names a query apart from its variables.
func TestClassifyGraphQL(t *testing.T) {
	gh, err := Defaults().Get("github")
	if err != nil {
		t.Fatal(err)
	}
	u := gh.GraphQLURL()
	cases := []struct {
		name, body string
		units      int
		write      bool
	}{
		{"no connection", `{"query":"{ viewer { login } }"}`, 1, false},
		{"GitHub's example: 1 + 100 + 5,000 requests", `{"query":"query { viewer { login repositories(first: 100) { edges { node { id issues(first: 50) { edges { node { id labels(first: 60) { edges { node { id name } } } } } } } } } } }"}`, 51, false},
		{"sizes from variables", `{"query":"query Q($n: Int!) { viewer { repositories(first: $n) { nodes { issues(first: 9, orderBy: {field: CREATED_AT, direction: DESC}) { nodes { labels(last: 1) { nodes { name } } } } } } } }","variables":{"n":100}}`, 10, false},
		{"through a fragment", `{"query":"query { viewer { ...R } } fragment R on User { repositories(first: 100) { nodes { issues(first: 20) { totalCount } } } }"}`, 1, false},
		{"a fragment's connections multiply", `{"query":"query { viewer { repositories(first: 100) { nodes { ...I } } } } fragment I on Repository { issues(first: 100) { nodes { ... on Issue { comments(first: 10) { totalCount } } } } }"}`, 101, false},
		{"aliases: 2 × 101 requests", `{"query":"{ a: repository(owner: \"o\", name: \"r\") { issues(first: 100) { nodes { comments(first: 100) { totalCount } } } } b: repository(owner: \"o\", name: \"s\") { issues(first: 100) { nodes { comments(first: 100) { totalCount } } } } }"}`, 2, false},
		{"a mutation", `{"query":"mutation { addStar(input: {starrableId: \"x\"}) { clientMutationId } }"}`, 1, true},
		{"the named operation", `{"query":"query A { viewer { repositories(first: 100) { nodes { issues(first: 100) { totalCount } } } } } mutation B { addStar(input: {}) { clientMutationId } }","operationName":"B"}`, 1, true},
	}
	for _, c := range cases {
		r := gh.Classify(http.MethodPost, u)
		if !gh.ClassifyGraphQL(&r, []byte(c.body)) || r.Units != c.units || r.Write != c.write || (c.write && r.Points != 5) {
			t.Errorf("%s: units %d, write %v, points %d; want %d and %v", c.name, r.Units, r.Write, r.Points, c.units, c.write)
		}
	}
	shape := func(body string) string {
		r := gh.Classify(http.MethodPost, u)
		gh.ClassifyGraphQL(&r, []byte(body))
		return r.Shape
	}
	a := shape(`{"query":"query($c: String) {\n  viewer { login }\n}","variables":{"c":"x"}}`)
	if b := shape(`{"query":"query($c: String) { viewer { login } }","variables":{"c":"y"}}`); a != b || a == "" {
		t.Errorf("one query with other variables and spacing: shapes %q and %q", a, b)
	}
	if b := shape(`{"query":"query($c: String) { viewer { name } }"}`); a == b {
		t.Error("two queries share a shape")
	}
	r := gh.Classify(http.MethodGet, gh.BaseURL())
	if gh.ClassifyGraphQL(&r, []byte(`{"query":"{ viewer { login } }"}`)) || r.Units != 0 {
		t.Error("a REST request classified as GraphQL")
	}
	if cost, ok := GraphQLCost([]byte(`{"data":{"viewer":{"login":"a"},"rateLimit":{"cost":7,"remaining":4990}}}`)); !ok || cost != 7 {
		t.Errorf("GraphQLCost: %d %v, want 7", cost, ok)
	}
	if _, ok := GraphQLCost([]byte(`{"data":{"viewer":{"login":"a"}}}`)); ok {
		t.Error("a cost read from an answer that states none")
	}
}
