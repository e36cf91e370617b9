package sim

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
)

// gqlPost sends a GraphQL request with alice's token.
func gqlPost(c *client, query string, vars map[string]any) answer {
	c.t.Helper()
	b, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		c.t.Fatal(err)
	}
	return c.do("POST", "/graphql", "Authorization", "bearer tok-alice-1", string(b))
}

// The cost GitHub documents ("Calculating a rate limit score"): one
// request per unique connection and parent node, ÷ 100, rounded, at least
// 1 — on GitHub's published examples and queries priced by hand.
func TestGraphQLCost(t *testing.T) {
	cases := []struct {
		name, query string
		vars        map[string]any
		op          string
		cost        int64
	}{
		{"no connection", `{ viewer { login } }`, nil, "", 1},
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
		{"sizes from variables and defaults", `query Q($n: Int!, $m: Int = 9) { viewer { repositories(first: $n) { nodes {
		    issues(first: $m) { nodes { labels(last: 1) { nodes { name } } } } } } } }`, map[string]any{"n": 100}, "", 10},
		{"sizes from defaults: 1 + 100 + 3,000 requests", `query($n: Int = 100, $m: Int = 30) { viewer { repositories(first: $n) { nodes {
		    issues(first: $m) { nodes { labels(first: 5) { totalCount } } } } } } }`, nil, "", 31},
		{"a sent variable overrides its default: 1 + 10 + 300 requests", `query($n: Int = 100, $m: Int = 30) { viewer { repositories(first: $n) { nodes {
		    issues(first: $m) { nodes { labels(first: 5) { totalCount } } } } } } }`, map[string]any{"n": 10}, "", 3},
		{"an object default before the selection: 1 + 100 + 2,000 requests", `query Q($order: IssueOrder = {field: CREATED_AT, direction: DESC}, $n: Int! = 100) {
		    viewer { repositories(first: $n) { nodes { issues(first: 20, orderBy: $order) { nodes { comments(last: 1) { totalCount } } } } } } }`, nil, "", 21},
		{"the named operation's own defaults: 1 + 100 + 4,000 requests", `query A($n: Int = 1) { viewer { repositories(first: $n) { totalCount } } }
		  query B($n: Int = 100) { viewer { repositories(first: $n) { nodes { issues(first: 40) { nodes { labels(first: 1) { totalCount } } } } } } }`, nil, "B", 41},
		{"through a fragment", `query { viewer { ...R } } fragment R on User { repositories(first: 100) { nodes { issues(first: 20) { totalCount } } } }`, nil, "", 1},
		{"a minified spread: 1 + 100 + 5,000 requests", `{viewer{login...R}}fragment R on User{repositories(first:100){nodes{issues(first:50){nodes{labels(first:10){totalCount}}}}}}`, nil, "", 51},
		{"fragments nested in fragments, declared first: 1 + 100 + 2,000 requests", `fragment I on Repository { issues(first: 20) { nodes { ...L } } }
		  fragment L on Issue { labels(first: 100) { totalCount } }
		  query { viewer { repositories(first: 100) { nodes { ...I } } } }`, nil, "", 21},
		{"inline fragments: 1 + 100 + 100 requests", `{ search(type: ISSUE, query: "is:open", first: 100) { nodes {
		    ... on Issue { comments(first: 100) { totalCount } } ... on PullRequest { reviews(first: 100) { totalCount } } } } }`, nil, "", 2},
		{"a connection selected again through a fragment is one: 1 + 100 + 5,000 requests", `query { viewer {
		    repositories(first: 100) { totalCount nodes { issues(first: 50) { totalCount } } } ...R } }
		  fragment R on User { repositories(first: 100) { nodes { issues(first: 50) { nodes { labels(first: 10) { totalCount } } } } } }`, nil, "", 51},
		{"aliases: 2 × (1 + 100 + 6,000) requests", `{ viewer {
		    a: repositories(first: 100) { nodes { issues(first: 60) { totalCount } } }
		    b: repositories(first: 100) { nodes { issues(first: 60) { nodes { labels(first: 1) { totalCount } } } } } } }`, nil, "", 62},
		{"one key twice: 1 + 100 + 6,000 requests", `{ viewer {
		    repositories(first: 100) { nodes { issues(first: 60) { totalCount } } }
		    repositories(first: 100) { nodes { issues(first: 60) { nodes { labels(first: 1) { totalCount } } } } } } }`, nil, "", 61},
		{"149 requests round down", `{ viewer { repositories(first: 100) { nodes { issues(first: 1) { totalCount } } }
		    starredRepositories(first: 47) { nodes { issues(first: 1) { totalCount } } } } }`, nil, "", 1},
		{"150 requests round up", `{ viewer { repositories(first: 100) { nodes { issues(first: 1) { totalCount } } }
		    starredRepositories(first: 48) { nodes { issues(first: 1) { totalCount } } } } }`, nil, "", 2},
		{"four levels: 1 + 10 + 100 + 1,000 requests", `query($a: Int = 10) { viewer { repositories(first: $a) { nodes { issues(last: 10) { nodes {
		    comments(first: 10) { nodes { reactions(first: 10) { totalCount } } } } } } } } }`, nil, "", 11},
		{"deep nesting saturates instead of overflowing", `{ a(first: 100) { b(first: 100) { c(first: 100) { d(first: 100) { e(first: 100) { f(first: 100) { g(first: 100) {
		    h(first: 100) { i(first: 100) { j(first: 100) { k(first: 100) { totalCount } } } } } } } } } } } }`, nil, "", (1<<40 + 50) / 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := parseGraphQL(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			op, err := doc.operation(tc.op)
			if err != nil {
				t.Fatal(err)
			}
			if cost, _ := doc.gqlCost(op, op.variables(tc.vars)); cost != tc.cost {
				t.Errorf("cost %d, want %d", cost, tc.cost)
			}
		})
	}
}

