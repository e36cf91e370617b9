package fetch_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/cmd/ratekeeper/cli"
	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/store/storetest"
)

// childEnv makes the test binary run the ratekeeper command line instead of
// the tests: the crash test starts it as a child process it can kill.
const childEnv = "RATEKEEPER_BATCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(cli.Execute(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// simServer is a simulator on a loopback port, counting the requests
// served on every path so that tests can tell what was fetched again.
type simServer struct {
	*sim.Server
	URL string

	mu     sync.Mutex
	counts map[string]int
	// started counts the requests that reached the server, and inFlight
	// those it has not answered yet.
	started, inFlight int
	// refused counts the answers 403 and 429 among those counted.
	refused int
}

// refusals returns how many answers were 403 or 429.
func (s *simServer) refusals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// flight returns how many requests reached the server, and how many of
// them it has not answered yet.
func (s *simServer) flight() (started, inFlight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started, s.inFlight
}

func startSim(t *testing.T, cfg sim.Config) *simServer {
	t.Helper()
	srv, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &simServer{Server: srv, counts: map[string]int{}}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		s.mu.Lock()
		s.started++
		s.inFlight++
		s.mu.Unlock()
		srv.ServeHTTP(rec, r)
		s.mu.Lock()
		s.inFlight--
		switch rec.status {
		case http.StatusUnauthorized:
		case http.StatusForbidden, http.StatusTooManyRequests:
			s.refused++
			s.counts[r.URL.Path]++
		default:
			s.counts[r.URL.Path]++
		}
		s.mu.Unlock()
	}))
	t.Cleanup(ts.Close)
	s.URL = ts.URL
	return s
}

// statusRecorder remembers the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// hits returns how often path was served: answered with anything but 401
// (a request with a rejected token is refused, not served, and the client
// sends it again with another).
func (s *simServer) hits(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[path]
}

// total returns the number of requests served on paths other than the
// simulator's own.
func (s *simServer) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for p, c := range s.counts {
		if p != "/_stats" {
			n += c
		}
	}
	return n
}

// githubSim serves the GitHub dialect at /github with one token per owner
// and a limit that does not bind.
func githubSim(t *testing.T, tokens ...string) *simServer {
	var tc []sim.TokenConfig
	for _, tok := range tokens {
		tc = append(tc, sim.TokenConfig{Token: tok})
	}
	return startSim(t, sim.Config{APIs: []sim.APIConfig{{
		Dialect: sim.DialectGitHub, Prefix: "/github", Tokens: tc, Limit: 5000, Window: time.Hour,
	}}})
}

// repoURLs returns n URLs of distinct repositories on the simulator.
func repoURLs(base string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s/github/repos/octo/repo-%d", base, i+1)
	}
	return out
}

// readRecords reads an output file and checks that every line is a record.
func readRecords(t *testing.T, path string) []fetch.Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseRecords(t, b)
}

func parseRecords(t testing.TB, b []byte) []fetch.Record {
	t.Helper()
	var out []fetch.Record
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 4<<20)
	for n := 1; sc.Scan(); n++ {
		var r fetch.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("output line %d is not a record: %v: %q", n, err, sc.Text())
		}
		out = append(out, r)
	}
	return out
}

// onceEach checks that records hold each of urls exactly once and nothing
// else, and returns them by URL.
func onceEach(t *testing.T, recs []fetch.Record, urls []string) map[string]fetch.Record {
	t.Helper()
	by := map[string]fetch.Record{}
	for _, r := range recs {
		if _, dup := by[r.URL]; dup {
			t.Errorf("%s is in the output twice", r.URL)
		}
		by[r.URL] = r
	}
	for _, u := range urls {
		if _, ok := by[u]; !ok {
			t.Errorf("%s is missing from the output", u)
		}
	}
	if len(by) != len(urls) {
		t.Errorf("output has %d distinct URLs, want %d", len(by), len(urls))
	}
	return by
}

// pathOf returns the path of a URL.
func pathOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Path
}

func sqliteDSN(t *testing.T) string { return filepath.Join(t.TempDir(), "ratekeeper.db") }

// postgresDSN is a fresh database on the test server, dropped at the end.
func postgresDSN(t testing.TB) string {
	return storetest.NewPostgresDatabase(t, "rk_batch_")
}

// corrupt damages the SQLite database at path as a bad disk or a stray
// write would: pages in the middle of the file overwritten.
func corrupt(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte{0xa5}, 3000)
	for off := int64(2 * 4096); off+int64(len(junk)) < fi.Size(); off += 3 * 4096 {
		if _, err := f.WriteAt(junk, off+100); err != nil {
			t.Fatal(err)
		}
	}
}
