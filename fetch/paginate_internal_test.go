package fetch

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/tasks"
)

func TestLinkNext(t *testing.T) {
	tests := []struct {
		values []string
		want   string
	}{
		{[]string{`<https://a/x?page=2>; rel="next", <https://a/x?page=9>; rel="last"`}, "https://a/x?page=2"},
		{[]string{`<https://a/x?page=1>; rel="prev"`, `<https://a/x?page=3>; rel="next"`}, "https://a/x?page=3"},
		{[]string{`<https://a/x?page=3>; title="a, b; c"; REL="prev next"`}, "https://a/x?page=3"},
		{[]string{`<https://a/x?page=3>; rel=next`}, "https://a/x?page=3"},
		{[]string{`<https://a/x?page=1>; rel="first"`}, ""},
		{[]string{`garbage`, `<unterminated; rel="next"`}, ""},
		{nil, ""},
	}
	for _, tt := range tests {
		got, ok := linkNext(tt.values)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("linkNext(%q) = %q, %v; want %q", tt.values, got, ok, tt.want)
		}
	}
}

func TestEndCursor(t *testing.T) {
	tests := []struct {
		body string
		want string
	}{
		{`{"data":{"repository":{"issues":{"nodes":[{"pageInfo":"not this"}],"pageInfo":{"hasNextPage":true,"endCursor":"Y3"}}}}}`, "Y3"},
		{`{"data":{"a":{"pageInfo":{"endCursor":"c1","hasNextPage":false}},"b":{"pageInfo":{"hasNextPage":true,"endCursor":"c2"}}}}`, ""},
		{`{"data":{"a":{"pageInfo":{"hasNextPage":true}},"b":{"pageInfo":{"hasNextPage":true,"endCursor":"c2"}}}}`, "c2"},
		{`{"data":{"a":{"pageInfo":{"hasNextPage":false,"endCursor":null}}}}`, ""},
		{`{"data":{"a":{"items":[{"x":{"pageInfo":{"hasNextPage":true,"endCursor":"deep"}}}]}}}`, "deep"},
		{`{"data":null}`, ""},
		{`not json`, ""},
	}
	for _, tt := range tests {
		got, ok := endCursor([]byte(tt.body))
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("endCursor(%s) = %q, %v; want %q", tt.body, got, ok, tt.want)
		}
	}
}

func TestNextPage(t *testing.T) {
	gql := tasks.HTTPInput{URL: "https://api.example/graphql", Method: "POST",
		Body: `{"query":"query($endCursor: String) { x(after: $endCursor) { pageInfo { hasNextPage endCursor } } }","variables":{"endCursor":"c1","n":3}}`}
	body := func(s string) *tasks.HTTPResult { return &tasks.HTTPResult{Status: 200, Body: &s} }

	next, err := nextPage(gql, body(`{"data":{"x":{"pageInfo":{"hasNextPage":true,"endCursor":"c2"}}}}`))
	if err != nil || next == nil || next.Cursor != "c2" {
		t.Fatalf("next = %+v, %v", next, err)
	}
	in, err := pageRequest(gql, *next)
	if err != nil || !strings.Contains(in.Body, `"variables":{"endCursor":"c2","n":3}`) || !strings.Contains(in.Body, `"query":"query($endCursor`) {
		t.Errorf("next page's request: %s, %v", in.Body, err)
	}
	if _, err := nextPage(gql, body(`{"data":{"x":{"pageInfo":{"hasNextPage":true,"endCursor":"c1"}}}}`)); err == nil || !strings.Contains(err.Error(), "again") {
		t.Errorf("a cursor that repeats this page's: %v, want an error", err)
	}
	if _, err := nextPage(gql, body(`{"data":null,"errors":[{"type":"RATE_LIMITED","message":"API rate limit exceeded"}]}`)); err == nil || !strings.Contains(err.Error(), "RATE_LIMITED") {
		t.Errorf("an answer of errors only: %v, want the listing flagged", err)
	}
	if next, err := nextPage(gql, body(`{"data":{"x":{"pageInfo":{"hasNextPage":false,"endCursor":"c9"}}}}`)); err != nil || next != nil {
		t.Errorf("last page: %+v, %v", next, err)
	}

	rest := tasks.HTTPInput{URL: "https://gitlab.example/api/v4/projects/1/issues?per_page=5"}
	h := http.Header{}
	h.Set("X-Next-Page", "4")
	next, err = nextPage(rest, &tasks.HTTPResult{Status: 200, Headers: h})
	if err != nil || next == nil || next.URL != "https://gitlab.example/api/v4/projects/1/issues?page=4&per_page=5" {
		t.Errorf("X-Next-Page: %+v, %v", next, err)
	}
	h.Set("Link", `</api/v4/projects/1/issues?page=7&per_page=5>; rel="next"`)
	next, err = nextPage(rest, &tasks.HTTPResult{Status: 200, Headers: h})
	if err != nil || next == nil || next.URL != "https://gitlab.example/api/v4/projects/1/issues?page=7&per_page=5" {
		t.Errorf("a relative Link, before X-Next-Page: %+v, %v", next, err)
	}
	h.Set("Link", `<http://gitlab.example/api/v4/projects/1/issues?page=7&private_token=s3cret>; rel="next"`)
	if next, err = nextPage(rest, &tasks.HTTPResult{Status: 200, Headers: h}); err == nil || next != nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a next page on another scheme: %+v, %v; want it refused, without its query", next, err)
	}
}