// Points, not requests: x-ratelimit-used rises by each query's cost, the
// answer's rateLimit says it, a query the points left cannot pay is a 200
// RATE_LIMITED, and mutations spend 5 of the GraphQL secondary budget.
func TestGraphQLChargesPoints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := githubServer(t, func(a *APIConfig) {
			a.Resources = map[string]ResourceConfig{"graphql": {Limit: 30}}
			a.Secondary = &SecondaryConfig{PointsPerMinute: 2, GraphQLPointsPerMinute: 10}
		})
		c := newClient(t, srv)
		const q = `query($n: Int!) { viewer { repositories(first: 100) { nodes { issues(first: $n) { totalCount } } } } rateLimit { cost remaining used resetAt nodeCount } }`
		a := gqlPost(c, q, map[string]any{"n": 10}) // 1 + 100 requests: 1 point
		rl := a.json(t)["data"].(map[string]any)["rateLimit"].(map[string]any)
		if a.h("X-RateLimit-Used") != "1" || rl["cost"] != 1.0 || rl["remaining"] != 29.0 || rl["nodeCount"] != 1100.0 {
			t.Errorf("first: used %s, rateLimit %v", a.h("X-RateLimit-Used"), rl)
		}
		a = gqlPost(c, `query { viewer { repositories(first: 100) { nodes { issues(first: 10) { nodes { labels(first: 1) { totalCount } } } } } } }`, nil)
		if a.status != 200 || a.h("X-RateLimit-Used") != "12" || a.h("X-RateLimit-Remaining") != "18" || !strings.Contains(a.body, `"data"`) {
			t.Errorf("cost 11: %d used %s remaining %s %.100s", a.status, a.h("X-RateLimit-Used"), a.h("X-RateLimit-Remaining"), a.body)
		}
		// 18 left pay one more of 11, not two: the second is refused.
		gqlPost(c, `query { viewer { repositories(first: 100) { nodes { issues(first: 10) { nodes { labels(first: 1) { totalCount } } } } } } }`, nil)
		a = gqlPost(c, `query { viewer { repositories(first: 100) { nodes { issues(first: 10) { nodes { labels(first: 1) { totalCount } } } } } } }`, nil)
		if a.status != 200 || !strings.Contains(a.body, `"type":"RATE_LIMITED"`) {
			t.Errorf("over the points left: %d %s", a.status, a.body)
		}
		gh, _ := srv.Stats().BucketFor("github", "alice", "graphql")
		if gh.Charged != 23 || gh.PrimaryViolations != 1 {
			t.Errorf("graphql bucket: charged %d (want 23 points), refusals %d", gh.Charged, gh.PrimaryViolations)
		}
		// The GraphQL secondary budget of 10 holds these 4 queries (1
		// each), a mutation (5) and one more query; REST's budget of 2 is
		// its own.
		if a := c.do("POST", "/graphql", "Authorization", "bearer tok-alice-1", `{"query":"mutation { addStar(input: {clientMutationId: \"x\"}) { clientMutationId } }"}`); a.status != 200 || !strings.Contains(a.body, `{"data":{"addStar":{"clientMutationId":"x"}}}`) {
			t.Errorf("mutation: %d %s", a.status, a.body)
		}
		c.get("/repos/o/r", "tok-alice-1")
		c.get("/repos/o/r", "tok-alice-1")
		if a := gqlPost(c, `{ viewer { login } }`, nil); a.status != 200 {
			t.Errorf("GraphQL after REST spent its budget: %d %s", a.status, a.body)
		}
		if a := gqlPost(c, `{ viewer { login } }`, nil); a.status != 403 || !strings.Contains(a.body, "secondary rate limit") {
			t.Errorf("over the GraphQL budget: %d %s", a.status, a.body)
		}
	})
}

