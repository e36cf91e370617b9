package provider

import (
	"encoding/json"
	"testing"
)

// graphqlPriceCases are queries priced by hand with GitHub's method
// ("Calculating a rate limit score"): the requests each connection needs
// (the product of its parent connections' sizes), summed, ÷ 100, rounded
// to the nearest whole number, at least 1.
var graphqlPriceCases = []struct {
	name, query string
	vars        map[string]any
	op          string
	cost        int
}{
	// GitHub's published examples.
	{"GitHub's score example: 1 + 100 + 5,000 requests", `query {
	  viewer { login repositories(first: 100) { edges { node { id
	    issues(first: 50) { edges { node { id labels(first: 60) { edges { node { id name } } } } } } } } } } }`, nil, "", 51},
	{"GitHub's simple node-limit example: 1 + 50 requests", `query { viewer { repositories(first: 50) { edges { repository:node { name
	    issues(first: 10) { totalCount edges { node { title bodyHTML } } } } } } } }`, nil, "", 1},
	{"GitHub's complex node-limit example: 1 + 50 + 1,000 + 50 + 1,000 + 1 requests", `query { viewer {
	    repositories(first: 50) { edges { repository:node { name
	      pullRequests(first: 20) { edges { pullRequest:node { title comments(first: 10) { edges { comment:node { bodyHTML } } } } } }
	      issues(first: 20) { totalCount edges { issue:node { title bodyHTML comments(first: 10) { edges { comment:node { bodyHTML } } } } } } } } }
	    followers(first: 10) { edges { follower:node { login } } } } }`, nil, "", 21},

	// Defaults: a variable left out of variables takes its declared default.
	{"sizes from defaults: 1 + 100 + 3,000 requests", `query($n: Int = 100, $m: Int = 30) { viewer { repositories(first: $n) { nodes {
	    issues(first: $m) { nodes { labels(first: 5) { totalCount } } } } } } }`, nil, "", 31},
	{"a sent variable overrides its default: 1 + 10 + 300 requests", `query($n: Int = 100, $m: Int = 30) { viewer { repositories(first: $n) { nodes {
	    issues(first: $m) { nodes { labels(first: 5) { totalCount } } } } } } }`, map[string]any{"n": 10}, "", 3},
	{"an object default before the selection: 1 + 100 + 2,000 requests", `query Q($order: IssueOrder = {field: CREATED_AT, direction: DESC}, $n: Int! = 100) {
	    viewer { repositories(first: $n) { nodes { issues(first: 20, orderBy: $order) { nodes { comments(last: 1) { totalCount } } } } } } }`, nil, "", 21},
	{"the named operation's own defaults: 1 + 100 + 4,000 requests", `query A($n: Int = 1) { viewer { repositories(first: $n) { totalCount } } }
	  query B($n: Int = 100) { viewer { repositories(first: $n) { nodes { issues(first: 40) { nodes { labels(first: 1) { totalCount } } } } } } }`, nil, "B", 41},

	// Fragments: named (declared before or after) and inline.
	{"a minified spread: 1 + 100 + 5,000 requests", `{viewer{login...R}}fragment R on User{repositories(first:100){nodes{issues(first:50){nodes{labels(first:10){totalCount}}}}}}`, nil, "", 51},
	{"fragments nested in fragments, declared first: 1 + 100 + 2,000 requests", `fragment I on Repository { issues(first: 20) { nodes { ...L } } }
	  fragment L on Issue { labels(first: 100) { totalCount } }
	  query { viewer { repositories(first: 100) { nodes { ...I } } } }`, nil, "", 21},
	{"inline fragments: 1 + 100 + 100 requests", `{ search(type: ISSUE, query: "is:open", first: 100) { nodes {
	    ... on Issue { comments(first: 100) { totalCount } } ... on PullRequest { reviews(first: 100) { totalCount } } } } }`, nil, "", 2},
	{"a connection selected again through a fragment is one: 1 + 100 + 5,000 requests", `query { viewer {
	    repositories(first: 100) { totalCount nodes { issues(first: 50) { totalCount } } } ...R } }
	  fragment R on User { repositories(first: 100) { nodes { issues(first: 50) { nodes { labels(first: 10) { totalCount } } } } } }`, nil, "", 51},

	// Aliases: a field under another key is another connection; the same
	// key selected twice is one.
	{"aliases: 2 × (1 + 100 + 6,000) requests", `{ viewer {
	    a: repositories(first: 100) { nodes { issues(first: 60) { totalCount } } }
	    b: repositories(first: 100) { nodes { issues(first: 60) { nodes { labels(first: 1) { totalCount } } } } } } }`, nil, "", 62},
	{"one key twice: 1 + 100 + 6,000 requests", `{ viewer {
	    repositories(first: 100) { nodes { issues(first: 60) { totalCount } } }
	    repositories(first: 100) { nodes { issues(first: 60) { nodes { labels(first: 1) { totalCount } } } } } } }`, nil, "", 61},

	// Nested multiplication and rounding, by hand.
	{"149 requests round down", `{ viewer { repositories(first: 100) { nodes { issues(first: 1) { totalCount } } }
	    starredRepositories(first: 47) { nodes { issues(first: 1) { totalCount } } } } }`, nil, "", 1},
	{"150 requests round up", `{ viewer { repositories(first: 100) { nodes { issues(first: 1) { totalCount } } }
	    starredRepositories(first: 48) { nodes { issues(first: 1) { totalCount } } } } }`, nil, "", 2},
	{"four levels: 1 + 10 + 100 + 1,000 requests", `query($a: Int = 10) { viewer { repositories(first: $a) { nodes { issues(last: 10) { nodes {
	    comments(first: 10) { nodes { reactions(first: 10) { totalCount } } } } } } } } }`, nil, "", 11},
	{"deep nesting saturates instead of overflowing", `{ a(first: 100) { b(first: 100) { c(first: 100) { d(first: 100) { e(first: 100) { f(first: 100) { g(first: 100) {
	    h(first: 100) { i(first: 100) { j(first: 100) { k(first: 100) { totalCount } } } } } } } } } } } }`, nil, "", (1<<40 + 50) / 100},
	{"no connection", `{ viewer { login } }`, nil, "", 1},
}

