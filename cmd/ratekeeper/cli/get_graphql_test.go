package cli

import (
	"net/url"
	"strings"
	"testing"
)

// The first pageInfo in the document's order is the one followed; a
// GraphQL query that cannot be paged is refused before it is sent.
func TestGraphQLPaging(t *testing.T) {
	data := []byte(`{"viewer":{"login":"a","repositories":{"nodes":[{"issues":{"pageInfo":{"hasNextPage":true,"endCursor":"inner"}}}],"pageInfo":{"hasNextPage":true,"endCursor":"outer"}}}}`)
	if more, cursor := pageInfo(data); !more || cursor != "inner" {
		t.Errorf("pageInfo %v %q, want the first in the document", more, cursor)
	}
	if more, _ := pageInfo([]byte(`{"viewer":{"pageInfo":{"hasNextPage":false,"endCursor":"x"}}}`)); more {
		t.Error("a last page has a next")
	}
	u, _ := url.Parse("https://api.github.com/graphql")
	if _, err := newGraphQLPaging(u, "POST", []byte(`{"query":"{ viewer { login } }"}`)); err == nil || !strings.Contains(err.Error(), "$endCursor") {
		t.Errorf("a query without $endCursor: %v", err)
	}
	g, err := newGraphQLPaging(u, "POST", []byte(`{"query":"query($endCursor: String) { x }","variables":{"n":3}}`))
	if err != nil || g == nil {
		t.Fatalf("%v %v", g, err)
	}
	next, err := g.next([]byte(`{"data":{"x":{"pageInfo":{"hasNextPage":true,"endCursor":"c1"}}}}`))
	if err != nil || !strings.Contains(string(next), `"endCursor":"c1"`) || !strings.Contains(string(next), `"n":3`) {
		t.Errorf("next page's body %s, %v", next, err)
	}
	if _, err := g.next([]byte(`{"errors":[{"type":"RATE_LIMITED","message":"API rate limit already exceeded"}]}`)); err == nil || !strings.Contains(err.Error(), "rate limit") {
		t.Errorf("an answer of errors only: %v", err)
	}
	rest, _ := url.Parse("https://api.github.com/repos/o/r/issues")
	if g, err := newGraphQLPaging(rest, "GET", nil); g != nil || err != nil {
		t.Error("a REST listing taken for GraphQL")
	}
}