// Pagination follows pageInfo and the after cursor, as GitHub's does; the
// content is REST's (a touch of the issues listing changes both).
func TestGraphQLPagination(t *testing.T) {
	srv := githubServer(t, nil)
	c := newClient(t, srv)
	const q = `query($endCursor: String) { repository(owner: "o", name: "r") { nameWithOwner issues(first: 50, after: $endCursor) { totalCount nodes { number title } pageInfo { hasNextPage endCursor } } } }`
	total := ghIssueTotal("o", "r", 0)
	var cursor any
	seen := 0
	for page := 0; ; page++ {
		var out struct {
			Data struct {
				Repository struct {
					NameWithOwner string
					Issues        struct {
						TotalCount int
						Nodes      []struct{ Number int }
						PageInfo   struct {
							HasNextPage bool
							EndCursor   *string
						}
					}
				}
			}
		}
		mustJSON(t, gqlPost(c, q, map[string]any{"endCursor": cursor}).body, &out)
		is := out.Data.Repository.Issues
		if out.Data.Repository.NameWithOwner != "o/r" || is.TotalCount != total {
			t.Fatalf("page %d: %+v", page, out)
		}
		for _, n := range is.Nodes {
			seen++
			if n.Number != seen {
				t.Fatalf("issue %d at place %d", n.Number, seen)
			}
		}
		if !is.PageInfo.HasNextPage {
			break
		}
		cursor = *is.PageInfo.EndCursor
	}
	if seen != total {
		t.Errorf("%d issues paginated, want %d", seen, total)
	}
	for _, bad := range []struct{ query, want string }{
		{`{ repository(owner: "o", name: "r") { issues { totalCount } } }`, "You must provide a `first` or `last` value"},
		{`{ repository(owner: "o", name: "r") { issues(first: 101) { totalCount } } }`, "exceeds the `first` limit of 100"},
		{`{ viewer { nope } }`, `Field 'nope' doesn't exist on type 'User'`},
		{`{ viewer { login }`, "Parse error"},
	} {
		if a := gqlPost(c, bad.query, nil); a.status != 200 || !strings.Contains(a.body, bad.want) || strings.Contains(a.body, `"data"`) {
			t.Errorf("%s: %d %s", bad.query, a.status, a.body)
		}
	}
}
