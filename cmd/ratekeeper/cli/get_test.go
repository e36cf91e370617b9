package cli

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

// startSim serves a simulated GitHub with two tokens of one owner and one
// of another, and points GITHUB_TOKEN at them plus an invalid one.
func startSim(t *testing.T) (*sim.Server, string) {
	t.Helper()
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: 100, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}, {Token: "tok-alice-2", Owner: "alice"}, {Token: "tok-bob-1", Owner: "bob"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Setenv("GITHUB_TOKEN", "tok-alice-1,tok-alice-2,tok-bob-1,tok-wrong-9")
	t.Setenv("GH_TOKEN", "")
	t.Setenv("RATEKEEPER_DB", filepath.Join(t.TempDir(), "rk.db"))
	return srv, ts.URL
}

func TestGet(t *testing.T) {
	srv, url := startSim(t)
	out, stderr, code := run(t, "", "get", "--provider", "github="+url, url+"/repos/golang/go", "-v")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var repo map[string]any
	if err := json.Unmarshal([]byte(out), &repo); err != nil || repo["full_name"] != "golang/go" {
		t.Fatalf("body %q (%v)", out, err)
	}
	if !strings.Contains(stderr, "200 OK via #") || strings.Contains(stderr, "tok-") {
		t.Fatalf("verbose output: %s", stderr)
	}
	if v := srv.Stats().Total.Violations; v != 0 {
		t.Fatalf("%d violations", v)
	}
}

func TestGetPaginate(t *testing.T) {
	_, url := startSim(t)
	out, stderr, code := run(t, "", "get", "--provider", "github="+url, "--paginate", url+"/repos/o/r/issues?per_page=7")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var items []map[string]any
	if err := json.Unmarshal([]byte(out), &items); err != nil {
		t.Fatalf("not one JSON array: %v", err)
	}
	// The simulator's repositories have a fixed number of issues; every
	// page but the last is full and no issue repeats.
	seen := map[float64]bool{}
	for _, it := range items {
		n := it["number"].(float64)
		if seen[n] {
			t.Fatalf("issue %v twice", n)
		}
		seen[n] = true
	}
	if len(items) <= 7 {
		t.Fatalf("only %d items: pagination not followed", len(items))
	}
}

func TestGetErrors(t *testing.T) {
	_, url := startSim(t)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"get", "ftp://x"}, 2, "not an http(s) URL"},
		{[]string{"get", "--provider", "gh=ftp://x", url}, 2, "--provider gh=ftp://x"},
		{[]string{"get", "--policy", "fast", url}, 2, "unknown policy"},
		{[]string{"get", "-H", "nocolon", url}, 2, "--header"},
		{[]string{"get", "--provider", "github=" + url, url + "/nope/nope"}, 1, "404"},
	}
	for _, c := range cases {
		_, stderr, code := run(t, "", c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d with %q", c.args, code, stderr, c.code, c.want)
		}
	}
	t.Setenv("GITHUB_TOKEN", "tok-alice-1, tok-bob-1")
	_, stderr, code := run(t, "", "get", url)
	if code != 2 || !strings.Contains(stderr, "GITHUB_TOKEN") || strings.Contains(stderr, "tok-bob-1") {
		t.Fatalf("padded token: exit %d, %q", code, stderr)
	}
}

func TestStatusFromTheDatabaseSpendsNothing(t *testing.T) {
	srv, url := startSim(t)
	if _, stderr, code := run(t, "", "get", "--policy", "greedy", "--provider", "github="+url, url+"/repos/o/r"); code != 0 {
		t.Fatalf("get: exit %d: %s", code, stderr)
	}
	charged := srv.Stats().Total.Charged
	out, stderr, code := run(t, "", "status", "--provider", "github="+url, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if srv.Stats().Total.Requests != charged && srv.Stats().Total.Charged != charged {
		t.Fatal("status without --live spent quota")
	}
	var rep transport.StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	// The get spent one request: nothing to learn whose bucket its
	// token spends (the first answer placed it), so no owner is named.
	first := rep.Credentials[0]
	if first.Owner != "" || len(first.Resources) == 0 || *first.Resources[0].Remaining != 99 {
		t.Fatalf("the database did not carry what the get learnt: %+v", first)
	}
	// A new process knows the bucket without learning it again. (Its
	// answer is fresh in the shared cache for a minute: no-cache makes
	// it ask.)
	before := srv.Stats().Total.Requests
	if _, stderr, code := run(t, "", "get", "--policy", "greedy", "--provider", "github="+url, "-H", "Cache-Control: no-cache", url+"/repos/o/r"); code != 0 {
		t.Fatalf("second get: exit %d: %s", code, stderr)
	}
	st := srv.Stats().Total
	if st.Requests-before != 1 || st.NotModified != 1 {
		t.Fatalf("second get sent %d requests (%d not modified); want one free revalidation", st.Requests-before, st.NotModified)
	}
}

func TestStatusLive(t *testing.T) {
	_, url := startSim(t)
	out, stderr, code := run(t, "", "status", "--live", "--provider", "github="+url, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep transport.StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Credentials) != 4 {
		t.Fatalf("%d credentials", len(rep.Credentials))
	}
	owners := map[string]int{}
	for _, c := range rep.Credentials {
		owners[c.State+" "+strings.Fields(c.Owner + " -")[0]]++
		if c.State == "available" && len(c.Resources) == 0 {
			t.Fatalf("%s has no resources", c.Credential)
		}
	}
	if owners["available alice"] != 2 || owners["available bob"] != 1 || owners["invalid -"] != 1 {
		t.Fatalf("owners %v", owners)
	}
	if strings.Contains(out, "tok-") {
		t.Fatal("token text in status output")
	}
	human, _, code := run(t, "", "status", "--provider", "github="+url)
	if code != 0 || !strings.Contains(human, "HEALTHY") || !strings.Contains(human, "invalid") {
		t.Fatalf("human status:\n%s", human)
	}
}
