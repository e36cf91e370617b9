package fetch_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

// planLines reads input text as fetch -i does and plans it.
func planLines(t *testing.T, tr *transport.Transport, text string) ([]fetch.Target, error) {
	t.Helper()
	entries, err := fetch.ReadEntries(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return fetch.Plan(entries, "requests.jsonl", false, tr.Registry())
}

// TestJSONLinesBadLines: every bad line is named with its number and what
// is wrong, and nothing is planned.
func TestJSONLinesBadLines(t *testing.T) {
	tr := client(t, ratekeeper.Options{})
	input := strings.Join([]string{
		`https://a.example/plain`,                         // 1: fine
		`{"url": "https://a.example/x", "methd": "POST"}`, // 2
		`{"url": 12}`,        // 3
		`{"method": "POST"}`, // 4
		`{"url": "https://a.example/y", "headers": ["a"]}`,       // 5
		`{"url": "https://a.example/z", "id": {"a": 1}}`,         // 6
		`{"url": "https://a.example/z"`,                          // 7
		`{"url": "https://a.example/1", "id": "k"}`,              // 8: fine
		`{"url": "https://a.example/2", "id": "k"}`,              // 9: id again
		`{"url": "https://a.example/1", "id": "k"}`,              // 10: line 8 again: dropped
		`{"url": "https://a.example/q", "method": "GE T"}`,       // 11
		`{"url": "ftp://a.example/q", "method": "POST"}`,         // 12
		`{"url": "https://a.example/b", "body": {"a": 1}} {}`,    // 13
		`{"url": "https://a.example/c", "cost": {"inputs": 5}}`,  // 14
		`{"url": "https://a.example/d", "cost": 0}`,              // 15
		`{"url": "https://a.example/e", "cost": {"tokens": -1}}`, // 16
	}, "\n")
	_, err := planLines(t, tr, input)
	var ie *fetch.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("err = %v, want an InputError", err)
	}
	want := map[int]string{
		2:  `unknown field "methd"; a JSON line has url, method, headers, body, id, cost`,
		3:  `"url" is 12, want a string`,
		4:  `no "url"`,
		5:  `"headers" is ["a"], want an object of strings`,
		6:  `"id" is {"a": 1}, want a string or a number`,
		7:  `not a JSON object`,
		9:  `id "k" is line 8's too, for another request`,
		11: `"method" is "GE T", want a method name`,
		12: `not an absolute http:// or https:// URL`,
		13: `more than one JSON value on the line`,
		14: `no bucket "inputs"`,
		15: `"cost" is 0: not positive`,
		16: `tokens is not positive`,
	}
	got := map[int]string{}
	for _, p := range ie.Problems {
		got[p.Line] = p.Err.Error()
	}
	for line, w := range want {
		if !strings.Contains(got[line], w) {
			t.Errorf("line %d: %q, want it to say %q", line, got[line], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("problems on lines %v, want those of %v", got, want)
	}
	if !strings.Contains(err.Error(), "requests.jsonl: 13 inputs cannot be fetched; nothing was submitted") || !strings.Contains(err.Error(), "\n  line 2: ") {
		t.Errorf("message:\n%v", err)
	}
}

// TestJSONLinesRequests: JSON lines and plain URLs in one file. A POST
// with a JSON body creates an issue (the body reaches the server as
// application/json), a string body goes as it is, ids are echoed, and a
// request without an id is named by method, URL and body.
func TestJSONLinesRequests(t *testing.T) {
	s := githubSim(t, "tok-alice-1")
	tr := client(t, ratekeeper.Options{
		Providers: []string{"github=" + s.URL + "/github"},
		Tokens:    map[string][]string{"github": {"tok-alice-1"}},
	})
	var (
		mu   sync.Mutex
		seen = map[string]string{} // body of each request to echo, by its id header
	)
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[r.Header.Get("X-Case")] = r.Method + " " + r.Header.Get("Content-Type") + " " + string(b)
		mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	defer echo.Close()
	issues := s.URL + "/github/repos/octo/jsonl/issues"
	input := strings.Join([]string{
		"# a mix of lines",
		s.URL + "/github/repos/octo/plain",
		fmt.Sprintf(`{"url": %q, "method": "POST", "body": {"title": "Found a bug", "body": "It crashes."}, "id": "new-issue"}`, issues),
		fmt.Sprintf(`{"url": %q, "method": "post", "headers": {"X-Case": "text"}, "body": "a=1&b=2"}`, echo.URL+"/form"),
		fmt.Sprintf(`{"url": %q, "method": "PUT", "headers": {"X-Case": "typed", "Content-Type": "application/vnd.x+json"}, "body": [1, 2], "id": 7}`, echo.URL+"/put"),
		fmt.Sprintf(`{"url": %q}`, s.URL+"/github/repos/octo/plain"), // the plain line again: one request
	}, "\n")
	targets, err := planLines(t, tr, input)
	if err != nil {
		t.Fatal(err)
	}
	if len(targets) != 4 {
		t.Fatalf("%d targets, want 4: the repeated GET is one", len(targets))
	}
	out := filepath.Join(t.TempDir(), "results.jsonl")
	j := openJournal(t, out)
	sum := run(t, sqliteDSN(t), tr, targets, j)
	j.Close()
	if sum.Written != 4 || sum.Failed != 0 || !sum.Done() {
		t.Fatalf("summary %+v", sum)
	}
	recs := readRecords(t, out)
	by := map[string]fetch.Record{}
	for _, r := range recs {
		by[string(r.ID)] = r
	}
	created := by[`"new-issue"`]
	if created.Status != http.StatusCreated || created.Method != "POST" || created.URL != issues || created.Body == nil {
		t.Fatalf("issue: %+v", created)
	}
	var issue struct {
		Title, Body string
	}
	if err := json.Unmarshal([]byte(*created.Body), &issue); err != nil || issue.Title != "Found a bug" || issue.Body != "It crashes." {
		t.Errorf("the issue created is %+v (%v): the JSON body did not reach the server", issue, err)
	}
	if p := by[""]; p.URL != s.URL+"/github/repos/octo/plain" || p.Method != "" || p.Status != 200 {
		t.Errorf("plain line: %+v", p)
	}
	text := fmt.Sprintf(`"POST %s/form sha256:`, echo.URL)
	found := false
	for id, r := range by {
		if strings.HasPrefix(id, text) && r.Method == "POST" && r.Status == 200 {
			found = true
		}
	}
	if !found {
		t.Errorf("no record named %s…; ids: %v", text, keys(by))
	}
	if r := by["7"]; r.Method != "PUT" || r.Status != 200 {
		t.Errorf("id 7: %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := seen["text"]; got != "POST  a=1&b=2" {
		t.Errorf("string body arrived as %q, want it as given, without a content type", got)
	}
	if got := seen["typed"]; got != "PUT application/vnd.x+json [1,2]" {
		t.Errorf("JSON body with its own content type arrived as %q", got)
	}

	// Run again: everything is in the output, nothing is sent.
	before := s.total()
	j = openJournal(t, out)
	sum = run(t, sqliteDSN(t), tr, targets, j)
	j.Close()
	if sum.AlreadyWritten != 4 || sum.Written != 0 || s.total() != before {
		t.Errorf("second run: %+v, %d requests; want nothing done again", sum, s.total()-before)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// pages groups paginated records by request and checks that each request
// has pages 1..n exactly once, in order, each but the last naming a next
// page; it returns the records of each request.
func pages(t *testing.T, recs []fetch.Record) map[string][]fetch.Record {
	t.Helper()
	by := map[string][]fetch.Record{}
	for _, r := range recs {
		by[r.Ident()] = append(by[r.Ident()], r)
	}
	for id, rs := range by {
		for i, r := range rs {
			if r.Page != i+1 {
				t.Errorf("%s: line %d of the request is page %d, want %d", id, i+1, r.Page, i+1)
			}
			if r.Failed() {
				t.Errorf("%s page %d failed: %s", id, r.Page, r.Error)
			}
			if last := i == len(rs)-1; last != (r.Next == nil) {
				t.Errorf("%s page %d of %d: next %+v", id, r.Page, len(rs), r.Next)
			}
		}
	}
	return by
}

// issueNumbers returns the numbers of the issues in a REST page's body.
func issueNumbers(t *testing.T, r fetch.Record) []int {
	t.Helper()
	var items []struct{ Number int }
	if r.Body == nil || json.Unmarshal([]byte(*r.Body), &items) != nil {
		t.Fatalf("page %d of %s: not a listing: %+v", r.Page, r.URL, r)
	}
	var out []int
	for _, it := range items {
		out = append(out, it.Number)
	}
	return out
}

// repoIssueTotal asks the simulator, without going through fetch, how
// many issues a repository has.
func repoIssueTotal(t *testing.T, s *simServer, repo string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL+"/github/repos/"+repo, nil)
	req.Header.Set("Authorization", "token tok-alice-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		OpenIssuesCount int `json:"open_issues_count"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r.OpenIssuesCount
}

// TestPaginateLink follows GitHub's Link rel="next" through listings of
// several sizes: every page once, numbered, every issue once.
func TestPaginateLink(t *testing.T) {
	s := githubSim(t, "tok-alice-1", "tok-bob-1")
	tr := client(t, ratekeeper.Options{
		Providers: []string{"github=" + s.URL + "/github"},
		Tokens:    map[string][]string{"github": {"tok-alice-1", "tok-bob-1"}},
	})
	repos := []string{"octo/a", "octo/b", "octo/c"}
	var lines []string
	for i, r := range repos {
		lines = append(lines, fmt.Sprintf(`{"url": "%s/github/repos/%s/issues?per_page=%d", "id": %q}`, s.URL, r, 7+i*5, r))
	}
	targets, err := planLines(t, tr, strings.Join(lines, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "results.jsonl")
	j := openJournal(t, out)
	sum := run(t, sqliteDSN(t), tr, targets, j, func(o *fetch.Options) { o.Paginate = true })
	j.Close()
	by := pages(t, readRecords(t, out))
	written := 0
	for i, r := range repos {
		total := repoIssueTotal(t, s, r)
		per := 7 + i*5
		rs := by[fmt.Sprintf(`id:%q`, r)]
		if want := (total + per - 1) / per; len(rs) != want {
			t.Errorf("%s: %d pages, want %d (%d issues, %d a page)", r, len(rs), want, total, per)
		}
		seen := map[int]bool{}
		for _, p := range rs {
			for _, n := range issueNumbers(t, p) {
				if seen[n] {
					t.Errorf("%s: issue %d twice", r, n)
				}
				seen[n] = true
			}
			if p.Page > 1 && !strings.Contains(p.PageURL, "page="+strconv.Itoa(p.Page)) {
				t.Errorf("%s page %d came from %s", r, p.Page, p.PageURL)
			}
		}
		if len(seen) != total {
			t.Errorf("%s: %d issues, want %d", r, len(seen), total)
		}
		if got := s.hits("/github/repos/" + r + "/issues"); got != len(rs) {
			t.Errorf("%s: %d requests for %d pages", r, got, len(rs))
		}
		written += len(rs)
	}
	if sum.Written != written || sum.Completed != 3 || !sum.Done() {
		t.Errorf("summary %+v, want %d lines of 3 requests", sum, written)
	}
}

// TestPaginateGraphQL follows pageInfo { hasNextPage endCursor } as gh
// api --paginate does: the query declares $endCursor, and each next page
// is the same query with variables.endCursor set.
func TestPaginateGraphQL(t *testing.T) {
	s := githubSim(t, "tok-alice-1")
	tr := client(t, ratekeeper.Options{
		Providers: []string{"github=" + s.URL + "/github"},
		Tokens:    map[string][]string{"github": {"tok-alice-1"}},
	})
	const query = `query($owner: String!, $endCursor: String) { repository(owner: $owner, name: "g") { issues(first: 9, after: $endCursor) { totalCount nodes { number } pageInfo { hasNextPage endCursor } } } }`
	line := func(owner string) string {
		b, _ := json.Marshal(map[string]any{"url": s.URL + "/github/graphql", "method": "POST", "id": owner,
			"body": map[string]any{"query": query, "variables": map[string]any{"owner": owner}}})
		return string(b)
	}
	targets, err := planLines(t, tr, line("octo")+"\n"+line("cat")+"\n")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "results.jsonl")
	j := openJournal(t, out)
	run(t, sqliteDSN(t), tr, targets, j, func(o *fetch.Options) { o.Paginate = true })
	j.Close()
	by := pages(t, readRecords(t, out))
	if len(by) != 2 {
		t.Fatalf("%d listings, want 2", len(by))
	}
	requests := 0
	for id, rs := range by {
		seen := map[int]bool{}
		total := -1
		for _, r := range rs {
			var ans struct {
				Data struct {
					Repository struct {
						Issues struct {
							TotalCount int
							Nodes      []struct{ Number int }
						}
					}
				}
				Errors []any
			}
			if r.Body == nil || json.Unmarshal([]byte(*r.Body), &ans) != nil || ans.Errors != nil {
				t.Fatalf("%s page %d: %+v", id, r.Page, r)
			}
			total = ans.Data.Repository.Issues.TotalCount
			for _, n := range ans.Data.Repository.Issues.Nodes {
				if seen[n.Number] {
					t.Errorf("%s: issue %d twice", id, n.Number)
				}
				seen[n.Number] = true
			}
			if r.Page > 1 && r.Cursor == "" {
				t.Errorf("%s page %d: no cursor", id, r.Page)
			}
		}
		if len(seen) != total || len(rs) != (total+8)/9 || len(rs) < 2 {
			t.Errorf("%s: %d issues in %d pages, want %d in %d", id, len(seen), len(rs), total, (total+8)/9)
		}
		requests += len(rs)
	}
	if got := s.hits("/github/graphql"); got != requests {
		t.Errorf("%d GraphQL requests for %d pages", got, requests)
	}
}

// TestPaginateNextPageHeader follows GitLab's X-Next-Page when there is no
// Link, and never follows a next link to another host.
func TestPaginateNextPageHeader(t *testing.T) {
	var (
		mu        sync.Mutex
		served    []string
		elsewhere int
	)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		elsewhere++
		mu.Unlock()
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.URL.RequestURI())
		mu.Unlock()
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		page = max(page, 1)
		switch r.URL.Path {
		case "/gitlab":
			if page < 4 {
				w.Header().Set("X-Next-Page", strconv.Itoa(page+1))
			} else {
				w.Header().Set("X-Next-Page", "") // GitLab's last page
			}
		case "/away":
			w.Header().Set("Link", fmt.Sprintf(`<%s/steal?page=2>; rel="next"`, other.URL))
		}
		fmt.Fprintf(w, `["page %d"]`, page)
	}))
	defer srv.Close()
	tr := client(t, ratekeeper.Options{})
	targets, err := planLines(t, tr, srv.URL+"/gitlab?per_page=2\n"+srv.URL+"/away\n")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "results.jsonl")
	j := openJournal(t, out)
	sum := run(t, sqliteDSN(t), tr, targets, j, func(o *fetch.Options) { o.Paginate = true })
	j.Close()
	recs := readRecords(t, out)
	var gl []fetch.Record
	var away *fetch.Record
	for i, r := range recs {
		if strings.HasSuffix(r.URL, "/away") {
			away = &recs[i]
		} else {
			gl = append(gl, r)
		}
	}
	for i, r := range gl {
		if r.Page != i+1 || r.Body == nil || *r.Body != fmt.Sprintf(`["page %d"]`, i+1) || r.Failed() {
			t.Errorf("GitLab listing line %d: %+v", i+1, r)
		}
		if i > 0 && r.PageURL != srv.URL+"/gitlab?page="+strconv.Itoa(i+1)+"&per_page=2" {
			t.Errorf("page %d from %s", i+1, r.PageURL)
		}
	}
	if len(gl) != 4 {
		t.Errorf("%d pages of the GitLab listing, want 4", len(gl))
	}
	if away == nil || !away.Failed() || !strings.Contains(away.Error, "another host") || away.Next != nil {
		t.Errorf("listing whose next page is elsewhere: %+v", away)
	}
	if strings.Contains(fmt.Sprint(away), "steal?page") {
		t.Errorf("the error shows the other host's query: %s", away.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if elsewhere != 0 {
		t.Errorf("the other host got %d requests", elsewhere)
	}
	if sum.Failed != 1 || sum.Written != 5 || !sum.Done() {
		t.Errorf("summary %+v", sum)
	}
}

// TestJSONLinesWritesSpaced: POSTs of a batch are writes to the
// transport, spaced as GitHub's secondary limits ask (a second apart per
// owner), however many workers run: the simulator, which refuses writes
// closer than 800 ms, sees no violation.
func TestJSONLinesWritesSpaced(t *testing.T) {
	s := startSim(t, sim.Config{APIs: []sim.APIConfig{{
		Dialect: sim.DialectGitHub, Prefix: "/github", Limit: 5000, Window: time.Hour,
		Tokens:    []sim.TokenConfig{{Token: "tok-alice-1"}},
		Secondary: &sim.SecondaryConfig{WriteSpacing: 800 * time.Millisecond},
	}}})
	tr := client(t, ratekeeper.Options{
		Providers: []string{"github=" + s.URL + "/github"},
		Tokens:    map[string][]string{"github": {"tok-alice-1"}},
		MaxWait:   10 * time.Second,
	})
	var lines []string
	for i := range 4 {
		lines = append(lines, fmt.Sprintf(`{"url": "%s/github/repos/octo/w/issues", "method": "POST", "body": {"title": "t%d"}, "id": %d}`, s.URL, i, i))
	}
	targets, err := planLines(t, tr, strings.Join(lines, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sum := run(t, sqliteDSN(t), tr, targets, fetch.NewStream(io.Discard, "stdout"))
	if sum.Failed != 0 || sum.Written != 4 {
		t.Errorf("summary %+v", sum)
	}
	if el := time.Since(start); el < 3*800*time.Millisecond {
		t.Errorf("4 writes in %v: not spaced", el)
	}
	if v := s.Stats().Total.Violations; v != 0 {
		t.Errorf("%d violations of the simulator's limits, want 0", v)
	}
}

// TestJSONLinesGraphQLPricedByPoints: a GraphQL POST of a JSON line
// reaches the transport with a body it can read again, so it is priced by
// its points before it is sent: queries of 101 points each, through a
// token of 250 points a second, are paced, none refused.
func TestJSONLinesGraphQLPricedByPoints(t *testing.T) {
	s := startSim(t, sim.Config{APIs: []sim.APIConfig{{
		Dialect: sim.DialectGitHub, Prefix: "/github", Limit: 5000, Window: time.Hour,
		Resources: map[string]sim.ResourceConfig{"graphql": {Limit: 250, Window: time.Second, WindowMode: sim.WindowFixed}},
		Tokens:    []sim.TokenConfig{{Token: "tok-alice-1"}},
		Secondary: &sim.SecondaryConfig{},
	}}})
	tr := client(t, ratekeeper.Options{
		Providers: []string{"github=" + s.URL + "/github"},
		Tokens:    map[string][]string{"github": {"tok-alice-1"}},
		MaxWait:   5 * time.Second,
	})
	// 1 + 100 + 100 × 100 requests ÷ 100: 101 points.
	const query = `{ viewer { repositories(first: 100) { nodes { issues(first: 100) { nodes { comments(first: 100) { totalCount } } } } } } }`
	var lines []string
	for i := range 5 {
		b, _ := json.Marshal(map[string]any{"url": s.URL + "/github/graphql", "method": "POST", "id": i, "body": map[string]any{"query": query}})
		lines = append(lines, string(b))
	}
	targets, err := planLines(t, tr, strings.Join(lines, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sum := run(t, sqliteDSN(t), tr, targets, fetch.NewStream(&out, "stdout"))
	if sum.Failed != 0 || sum.Written != 5 {
		t.Errorf("summary %+v\n%s", sum, out.String())
	}
	if st := s.Stats(); st.Total.Violations != 0 {
		t.Errorf("%d violations: the queries were not priced by their points", st.Total.Violations)
	}
	for _, bs := range s.Stats().Buckets {
		if bs.Resource == "graphql" && bs.Charged != 505 {
			t.Errorf("graphql charged %d points, want 5 × 101", bs.Charged)
		}
	}
}

// TestJSONLinesCostNamesBuckets: a line's "cost" is a number (the pacing
// bucket's) or each bucket's by name, passed on in X-Ratekeeper-Cost.
func TestJSONLinesCostNamesBuckets(t *testing.T) {
	tr := client(t, ratekeeper.Options{})
	targets, err := planLines(t, tr, strings.Join([]string{
		`{"url": "https://api.anthropic.com/v1/messages", "method": "POST", "cost": {"input_tokens": 1200, "output-tokens": 300, "requests": 1}}`,
		`{"url": "https://api.openai.com/v1/chat/completions", "method": "POST", "cost": 712}`,
		`{"url": "https://api.openai.com/v1/models"}`,
	}, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"input-tokens=1200, output-tokens=300, requests=1", "712", ""} {
		if got := targets[i].Request.Headers[ratekeeper.CostHeader]; got != want {
			t.Errorf("line %d: %s %q, want %q", i+1, ratekeeper.CostHeader, got, want)
		}
	}
}

// TestJSONLinesLanguageModelBatch: a batch of prompts to OpenAI is paced
// by its tokens, the cost a line gives is what it reserves (and not sent
// on), and Anthropic's overloaded answers are sent again until they
// succeed, none after its 200.
func TestJSONLinesLanguageModelBatch(t *testing.T) {
	s := startSim(t, sim.Config{Seed: 3, APIs: []sim.APIConfig{
		{Dialect: sim.DialectOpenAI, Prefix: "/openai", Limit: 1000, Window: 2 * time.Second,
			Resources: map[string]sim.ResourceConfig{"tokens": {Limit: 4000}},
			Tokens:    []sim.TokenConfig{{Token: "sk-1", Owner: "org-acme"}}},
		{Dialect: sim.DialectAnthropic, Prefix: "/anthropic", Window: 2 * time.Second,
			Faults: sim.FaultConfig{OverloadRate: 0.2}, Tokens: []sim.TokenConfig{{Token: "sk-ant-1"}}},
	}})
	tr := client(t, ratekeeper.Options{
		Providers: []string{"openai=" + s.URL + "/openai", "anthropic=" + s.URL + "/anthropic"},
		Tokens:    map[string][]string{"openai": {"sk-1"}, "anthropic": {"sk-ant-1"}},
		MaxWait:   10 * time.Second,
	})
	var lines []string
	for i := range 24 {
		body := map[string]any{"model": "gpt-4o-mini", "max_tokens": 300, "messages": []map[string]string{{"role": "user", "content": strings.Repeat("a", 400+40*(i%5))}}}
		line := map[string]any{"url": s.URL + "/openai/chat/completions", "method": "POST", "id": "o" + strconv.Itoa(i), "body": body}
		if i%6 == 0 {
			line["cost"] = 100 + 300 + 10*(i%5) // a caller's count (the server's tokenizer may count a little more)
		}
		b, _ := json.Marshal(line)
		lines = append(lines, string(b))
		b, _ = json.Marshal(map[string]any{"url": s.URL + "/anthropic/messages", "method": "POST", "id": "a" + strconv.Itoa(i), "body": body})
		lines = append(lines, string(b))
	}
	targets, err := planLines(t, tr, strings.Join(lines, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sum := run(t, sqliteDSN(t), tr, targets, fetch.NewStream(&out, "stdout"))
	if sum.Failed != 0 || sum.Written != 48 {
		t.Fatalf("summary %+v\n%s", sum, out.String())
	}
	for line := range strings.SplitSeq(strings.TrimSpace(out.String()), "\n") {
		if !strings.Contains(line, `"status":200`) {
			t.Fatalf("not answered 200 in the end: %s", line)
		}
	}
	st := s.Stats()
	oa, _ := st.BucketFor("openai", "org-acme", "tokens")
	req, _ := st.BucketFor("anthropic", "user1", "requests")
	if oa.Violations != 0 || st.Total.EarlyRetries != 0 {
		t.Errorf("openai tokens %+v, %d early retries: not paced by its tokens", oa.Counters, st.Total.EarlyRetries)
	}
	if req.Accepted != 24 || req.ServerErrors == 0 {
		t.Errorf("anthropic requests %+v: want 24 served, some after an overload, none twice", req.Counters)
	}
}
