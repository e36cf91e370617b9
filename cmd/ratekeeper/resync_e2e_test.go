package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/sim"
)

// TestFetchSinceRevalidates is the acceptance test of re-syncs through the
// built binary: a list fetched once, a few of its resources changed, and
// the list fetched again with --since the first output — with another
// token of the same user, as after a rotation. Only the changed URLs are
// charged (and the new token's "who am I"); every unchanged line repeats
// the first run's answer, marked not_modified; the changed ones are new.
func TestFetchSinceRevalidates(t *testing.T) {
	const n = 40
	s := startRecordingSim(t, sim.APIConfig{Dialect: sim.DialectGitHub, Prefix: "/github",
		Tokens: []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}, {Token: "tok-alice-2", Owner: "alice"}}})
	dir := t.TempDir()
	var urls strings.Builder
	for i := range n {
		// Users' answers fit inline, repositories' go to body files.
		if i%2 == 0 {
			fmt.Fprintf(&urls, "%s/github/repos/o/r%02d\n", s.URL, i)
		} else {
			fmt.Fprintf(&urls, "%s/github/users/u%02d\n", s.URL, i)
		}
	}
	input := filepath.Join(dir, "urls.txt")
	if err := os.WriteFile(input, []byte(urls.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "rk.db")
	common := []string{"-i", input, "--db", db, "--provider", "github=" + s.URL + "/github", "--progress", "lines", "--progress-every", "1h", "--inline-limit", "500"}
	first, second := filepath.Join(dir, "first.jsonl"), filepath.Join(dir, "second.jsonl")
	if r := startFetch(t, dir, append(common, "-o", first)...); r.wait(t) != 0 {
		t.Fatalf("first run:\n%s", r.output.String())
	}
	changed := map[string]bool{}
	for _, i := range []int{4, 10, 26} { // repositories: a touch changes them
		path := fmt.Sprintf("/github/repos/o/r%02d", i)
		if err := s.srv.Touch(path); err != nil {
			t.Fatal(err)
		}
		changed[s.URL+path] = true
	}
	before := s.srv.Stats().Total
	r := startFetchAs(t, dir, "tok-alice-2", append(common, "-o", second, "--since", first)...)
	if r.wait(t) != 0 {
		t.Fatalf("re-sync:\n%s", r.output.String())
	}
	after := s.srv.Stats().Total
	// Nothing is spent on the new token, alone in its pool: no owner is
	// asked, only the changed URLs are charged.
	if charged := after.Charged - before.Charged; charged != int64(len(changed)) {
		t.Errorf("the re-sync was charged %d requests, want the %d changed\n%s", charged, len(changed), r.output.String())
	}
	if !strings.Contains(r.output.String(), fmt.Sprintf("%d unchanged since the previous run", n-len(changed))) {
		t.Errorf("summary does not say how many were unchanged:\n%s", r.output.String())
	}
	old, now := outputRecords(t, first), outputRecords(t, second)
	files := 0
	for u, rec := range now {
		prev := old[u]
		if changed[u] {
			if rec["not_modified"] == true || rec["sha256"] == prev["sha256"] || rec["status"] != 200.0 {
				t.Errorf("%s changed: %v", u, rec)
			}
			continue
		}
		if rec["not_modified"] != true {
			t.Errorf("%s unchanged but not marked not_modified: %v", u, rec)
		}
		for _, k := range []string{"url", "status", "etag", "sha256", "size", "body", "body_file"} {
			if fmt.Sprint(rec[k]) != fmt.Sprint(prev[k]) {
				t.Errorf("%s: %s %v, the previous run had %v", u, k, rec[k], prev[k])
			}
		}
		if rec["body_file"] != nil {
			files++
		}
	}
	if len(now) != n || files == 0 || files == n-len(changed) {
		t.Errorf("%d lines (%d unchanged with a body file); want %d, inline bodies and files both", len(now), files, n)
	}
}
