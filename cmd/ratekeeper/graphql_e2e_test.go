package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/sim"
)

// TestGetPaginatesGraphQL drives the built binary as `gh api graphql
// --paginate` is used: a query taking $endCursor, followed through each
// answer's pageInfo until the last page; then `status` shows the GraphQL
// bucket in points, as the server counted them.
func TestGetPaginatesGraphQL(t *testing.T) {
	s := startRecordingSim(t, sim.APIConfig{Dialect: sim.DialectGitHub, Prefix: "/github",
		Tokens: []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}}})
	db := filepath.Join(t.TempDir(), "rk.db")
	env := []string{"GITHUB_TOKEN=tok-alice-1"}
	provider := "github=" + s.URL + "/github"
	// 1 + 3 + 3 × 50 requests a page: 2 points each.
	const query = `query($endCursor: String) { repository(owner: "o", name: "r") { issues(first: 3, after: $endCursor) { totalCount nodes { number comments(first: 50) { nodes { author { repositories(first: 10) { totalCount } } } } } pageInfo { hasNextPage endCursor } } } }`
	body, _ := json.Marshal(map[string]any{"query": query})
	out := mustRun(t, env, "get", "--db", db, "--provider", provider, "--paginate", "-d", string(body), s.URL+"/github/graphql")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	seen := 0
	total := 0
	for _, line := range lines {
		var page struct {
			Data struct {
				Repository struct {
					Issues struct {
						TotalCount int
						Nodes      []struct{ Number int }
					}
				}
			}
		}
		if err := json.Unmarshal([]byte(line), &page); err != nil {
			t.Fatalf("page %q: %v", line, err)
		}
		total = page.Data.Repository.Issues.TotalCount
		for _, n := range page.Data.Repository.Issues.Nodes {
			if seen++; n.Number != seen {
				t.Fatalf("issue %d at place %d", n.Number, seen)
			}
		}
	}
	if pages := (total + 2) / 3; total == 0 || seen != total || len(lines) != pages || pages < 2 {
		t.Fatalf("%d pages holding %d issues, want %d pages holding %d", len(lines), seen, pages, total)
	}
	b, _ := s.srv.Stats().BucketFor("github", "alice", "graphql")
	if want := int64(2 * len(lines)); b.Charged != want || b.Violations != 0 {
		t.Errorf("graphql bucket charged %d points with %d refusals, want %d and 0", b.Charged, b.Violations, want)
	}
	var rep struct {
		Credentials []struct {
			Resources []struct {
				Resource  string
				Remaining *int64
				Unit      string
			}
		}
	}
	if err := json.Unmarshal([]byte(mustRun(t, env, "status", "--db", db, "--provider", provider, "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range rep.Credentials {
		for _, r := range c.Resources {
			if r.Resource == "graphql" {
				found = r.Unit == "points" && r.Remaining != nil && *r.Remaining == 5000-b.Charged
			}
		}
	}
	if !found {
		t.Errorf("status shows no graphql bucket of %d points left: %+v", 5000-b.Charged, rep)
	}
}
