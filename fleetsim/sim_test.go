package fleetsim_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/fleetsim"
	"github.com/ratekeeper/ratekeeper/store/storetest"
)

var (
	seedFlag      = flag.Uint64("seed", 0, "run this one seed (0: draw -sim.schedules seeds from -sim.first)")
	storeFlag     = flag.String("sim.store", "", "memory, sqlite or postgres (default: the TestSimulation mix)")
	schedulesFlag = flag.Int("sim.schedules", 0, "schedules per store kind (0: the default of each)")
	firstFlag     = flag.Uint64("sim.first", 1, "the first seed")
	durationFlag  = flag.Duration("sim.duration", 0, "long mode: run schedules for this long (wall time), seeds from -sim.first on")
	bareFlag      = flag.Bool("sim.bare", false, "add bare 429s and bare endpoint refusals to every schedule, not only those of seeds divisible by 3")
	noBareFlag    = flag.Bool("sim.nobare", false, "leave bare 429s and bare endpoint refusals out of every schedule (as before they were in a third)")
	plentyFlag    = flag.Bool("sim.plenty", false, "add plentiful buckets, where blocks are taken ahead (defects 2–5)")
	_             = flag.Bool("sim.skew", false, "no effect: every process and the server have a clock of their own by default (see -sim.oneclock)")
	oneClockFlag  = flag.Bool("sim.oneclock", false, "draw the schedules of before clocks of their own: the server and every process share one clock")
	bare5xxFlag   = flag.Bool("sim.bare5xx", false, "make the server's 502s state nothing in every schedule, not only those of even seeds")
	withoutFlag   = flag.String("sim.without", "", "drop events of these kinds, comma-separated (blink,kill,spend…), to tell what a failure needs")
	learntFlag    = flag.Bool("sim.learnt", false, "check the learnt endpoint limit in every schedule and under every window, not only in fleets of 8 under a window not learnt as two or more of the server's (open findings: see docs/simulation.md)")
	noSkewFlag    = flag.Bool("sim.noskew", false, "set every clock right (to tell whether a failure needs clock skew)")
	fastFlag      = flag.Duration("sim.maxlatency", 0, "cap every answer's latency (to tell whether a failure needs slow answers)")
	traceFlag     = flag.Int("sim.trace", 0, "show this many of the last steps in a failure's report (0: 40)")
	keepGoingFlag = flag.Bool("sim.keepgoing", false, "run every schedule asked for, not stopping at the first that fails (to survey a range of seeds)")
)

func switches() fleetsim.Switches {
	return fleetsim.Switches{Bare: *bareFlag, NoBare: *noBareFlag, Plenty: *plentyFlag, OneClock: *oneClockFlag, Bare5xx: *bare5xxFlag, Learnt: *learntFlag}
}

// repro is the command that runs one seed again.
func repro(seed uint64, kind string) string {
	cmd := fmt.Sprintf("go test ./fleetsim -run 'TestSimulation$' -seed=%d -sim.store=%s", seed, kind)
	if *bareFlag {
		cmd += " -sim.bare"
	}
	if *noBareFlag {
		cmd += " -sim.nobare"
	}
	if *plentyFlag {
		cmd += " -sim.plenty"
	}
	if *bare5xxFlag {
		cmd += " -sim.bare5xx"
	}
	if *learntFlag {
		cmd += " -sim.learnt"
	}
	if *oneClockFlag {
		cmd += " -sim.oneclock"
	}
	return cmd
}

// defaultSchedules is how many schedules TestSimulation runs on each
// store: most on memory, a share on SQLite and PostgreSQL (a third under
// -race).
var defaultSchedules = map[string]int{fleetsim.Memory: 100, fleetsim.SQLite: 10, fleetsim.Postgres: 5}

