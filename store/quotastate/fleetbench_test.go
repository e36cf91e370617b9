package quotastate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/transport"
)

// BenchmarkFleet measures the targets: 16 processes sharing 30
// tokens of 10 owners on one PostgreSQL, and 4 on one SQLite file, each
// process sending on 8 goroutines through the transport to the simulator,
// at two sizes: 10 requests per owner per 10 s window (400 GETs: a fleet
// can send each window's 100 at once) and 100 (4,000 GETs: each window's
// 1,000 take a loaded two-core machine about as long as the window). The
// physical limit is K·L/W (10 owners × L ÷ W); greedy spending sends the
// first window's K·L at once, so a batch of n = 4·K·L ideally ends 3
// windows after it starts, and the throughput after the first window,
// (n − K·L) ÷ makespan, is reported as a percentage of K·L/W. The
// makespan includes starting the processes. Run with -benchtime=1x.
func BenchmarkFleet(b *testing.B) {
	cases := []struct {
		name  string
		procs int
		limit int64
		dsn   func(b *testing.B) string
	}{
		{"postgres-16-L10", 16, 10, func(b *testing.B) string { return storetest.NewPostgresSchema(b, fleetPostgres(b)) }},
		{"sqlite-4-L10", 4, 10, func(b *testing.B) string { return filepath.Join(b.TempDir(), "fleet.db") }},
		{"postgres-16-L100", 16, 100, func(b *testing.B) string { return storetest.NewPostgresSchema(b, fleetPostgres(b)) }},
		{"sqlite-4-L100", 4, 100, func(b *testing.B) string { return filepath.Join(b.TempDir(), "fleet.db") }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				const window = 10 * time.Second
				kl := 10 * c.limit
				n := 4 * kl
				rate := float64(kl) / window.Seconds()
				r := runFleet(b, fleet{dsn: c.dsn(b), procs: c.procs, n: int(n), tokens: 30, owners: 10, limit: c.limit, window: window})
				b.ReportMetric(r.makespan.Seconds(), "makespan-s")
				b.ReportMetric(100*float64(n-kl)/r.makespan.Seconds()/rate, "%-of-limit")
				b.ReportMetric(float64(r.stats.Total.Violations), "violations")
				b.ReportMetric(float64(percentile(r.decisions, 0.99).Microseconds()), "p99-decision-µs")
				for _, bk := range r.stats.Buckets {
					if bk.Accepted > 0 {
						b.Logf("%s %s: accepted per second %v", bk.Owner, bk.Resource, bk.Timeline)
					}
				}
			}
		})
	}
}

// fleetPostgres returns the PostgreSQL the fleet benchmarks use: the one
// in RATEKEEPER_TEST_POSTGRES, else one started the way CI starts it
// (.ci/pg-start: a throwaway server on loopback, reused when running).
func fleetPostgres(b *testing.B) string {
	b.Helper()
	if os.Getenv(storetest.PostgresEnv) == "" {
		out, err := exec.Command("bash", filepath.Join("..", "..", ".ci", "pg-start")).Output()
		if err != nil {
			b.Fatalf("starting PostgreSQL with .ci/pg-start: %v", err)
		}
		b.Setenv(storetest.PostgresEnv, strings.TrimSpace(string(out)))
	}
	return storetest.PostgresBase(b)
}

// Variables of a decide worker (envWorker=decide): it runs reservations
// and their releases on the shared state directly, as fast as it can, on
// envGoroutines goroutines from envStart for envFor, among 30 slots of 10
// owners, and prints their times ("decisions …"), the CPU it used while
// deciding ("window-cpu", µs) and "done" ("late" first if it was not
// ready at the start).
const (
	envGoroutines = "RATEKEEPER_FLEET_GOROUTINES"
	envFor        = "RATEKEEPER_FLEET_FOR"
	envStart      = "RATEKEEPER_FLEET_START" // Unix nanoseconds
	// envAnswered=1: each release carries an answer's reading, as a
	// request's would (status 200, remaining falling), instead of
	// releasing without one.
	envAnswered = "RATEKEEPER_FLEET_ANSWERED"
)

// processCPU is the CPU this process has used so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// decideSlots are the worker's 30 credentials' slots: token i belongs to
// owner i % 10.
func decideSlots() []transport.Slot {
	slots := make([]transport.Slot, 30)
	for i := range slots {
		o := fmt.Sprintf("owner%d", i%10)
		slots[i] = transport.Slot{Owner: transport.OwnerID{Provider: "bench", Owner: o}, Bucket: transport.BucketID{Provider: "bench", Owner: o, Resource: "core"}}
	}
	return slots
}

