package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/cmd/ratekeeper/cli"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/store/sqlite"
)

// TestEveryCommandRefusesADamagedDatabase is the acceptance test of the
// damaged database: a SQLite file used by fetch and get, 8 KiB of garbage
// written in its middle, then every command that takes --db run against
// it. Each refuses within seconds, exit status 1, saying that the file is
// damaged and what to do; none sends a request, serves, or writes to the
// file. The table of commands must name every command that has a --db
// flag, so a new one cannot miss the check.
func TestEveryCommandRefusesADamagedDatabase(t *testing.T) {
	s := startRecordingSim(t, sim.APIConfig{Dialect: sim.DialectGitHub, Prefix: "/github",
		Tokens: []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}}, Limit: 5000, Window: time.Hour})
	dir := t.TempDir()
	db := filepath.Join(dir, "rk.db")
	env := []string{"GITHUB_TOKEN=tok-alice-1"}
	provider := "github=" + s.URL + "/github"
	url := s.URL + "/github/repos/o/r"
	usedDatabase(t, env, dir, db, provider, s.URL)
	damage(t, db)
	sum := fileSum(t, db)
	sent := len(s.pathsHit(""))

	commands := map[string][]string{
		"fetch":          {"fetch", "--db", db, "--provider", provider, "-o", filepath.Join(dir, "new.jsonl"), url},
		"get":            {"get", "--db", db, "--provider", provider, url},
		"poll":           {"poll", "--db", db, "--provider", provider, url},
		"poll --durable": {"poll", "--durable", "--db", db, "--provider", provider, url},
		"serve":          {"serve", "--db", db, "--provider", provider, "--listen", "127.0.0.1:0"},
		"status":         {"status", "--db", db, "--provider", provider},
		"tasks cancel":   {"tasks", "--db", db, "cancel", "1"},
		"tasks get":      {"tasks", "--db", db, "get", "1"},
		"tasks history":  {"tasks", "--db", db, "history", "1"},
		"tasks list":     {"tasks", "--db", db, "list"},
		"tasks migrate":  {"tasks", "--db", db, "migrate"},
		"tasks submit":   {"tasks", "--db", db, "submit", "-t", "http", "-i", `{"url":"` + url + `"}`},
		"tasks worker":   {"tasks", "--db", db, "worker", "--provider", provider},
	}
	for _, path := range commandsWithDB(cli.NewRoot()) {
		if _, ok := commands[path]; !ok {
			t.Errorf("ratekeeper %s takes --db but is not in this test's table", path)
		}
	}
	want := "ratekeeper: --db " + db + " is damaged (SQLite's quick_check: "
	for name, args := range commands {
		code, stderr, took := runBounded(t, env, 30*time.Second, args...)
		if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "cannot be trusted, so ") {
			t.Errorf("%s: exit %d after %v, stderr:\n%s\nwant exit 1 saying %q and what to do", name, code, took.Round(time.Millisecond), stderr, want)
		}
	}
	if n := len(s.pathsHit("")); n != sent {
		t.Errorf("%d requests sent with a damaged database, want none", n-sent)
	}
	if fileSum(t, db) != sum {
		t.Error("a command wrote to the damaged file")
	}
}

// usedDatabase fills db as a user would: a fetch of 300 URLs, then a get.
func usedDatabase(t *testing.T, env []string, dir, db, provider, base string) {
	t.Helper()
	var urls strings.Builder
	for i := range 300 {
		fmt.Fprintf(&urls, "%s/github/repos/o/r%03d\n", base, i)
	}
	input := filepath.Join(dir, "urls.txt")
	if err := os.WriteFile(input, []byte(urls.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, env, "fetch", "--db", db, "--provider", provider, "-i", input, "-o", filepath.Join(dir, "out.jsonl"), "--progress", "off")
	mustRun(t, env, "get", "--db", db, "--provider", provider, base+"/github/repos/o/r")
	// No free pages: the garbage lands on pages SQLite reads.
	conn, err := sqlite.OpenDB(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Exec("VACUUM"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
}

// damage writes 8 KiB of garbage in the middle of the file, as a bad disk
// or a stray write would, and checks that SQLite sees it.
func damage(t *testing.T, db string) {
	t.Helper()
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < 64<<10 {
		t.Fatalf("%s holds %d bytes: too small to damage its middle", db, fi.Size())
	}
	junk := make([]byte, 8<<10)
	r := rand.New(rand.NewPCG(22, 4))
	for i := range junk {
		junk[i] = byte(r.Uint32())
	}
	f, err := os.OpenFile(db, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(junk, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var d *sqlite.DamagedError
	if err := sqlite.Check(context.Background(), db); !errors.As(err, &d) {
		t.Fatalf("after the damage SQLite's check says %v; the test proves nothing", err)
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// commandsWithDB lists the paths (below the root) of the commands that run
// and take --db, their own or inherited.
func commandsWithDB(root *cobra.Command) []string {
	var out []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.Runnable() && c != root && (c.Flags().Lookup("db") != nil || c.InheritedFlags().Lookup("db") != nil) {
			out = append(out, strings.TrimPrefix(c.CommandPath(), root.Name()+" "))
		}
	}
	walk(root)
	slices.Sort(out)
	return out
}

// runBounded runs the binary and returns its exit status and stderr,
// killing it after limit (a command that should have refused and serves
// instead).
func runBounded(t *testing.T, env []string, limit time.Duration, args ...string) (int, string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("ratekeeper %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String(), time.Since(start)
}