// The client prices every case as worked out by hand.
func TestPriceGraphQL(t *testing.T) {
	for _, c := range graphqlPriceCases {
		t.Run(c.name, func(t *testing.T) {
			body, err := json.Marshal(map[string]any{"query": c.query, "variables": c.vars, "operationName": c.op})
			if err != nil {
				t.Fatal(err)
			}
			q, ok := priceGraphQL(body)
			if !ok || q.Units != c.cost {
				t.Errorf("priced %d (%v), want %d", q.Units, ok, c.cost)
			}
		})
	}
}

// One text with sizes that price differently is two shapes: a cost learnt
// for one never stands in for the other. Spacing and values that do not
// change the price leave the shape alone.
func TestGraphQLShapeCarriesPrice(t *testing.T) {
	const q = `query($n: Int = 100, $c: String) { viewer { repositories(first: $n, after: $c) { nodes { issues(first: 30) { nodes { labels(first: 1) { totalCount } } } } } } }`
	shape := func(query string, vars map[string]any) string {
		body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
		s, _ := priceGraphQL(body)
		return s.Shape
	}
	if shape(q, nil) == shape(q, map[string]any{"n": 1}) {
		t.Error("a query priced 31 and the same text priced 1 share a shape")
	}
	if a, b := shape(q, map[string]any{"c": "x"}), shape("query($n: Int = 100, $c: String) {\n viewer { repositories(first: $n, after: $c) { nodes { issues(first: 30) { nodes { labels(first: 1) { totalCount } } } } } } }", map[string]any{"c": "y"}); a != b {
		t.Errorf("one query with another cursor and spacing: shapes %q and %q", a, b)
	}
}

// Pricing reads any text without failing: a price of at least 1.
func FuzzPriceGraphQL(f *testing.F) {
	for _, c := range graphqlPriceCases {
		f.Add(c.query)
	}
	f.Fuzz(func(t *testing.T, query string) {
		body, err := json.Marshal(map[string]any{"query": query})
		if err != nil {
			return
		}
		if q, ok := priceGraphQL(body); ok && q.Units < 1 {
			t.Errorf("priced %d", q.Units)
		}
	})
}
