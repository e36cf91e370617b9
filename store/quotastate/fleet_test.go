package quotastate_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/transport"
	"github.com/ratekeeper/ratekeeper/transport/statetest"
)

// A fleet worker is this test binary run again with these variables set:
// it sends its share of GETs through a transport sharing quota state in
// the database, then prints "done N failed M" and, on the line before,
// "decisions" and the time each of its reservations took, in µs.
const (
	envWorker = "RATEKEEPER_FLEET_WORKER" // "1" makes the binary a worker
	envURL    = "RATEKEEPER_FLEET_URL"
	envDB     = "RATEKEEPER_FLEET_DB"
	envFrom   = "RATEKEEPER_FLEET_FROM"
	envCount  = "RATEKEEPER_FLEET_COUNT"
	envTokens = "RATEKEEPER_FLEET_TOKENS" // token=owner,token=owner,…
	envSkew   = "RATEKEEPER_FLEET_SKEW"   // the worker's clock less the real one, a Go duration
)

func TestMain(m *testing.M) {
	switch os.Getenv(envWorker) {
	case "1":
		os.Exit(fleetWorker())
	case "decide":
		os.Exit(decideWorker())
	case "wait":
		os.Exit(waitWorker())
	}
	statetest.Main(m, openState)
}

// timedState times each reservation of the shared state.
type timedState struct {
	*quotastate.State
	mu    sync.Mutex
	times latencies
}

func (s *timedState) Reserve(ctx context.Context, p *transport.ReserveParams) (transport.Decision, error) {
	start := time.Now()
	d, err := s.State.Reserve(ctx, p)
	took := time.Since(start)
	s.mu.Lock()
	s.times.add(took)
	s.mu.Unlock()
	return d, err
}

func (s *timedState) print() { s.times.print() }

// latencies counts the times decisions took, by the microsecond: a
// worker deciding a million times over a benchmark's span keeps a fixed
// array rather than a growing slice, whose copying and the collections
// it set off were a fifth of what the benchmark measured.
type latencies struct {
	us   [latencyArray]uint32 // how many took each microsecond below latencyArray
	over []time.Duration      // the rare longer ones
}

const latencyArray = 4096

func (l *latencies) add(d time.Duration) {
	if us := d.Microseconds(); us >= 0 && us < latencyArray {
		l.us[us]++
		return
	}
	l.over = append(l.over, d)
}

func (l *latencies) merge(o *latencies) {
	for us, n := range o.us {
		l.us[us] += n
	}
	l.over = append(l.over, o.over...)
}

// print prints them on a line that parseDecisions reads: each time in
// microseconds, "us*n" for n decisions that took us.
func (l *latencies) print() {
	var b strings.Builder
	b.WriteString("decisions")
	for us, n := range l.us {
		switch {
		case n == 1:
			fmt.Fprintf(&b, " %d", us)
		case n > 1:
			fmt.Fprintf(&b, " %d*%d", us, n)
		}
	}
	for _, d := range l.over {
		fmt.Fprintf(&b, " %d", d.Microseconds())
	}
	fmt.Println(b.String())
}

// workerPool is the worker's credentials, their owners known as a
// database that validated them once remembers them: the fleet measures
// sharing, not learning.
func workerPool() *creds.Pool {
	var cs []*creds.Credential
	for i, pair := range strings.Split(os.Getenv(envTokens), ",") {
		tok, owner, _ := strings.Cut(pair, "=")
		c := creds.NewToken("github", i+1, tok, "test")
		c.SetOwner(provider.Owner{Name: owner})
		cs = append(cs, c)
	}
	return creds.NewPool("github", cs...)
}