func decideWorker() int {
	g, _ := strconv.Atoi(os.Getenv(envGoroutines))
	d, _ := time.ParseDuration(os.Getenv(envFor))
	s, err := store.Open(context.Background(), os.Getenv(envDB), store.Options{Advisory: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer s.Close()
	st := quotastate.New(s, nil)
	defer st.Close(context.Background())
	slots := decideSlots()
	// Connected, and the database's clock read, before the start.
	if _, err := st.Buckets(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	// Every process decides over the same span: one that started
	// deciding while the others were still starting would be measured
	// against their start-up, not their decisions.
	startNs, _ := strconv.ParseInt(os.Getenv(envStart), 10, 64)
	start := time.Unix(0, startNs)
	if wait := time.Until(start); wait > 0 {
		time.Sleep(wait)
	} else {
		fmt.Println("late")
	}
	cpu := processCPU()
	end := start.Add(d)
	var wg sync.WaitGroup
	var failed sync.Once
	code := 0
	// Processes take turns from different credentials: had they all
	// started at the first, they would choose the same bucket at the
	// same moments and queue on its row.
	first := rand.IntN(30)
	// Taking turns: each request prefers the next credential. The
	// rotations are made once, as the transport reuses its buffer: the
	// benchmark measures the decisions, not the copying of 30 slots.
	turns := make([][]transport.Slot, 30)
	for k := range turns {
		turns[k] = append(slices.Clone(slots[k:]), slots[:k]...)
	}
	answered := os.Getenv(envAnswered) == "1"
	var spent atomic.Int64
	deciders := make([]*decider, g)
	for w := range g {
		d := &decider{st: st, w: uint64(w)}
		deciders[w] = d
		wg.Go(func() {
			// The clock is read for the end every 16 decisions: a read
			// costs as much as a unit's decision.
			for k := first + w*30/g; k%16 != 0 || time.Now().Before(end); k++ {
				turn := turns[k%30]
				var r *headers.Reading
				if answered {
					r = &headers.Reading{Status: 200, Limit: 1e9, Remaining: 1e9 - spent.Add(1), Reset: start.Add(time.Hour)}
				}
				if err := d.decideOnce(turn, r); err != nil {
					failed.Do(func() { fmt.Fprintln(os.Stderr, err); code = 1 })
					return
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("window-cpu %d\n", (processCPU() - cpu).Microseconds())
	var times latencies
	for _, d := range deciders {
		times.merge(&d.times)
	}
	times.print()
	if r, ok := any(st).(interface{ Races() int64 }); ok {
		fmt.Printf("races %d\n", r.Races())
	}
	fmt.Println("done")
	return code
}

// pid is the worker's process ID, read once: a system call on every
// decision would be a large part of what the benchmark measures.
var pid = uint64(os.Getpid() & 0xffff)

// decider decides on one goroutine of a worker, and keeps the time each
// of its decisions took: the goroutines of a process share nothing of the
// benchmark's own, which would be a good part of what it measures (one
// lock and one slice for every decision of a process were).
type decider struct {
	st    *quotastate.State
	w     uint64 // the goroutine's number
	seq   uint64
	times latencies
	// p and sp are the decision's and the release's, used again for
	// the next as the transport uses its own: the benchmark measures
	// the decisions, not the allocation of their arguments.
	p  transport.ReserveParams
	sp transport.SettleParams
}

// decideOnce reserves among slots and releases what it took. A wait (a
// few milliseconds: greedy spending's pacing time, set by a decision
// whose now was later than this one's) is a decision too; it is slept.
// The decision is timed from the time it asks at, as the transport's.
func (dc *decider) decideOnce(slots []transport.Slot, answer *headers.Reading) error {
	dc.seq++
	id := (dc.seq<<8|dc.w)<<16 | pid
	now := time.Now()
	p := &dc.p
	*p = transport.ReserveParams{Slots: slots, Ask: quota.Ask{Policy: quota.Policy{Kind: quota.Greedy}},
		Lease: quota.Lease{ID: id, Until: now.Add(time.Minute)}, Now: now}
	d, err := dc.st.Reserve(context.Background(), p)
	dc.times.add(time.Since(now))
	i, w := d.Index, d.Wait
	if err != nil || w > time.Second {
		return fmt.Errorf("reserve: wait %v, %v", w, err)
	}
	if w > 0 {
		time.Sleep(w)
		return nil
	}
	dc.sp = transport.SettleParams{Slot: slots[i], Lease: id, Now: time.Now(),
		Answer: quota.Answer{Reading: answer, Counted: answer != nil}}
	return dc.st.Settle(context.Background(), &dc.sp)
}

// seedBuckets makes the 10 owners' buckets known, with remaining of 1e9
// left, so every decision can go.
func seedBuckets(tb testing.TB, dsn string, remaining int64) {
	tb.Helper()
	s, err := store.Open(context.Background(), dsn, store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	st := quotastate.New(s, nil)
	now := time.Now()
	for _, sl := range decideSlots()[:10] {
		r := &headers.Reading{Status: 200, Limit: 1e9, Remaining: remaining, Reset: now.Add(time.Hour)}
		if err := st.Settle(context.Background(), &transport.SettleParams{Slot: sl, Now: now, Answer: quota.Answer{Reading: r, Counted: true}}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := st.Close(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

// slowTook is the least a decision in the database takes on a two-core
// machine: a transaction's round trip. A unit of a block takes a
// microsecond or two, unless the machine holds its goroutine up.
const slowTook = 20 * time.Microsecond

// slowPerMille is how many of a thousand decisions took slowTook or
// more: those the database decided, and those of blocks that a busy
// machine held up — most of them once many processes share two cores
// (16 processes: about 1 ‰ slow, where 0.15 ‰ went to the database).
func slowPerMille(ds []time.Duration) float64 {
	n := 0
	for _, d := range ds {
		if d >= slowTook {
			n++
		}
	}
	return 1000 * float64(n) / float64(max(1, len(ds)))
}

// BenchmarkFleetDecisions measures fleet-wide quota decisions per second
// on one PostgreSQL as processes are added (1, 2, 4, 8, 16), each deciding
// on 4 goroutines over the same 5 s (they start together once all are
// ready) among 30 credentials of 10 owners whose quota never binds (a
// reservation and its release per decision), the p99 time of one
// decision, how many in a thousand took a transaction's time (slowPerMille),
// and the CPU the deciding processes used per decision over those 5 s
// (the database's is not counted). procs-N releases each
// reservation without an answer; answered-procs-N settles each with an
// answer's reading (200, remaining falling), which must be written, as a
// real request's; database-procs-N starts each bucket half spent, so that
// none is plentiful (quota.Plenty) and every decision is a transaction,
// as a capped owner's are. Run with -benchtime=1x.
func BenchmarkFleetDecisions(b *testing.B) {
	const goroutines, span = 4, 5 * time.Second
	type variant struct {
		name      string
		answered  string
		remaining int64
		procs     int
	}
	var runs []variant
	for _, v := range []variant{{"procs", "0", 1e9, 0}, {"answered-procs", "1", 1e9, 0}, {"database-procs", "0", 5e8, 0}} {
		for _, n := range []int{1, 2, 4, 8, 16} {
			v.procs = n
			runs = append(runs, v)
		}
	}
	for _, run := range runs {
		procs := run.procs
		b.Run(fmt.Sprintf("%s-%d", run.name, procs), func(b *testing.B) {
			for b.Loop() {
				dsn := storetest.NewPostgresSchema(b, fleetPostgres(b))
				seedBuckets(b, dsn, run.remaining)
				var mu sync.Mutex
				var all []time.Duration
				var races int64
				var cpu time.Duration // the workers' own while deciding, not the database's
				var wg sync.WaitGroup
				// Time enough for every process to start on a loaded
				// two-core machine.
				start := time.Now().Add(time.Second + time.Duration(procs)*250*time.Millisecond)
				for range procs {
					wg.Go(func() {
						lines, err := runWorker([]string{envWorker + "=decide", envDB + "=" + dsn,
							envGoroutines + "=" + strconv.Itoa(goroutines), envFor + "=" + span.String(),
							envStart + "=" + strconv.FormatInt(start.UnixNano(), 10), envAnswered + "=" + run.answered})
						if err == nil && slices.Contains(lines, "late") {
							err = fmt.Errorf("a worker was not ready at the start; give the processes more time to start")
						}
						if err == nil && !strings.HasPrefix(lines[len(lines)-1], "done") {
							err = fmt.Errorf("worker said %q", lines[len(lines)-1])
						}
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						all = append(all, parseDecisions(lines)...)
						for _, l := range lines {
							if n, ok := strings.CutPrefix(l, "races "); ok {
								v, _ := strconv.ParseInt(n, 10, 64)
								races += v
							}
							if n, ok := strings.CutPrefix(l, "window-cpu "); ok {
								v, _ := strconv.ParseInt(n, 10, 64)
								cpu += time.Duration(v) * time.Microsecond
							}
						}
						mu.Unlock()
					})
				}
				wg.Wait()
				b.ReportMetric(float64(len(all))/span.Seconds(), "decisions/s")
				b.ReportMetric(float64(percentile(all, 0.99).Microseconds()), "p99-µs")
				b.ReportMetric(float64(percentile(all, 0.5).Microseconds()), "p50-µs")
				b.ReportMetric(slowPerMille(all), "slow-‰")
				b.ReportMetric(float64(races), "lost-races")
				b.ReportMetric(float64(cpu.Microseconds())/float64(max(1, len(all))), "worker-cpu-µs/decision")
			}
		})
	}
}
