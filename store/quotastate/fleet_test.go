package quotastate_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/transport"
	"github.com/ratekeeper/ratekeeper/transport/statetest"
)

// A fleet worker is this test binary run again with these variables set:
// it sends its share of GETs through a transport sharing quota state in
// the database, then prints "done N failed M".
const (
	envWorker = "RATEKEEPER_FLEET_WORKER" // "1" makes the binary a worker
	envURL    = "RATEKEEPER_FLEET_URL"
	envDB     = "RATEKEEPER_FLEET_DB"
	envFrom   = "RATEKEEPER_FLEET_FROM"
	envCount  = "RATEKEEPER_FLEET_COUNT"
)

var fleetTokens = []string{"tok-fleet-a", "tok-fleet-b", "tok-fleet-c"}

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) == "1" {
		os.Exit(fleetWorker())
	}
	statetest.Main(m, openState)
}

func fleetWorker() int {
	from, _ := strconv.Atoi(os.Getenv(envFrom))
	count, _ := strconv.Atoi(os.Getenv(envCount))
	url := os.Getenv(envURL)
	tr, err := ratekeeper.NewTransport(ratekeeper.Options{
		DB:        os.Getenv(envDB),
		Providers: []string{"github=" + url},
		Tokens:    map[string][]string{"github": fleetTokens},
		Policy:    "greedy",
		MaxWait:   time.Minute,
		// The tokens have distinct owners; validating them would spend a
		// few requests of the first window and blur the measurement.
		Tune: func(o *transport.Options) { o.SkipValidation = true },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer tr.Close()
	jobs := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
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
		}()
	}
	for i := from; i < from+count; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	fmt.Printf("done %d failed %d\n", count, failed)
	return 0
}

// runFleet serves a simulated GitHub with three tokens of distinct owners
// (limit per token per window), starts `procs` worker processes sharing
// the database dsn, splits n GETs among them and waits. It returns the
// makespan and the simulator's stats.
func runFleet(t testing.TB, dsn string, procs, n int, limit int64, window time.Duration) (time.Duration, sim.Stats) {
	t.Helper()
	var tokens []sim.TokenConfig
	for i, tok := range fleetTokens {
		tokens = append(tokens, sim.TokenConfig{Token: tok, Owner: fmt.Sprintf("owner%d", i)})
	}
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: limit, Window: window, Tokens: tokens,
		Secondary: &sim.SecondaryConfig{}}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, procs)
	per := n / procs
	for p := 0; p < procs; p++ {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), envWorker+"=1", envURL+"="+ts.URL, envDB+"="+dsn,
			envFrom+"="+strconv.Itoa(p*per), envCount+"="+strconv.Itoa(per))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			var last string
			for sc.Scan() {
				last = sc.Text()
			}
			if err := cmd.Wait(); err != nil {
				errs <- fmt.Errorf("worker: %v: %s", err, stderr.String())
				return
			}
			if last != fmt.Sprintf("done %d failed 0", per) {
				errs <- fmt.Errorf("worker said %q: %s", last, stderr.String())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return time.Since(start), srv.Stats()
}

// TestFleetSharesQuota: four processes with the same three tokens,
// pointed at one database, never exceed the quota together.
func TestFleetSharesQuota(t *testing.T) {
	backends := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "fleet.db") },
		"postgres": func(t *testing.T) string { return storetest.NewPostgresSchema(t, storetest.PostgresBase(t)) },
	}
	for name, dsn := range backends {
		t.Run(name, func(t *testing.T) {
			// 3 tokens × 20 per 2 s = 30/s; 180 requests need three windows.
			_, st := runFleet(t, dsn(t), 4, 180, 20, 2*time.Second)
			if st.Total.Accepted != 180 || st.Total.PrimaryViolations != 0 {
				t.Fatalf("accepted %d, primary violations %d", st.Total.Accepted, st.Total.PrimaryViolations)
			}
		})
	}
}

// BenchmarkFleet measures the target: 4 processes × 3 tokens on
// the simulator (100 requests per token per 10 s rolling window), 1,200
// GETs, via SQLite and via PostgreSQL. It reports the combined throughput
// after the first window as a percentage of the physical limit K·L/W =
// 30/s: (n − K·L) ÷ makespan ÷ (K·L/W). Run with -benchtime=1x.
func BenchmarkFleet(b *testing.B) {
	backends := map[string]func(b *testing.B) string{
		"sqlite":   func(b *testing.B) string { return filepath.Join(b.TempDir(), "fleet.db") },
		"postgres": func(b *testing.B) string { return storetest.NewPostgresSchema(b, storetest.PostgresBase(b)) },
	}
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				const n, kl, rate = 1200, 300, 30.0
				makespan, st := runFleet(b, backends[name](b), 4, n, 100, 10*time.Second)
				b.ReportMetric(makespan.Seconds(), "makespan-s")
				b.ReportMetric(100*float64(n-kl)/makespan.Seconds()/rate, "%-of-limit")
				b.ReportMetric(float64(st.Total.PrimaryViolations), "violations")
				for _, bk := range st.Buckets {
					if bk.Accepted > 0 {
						b.Logf("%s %s: accepted per second %v", bk.Owner, bk.Resource, bk.Timeline)
					}
				}
			}
		})
	}
}