func fleetWorker() int {
	from, _ := strconv.Atoi(os.Getenv(envFrom))
	count, _ := strconv.Atoi(os.Getenv(envCount))
	skew, _ := time.ParseDuration(os.Getenv(envSkew))
	url := os.Getenv(envURL)
	var timed *timedState
	tr, err := ratekeeper.NewTransport(ratekeeper.Options{
		DB:        os.Getenv(envDB),
		Providers: []string{"github=" + url},
		Policy:    "greedy",
		MaxWait:   time.Minute,
		Tune: func(o *transport.Options) {
			o.SkipValidation = true
			o.Pools = map[string]*creds.Pool{"github": workerPool()}
			if skew != 0 {
				o.Now = func() time.Time { return time.Now().Add(skew) }
			}
			timed = &timedState{State: o.State.(*quotastate.State)}
			o.State = timed
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer tr.Close()
	failed := sendAll(tr, url, from, count, 8)
	timed.print()
	fmt.Printf("done %d failed %d\n", count, failed)
	return 0
}

// sendAll sends GETs from..from+count on g goroutines and returns how many
// failed.
func sendAll(tr http.RoundTripper, url string, from, count, g int) int {
	jobs := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for range g {
		wg.Go(func() {
			for i := range jobs {
				req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/repos/fleet/repo%d", url, i), nil)
				resp, err := tr.RoundTrip(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != 200 {
					mu.Lock()
					failed++
					mu.Unlock()
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
					}
				}
			}
		})
	}
	for i := from; i < from+count; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return failed
}

// fleet describes one run: procs worker processes sharing the database
// dsn send n GETs to a simulated GitHub whose tokens of owners
// (tokens[i] belongs to owner i % owners) each allow limit requests per
// window per owner.
type fleet struct {
	dsn            string
	procs, n       int
	tokens, owners int
	limit          int64
	window         time.Duration
	// skew is each worker's clock less the real one (missing: 0).
	skew map[int]time.Duration
}

// fleetResult is what a run measured.
type fleetResult struct {
	makespan  time.Duration
	stats     sim.Stats
	decisions []time.Duration // every reservation of every worker
}

func (f fleet) tokenList() (list []string, cfg []sim.TokenConfig) {
	for i := range f.tokens {
		tok, owner := fmt.Sprintf("tok-fleet-%02d", i), fmt.Sprintf("owner%d", i%f.owners)
		list = append(list, tok+"="+owner)
		cfg = append(cfg, sim.TokenConfig{Token: tok, Owner: owner})
	}
	return list, cfg
}

// runFleet serves the simulated GitHub, starts the workers, splits the
// GETs among them and waits for them all.
func runFleet(t testing.TB, f fleet) fleetResult {
	t.Helper()
	list, tokens := f.tokenList()
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: f.limit, Window: f.window, Tokens: tokens,
		Secondary: &sim.SecondaryConfig{}}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	env := []string{envWorker + "=1", envURL + "=" + ts.URL, envDB + "=" + f.dsn, envTokens + "=" + strings.Join(list, ",")}
	start := time.Now()
	res := fleetResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	per := f.n / f.procs
	for p := range f.procs {
		penv := append(slices.Clone(env), envFrom+"="+strconv.Itoa(p*per), envCount+"="+strconv.Itoa(per), envSkew+"="+f.skew[p].String())
		wg.Go(func() {
			lines, err := runWorker(penv)
			if err == nil && lines[len(lines)-1] != fmt.Sprintf("done %d failed 0", per) {
				err = fmt.Errorf("worker said %q", lines[len(lines)-1])
			}
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			res.decisions = append(res.decisions, parseDecisions(lines)...)
		})
	}
	wg.Wait()
	res.makespan, res.stats = time.Since(start), srv.Stats()
	return res
}

// runWorker runs this binary as a worker with env and returns its output
// lines (at least one), after a first line "cpu N": the CPU it used, in µs.
func runWorker(env []string) ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var lines []string
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("worker: %v: %s", err, stderr.String())
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("worker said nothing: %s", stderr.String())
	}
	// First: the CPU the worker used (user and system, µs), which
	// benchmarks divide by their decisions.
	lines = append([]string{fmt.Sprintf("cpu %d", (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Microseconds())}, lines...)
	return lines, nil
}

// parseDecisions reads the "decisions" line of a worker's output.
func parseDecisions(lines []string) []time.Duration {
	var out []time.Duration
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "decisions" {
			for _, s := range f[1:] {
				v, count, ok := strings.Cut(s, "*")
				n := 1
				if ok {
					n, _ = strconv.Atoi(count)
				}
				us, _ := strconv.ParseInt(v, 10, 64)
				for range n {
					out = append(out, time.Duration(us)*time.Microsecond)
				}
			}
		}
	}
	return out
}

// percentile returns the p-th percentile of ds (sorted in place).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(int(float64(len(ds))*p), len(ds)-1)]
}

// TestFleetSharesQuota: four processes with 30 tokens of 10 owners, one
// of them on a clock 3 s ahead of the others, pointed at one database,
// never exceed the quota together (0 violations, primary or secondary).
func TestFleetSharesQuota(t *testing.T) {
	backends := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "fleet.db") },
		"postgres": func(t *testing.T) string { return storetest.NewPostgresSchema(t, storetest.PostgresBase(t)) },
	}
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			// 10 owners × 20 per 2 s = 100/s; 400 requests need two
			// windows and a bit of a third.
			f := fleet{dsn: backends[name](t), procs: 4, n: 400, tokens: 30, owners: 10, limit: 20, window: 2 * time.Second,
				skew: map[int]time.Duration{1: 3 * time.Second}}
			st := runFleet(t, f).stats
			if st.Total.Accepted != int64(f.n) || st.Total.Violations != 0 {
				t.Fatalf("accepted %d of %d, violations %d (primary %d)", st.Total.Accepted, f.n, st.Total.Violations, st.Total.PrimaryViolations)
			}
		})
	}
}