// TestSimulation runs random schedules of a fleet against the simulated
// server and checks every invariant after every step (see
// docs/architecture.md, "The fleet simulation").
func TestSimulation(t *testing.T) {
	kinds := []string{fleetsim.Memory, fleetsim.SQLite, fleetsim.Postgres}
	if *storeFlag != "" {
		kinds = []string{*storeFlag}
	}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			if kind == fleetsim.Postgres {
				storetest.PostgresBase(t)
			}
			switch {
			case *seedFlag != 0:
				runSeed(t, kind, *seedFlag)
			case *durationFlag > 0:
				end := time.Now().Add(*durationFlag)
				n := 0
				for seed := *firstFlag; time.Now().Before(end); seed++ {
					runSeed(t, kind, seed)
					n++
				}
				t.Logf("%d schedules on %s in %v", n, kind, *durationFlag)
			default:
				n := defaultSchedules[kind]
				if raceEnabled {
					n = max(n/3, 3)
				}
				if *schedulesFlag > 0 {
					n = *schedulesFlag
				}
				start := time.Now()
				runSeeds(t, kind, *firstFlag, n)
				t.Logf("%d schedules on %s in %v", n, kind, time.Since(start).Round(time.Millisecond))
			}
		})
	}
}

// runSeeds runs n seeds from first, as many at once as GOMAXPROCS, and
// stops at the first that fails (the lowest seed of those run), unless
// -sim.keepgoing asks for all of them.
func runSeeds(t *testing.T, kind string, first uint64, n int) {
	var (
		mu     sync.Mutex
		next   = first
		failed bool
		wg     sync.WaitGroup
	)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				mu.Lock()
				seed := next
				next++
				stop := failed && !*keepGoingFlag || seed >= first+uint64(n)
				mu.Unlock()
				if stop {
					return
				}
				if res := runOne(t, kind, seed); res.Failed() {
					mu.Lock()
					failed = true
					mu.Unlock()
					t.Error(res.Report(repro(seed, kind)))
				}
			}
		})
	}
	wg.Wait()
}

func runSeed(t *testing.T, kind string, seed uint64) *fleetsim.Result {
	t.Helper()
	res := runOne(t, kind, seed)
	if res.Failed() {
		t.Fatal(res.Report(repro(seed, kind)))
	}
	return res
}

// runOne runs one seed on a fresh database of the kind. A schedule whose
// simulated clock stops (a goroutine blocked where synctest cannot see
// it) would never end: a watchdog on the real clock names it.
func runOne(t *testing.T, kind string, seed uint64) *fleetsim.Result {
	done := make(chan struct{})
	defer close(done)
	time.AfterFunc(5*time.Minute, func() {
		select {
		case <-done:
		default:
			panic(fmt.Sprintf("fleetsim: seed %d is stuck (its simulated clock stopped); reproduce with:\n  %s", seed, repro(seed, kind)))
		}
	})
	plan := fleetsim.Draw(seed, switches())
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "fleetsim: seed %d on %s\n", seed, kind)
	}
	if *noSkewFlag {
		plan.ServerSkew = 0
		clear(plan.Skews)
	}
	if *withoutFlag != "" {
		drop := strings.Split(*withoutFlag, ",")
		plan.Events = slices.DeleteFunc(plan.Events, func(e fleetsim.Event) bool { return slices.Contains(drop, string(e.Kind)) })
	}
	if *fastFlag > 0 {
		plan.MinLatency, plan.MaxLatency = min(plan.MinLatency, *fastFlag), min(plan.MaxLatency, *fastFlag)
	}
	return fleetsim.Run(t, plan, fleetsim.Options{Store: kind, DSN: dsn(t, kind), Switches: switches(), TraceSteps: *traceFlag})
}

// dsn returns a fresh database of the kind for one schedule.
func dsn(t *testing.T, kind string) string {
	switch kind {
	case fleetsim.SQLite:
		return filepath.Join(t.TempDir(), "fleet.db")
	case fleetsim.Postgres:
		return storetest.NewPostgresSchema(t, storetest.PostgresBase(t))
	}
	return ""
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(m.Run())
}
