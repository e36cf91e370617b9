package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/store/storetest"
)

// The fleet's batch: 1,500 URLs through 9 tokens of 6 users (alice, bob
// and carol have two tokens each, which share their owner's bucket), each
// user 60 requests per fixed 5-second window: 360 a window, so the batch
// needs 4 full windows and 60 requests of a fifth.
const (
	fleetURLs   = 1500
	fleetLimit  = 60
	fleetWindow = 5 * time.Second
	fleetProcs  = 8
)

var fleetOwners = []string{"alice", "bob", "carol", "dave", "erin", "frank", "alice", "bob", "carol"}

// fleetIdeal is the earliest a perfect client with `inFlight` requests in
// flight ends the batch when started 50 ms into a window: every window
// spent in full as it opens, so the batch takes the rest of the first
// window, whole windows until the one that opens with requests left, and
// in that last window its requests at inFlight at a time, one answer
// (fitLatency) each:
//
//	ideal = (W − 50 ms) + (⌈n ÷ K·L⌉ − 2)·W + ⌈r ÷ inFlight⌉·latency,
//	r = n − (⌈n ÷ K·L⌉ − 1)·K·L
//
// With n = 1,500, K·L = 360, W = 5 s: 4.95 s + 3·5 s + ⌈60 ÷ 80⌉·20 ms =
// 19.97 s for the fleet (8 × 10 in flight) and the library (80), and
// 20.07 s for one fetch process (10 in flight: 6 round trips).
func fleetIdeal(inFlight int) time.Duration {
	perWindow := distinct(fleetOwners) * fleetLimit
	windows := (fleetURLs + perWindow - 1) / perWindow
	last := fleetURLs - (windows-1)*perWindow
	tail := time.Duration((last+inFlight-1)/inFlight) * fitLatency
	return fleetWindow - 50*time.Millisecond + time.Duration(windows-2)*fleetWindow + tail
}

// BenchmarkFetchFleet runs one batch of 1,500 URLs through 8 `ratekeeper
// fetch` processes started together on one --db (SQLite, PostgreSQL),
// each with its eighth of the URLs, fetch's default concurrency and the
// same 9 tokens of 6 users, against the simulator (fixed 5-second
// windows of 60 per user, 20 ms answers), started 50 ms after a window
// opens. It compares them with one process's worth of work: the library
// with memory state on 80 goroutines (library-1) and one fetch process
// with a SQLite --db (cli-1). It reports the makespan (the processes'
// start-up included), its ratio to fleetIdeal, what the server charged
// beyond the batch (0: nothing spent twice, nothing spent to learn), its
// refusals, and, from the simulator's log of requests, where time went:
// how long after each window opened its first request came (refill-lag-ms,
// mean over the windows that open during the run) and how long the
// window took to be spent (fill-ms), and how long after the last window
// opened the batch ended (tail-ms). It logs when each process sent its
// first request and how many of each window's requests each sent (see
// watchSockets). It fails unless every URL is written exactly once across
// the outputs.
//
//	go test ./cmd/ratekeeper -run '^$' -bench FetchFleet -benchtime 1x -count 3
func BenchmarkFetchFleet(b *testing.B) {
	cases := []struct {
		name  string
		procs int
		db    func(b *testing.B) string // "" for the library
	}{
		{"sqlite-8", fleetProcs, func(b *testing.B) string { return filepath.Join(b.TempDir(), "rk.db") }},
		{"postgres-8", fleetProcs, func(b *testing.B) string {
			return storetest.NewPostgresDatabaseOn(b, fleetPostgresBase(b), "rk_fleet_")
		}},
		{"cli-1", 1, func(b *testing.B) string { return filepath.Join(b.TempDir(), "rk.db") }},
		{"library-1", 1, nil},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				s := startFitSim(b, fleetOwners, fleetLimit, fleetWindow)
				inFlight := fleetProcs * fitWorkers
				var r fleetRun
				if c.db == nil {
					r.start = atWindowStart(fleetWindow)
					libraryFetch(b, s, fleetURLs, inFlight)
					r.end = time.Now()
				} else {
					inFlight = c.procs * fitWorkers
					r = fleetThroughCLI(b, s, c.db(b), c.procs)
				}
				r.report(b, s, fleetIdeal(inFlight))
			}
		})
	}
}

// fleetPostgresBase is the PostgreSQL server of the fleet: the one in
// RATEKEEPER_TEST_POSTGRES, else one started the way CI starts it.
func fleetPostgresBase(b *testing.B) string {
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

// fleetRun is what a run's processes did: when they were started, when
// each ended, and which URL index each was given first (process i has
// the indices [from[i], from[i+1])).
type fleetRun struct {
	start, end time.Time
	ends       []time.Time
	from       []int
	// sender maps a client address ("127.0.0.1:port") to the process
	// that held it (see watchSockets).
	sender map[string]int
}

// fleetThroughCLI starts procs fetch processes together, just after a
// window opens, on one --db, each with its share of the URLs, waits for
// them all and checks that every URL was written exactly once.
func fleetThroughCLI(b *testing.B, s *fitSim, db string, procs int) fleetRun {
	dir := b.TempDir()
	env := []string{"GITHUB_TOKEN=" + strings.Join(s.tokens, ",")}
	r := fleetRun{ends: make([]time.Time, procs)}
	var inputs, outputs []string
	for i := range procs + 1 {
		r.from = append(r.from, i*fleetURLs/procs)
	}
	for i := range procs {
		in := filepath.Join(dir, fmt.Sprintf("urls-%d.txt", i))
		var urls strings.Builder
		for u := r.from[i]; u < r.from[i+1]; u++ {
			fmt.Fprintf(&urls, "%s/repos/o/r%03d\n", s.URL, u)
		}
		if err := os.WriteFile(in, []byte(urls.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		inputs = append(inputs, in)
		outputs = append(outputs, filepath.Join(dir, fmt.Sprintf("out-%d.jsonl", i)))
	}
	r.start = atWindowStart(fleetWindow)
	ps := make([]*process, procs)
	pids := make([]int, procs)
	for i := range procs {
		ps[i] = startProcess(b, env, "fetch", "-i", inputs[i], "-o", outputs[i], "--db", db,
			"--provider", "github="+s.URL, "--progress", "off")
		pids[i] = ps[i].cmd.Process.Pid
	}
	stopWatch := watchSockets(pids)
	errs := make([]error, procs)
	done := make(chan int, procs)
	for i, p := range ps {
		go func() {
			select {
			case errs[i] = <-p.done:
			case <-time.After(3 * time.Minute):
				errs[i] = fmt.Errorf("still running after 3 minutes")
			}
			r.ends[i] = time.Now()
			done <- i
		}()
	}
	for range procs {
		<-done
	}
	r.end = slices.MaxFunc(r.ends, time.Time.Compare)
	r.sender = stopWatch()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("fetch %d: %v\n%s", i, err, ps[i].out())
		}
	}
	written := map[string]int{}
	for _, out := range outputs {
		for u := range outputRecords(b, out) {
			written[u]++
		}
	}
	for u := range fleetURLs {
		if n := written[fmt.Sprintf("%s/repos/o/r%03d", s.URL, u)]; n != 1 {
			b.Errorf("URL %d written %d times, want once", u, n)
		}
	}
	if len(written) != fleetURLs {
		b.Errorf("%d distinct URLs written, want %d", len(written), fleetURLs)
	}
	return r
}

// report reports the run's metrics and logs where its time went.
func (r fleetRun) report(b *testing.B, s *fitSim, ideal time.Duration) {
	makespan := r.end.Sub(r.start)
	st := s.srv.Stats().Total
	b.ReportMetric(makespan.Seconds(), "makespan-s")
	b.ReportMetric(makespan.Seconds()/ideal.Seconds(), "x-ideal")
	b.ReportMetric(float64(st.Charged-fleetURLs), "extra-charged")
	b.ReportMetric(float64(st.Violations), "refusals")

	reqs := s.requests()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	// (a) start-up: each process's first request after the start.
	if r.sender != nil {
		first := make([]time.Duration, len(r.ends))
		for _, q := range reqs {
			if p, ok := r.sender[q.from]; ok && first[p] == 0 {
				first[p] = q.at.Sub(r.start)
			}
		}
		// A process whose first request finds the first window spent
		// sends in the second: the log tells, not a metric.
		b.Logf("first request sent by each process after the start (ms): %v", roundMs(first))
	}
	// (d) each window: its first accepted request and its last, after it
	// opened; (e) the last window's requests by process.
	open0 := r.start.Truncate(fleetWindow)
	type win struct {
		first, last time.Duration
		n           int
		byProc      []int
	}
	var wins []win
	other := 0
	for _, q := range reqs {
		if q.status != 200 {
			other++
			continue
		}
		k := int(q.at.Sub(open0) / fleetWindow)
		for len(wins) <= k {
			wins = append(wins, win{first: -1, byProc: make([]int, max(len(r.ends), 1))})
		}
		off := q.at.Sub(open0.Add(time.Duration(k) * fleetWindow))
		w := &wins[k]
		if w.first < 0 {
			w.first = off
		}
		w.last = off
		w.n++
		if p, ok := r.sender[q.from]; ok {
			w.byProc[p]++
		}
	}
	var lag, fill time.Duration
	opened := 0
	for k, w := range wins {
		b.Logf("window %d: %d accepted, first at +%.0f ms, last at +%.0f ms after it opened, by process %v", k, w.n, ms(w.first), ms(w.last), w.byProc)
		if k == 0 || k == len(wins)-1 || w.first < 0 {
			continue
		}
		lag += w.first
		fill += w.last
		opened++
	}
	if opened > 0 {
		b.ReportMetric(ms(lag)/float64(opened), "refill-lag-ms")
		b.ReportMetric(ms(fill)/float64(opened), "fill-ms")
	}
	if len(wins) > 0 {
		b.ReportMetric(ms(r.end.Sub(open0.Add(time.Duration(len(wins)-1)*fleetWindow))), "tail-ms")
	}
	if unknown := countUnknown(reqs, r.sender); r.sender != nil && unknown > 0 {
		b.Logf("%d requests from a client address no process was seen holding", unknown)
	}
	if other > 0 || s.whoAmI.Load() > 0 {
		b.Logf("%d answers other than 200, %d \"who am I\" requests", other, s.whoAmI.Load())
	}
	for i, e := range r.ends {
		b.Logf("process %d ended %.0f ms after the start", i, ms(e.Sub(r.start)))
	}
}

func roundMs(ds []time.Duration) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.Milliseconds()
	}
	return out
}

func countUnknown(reqs []simRequest, sender map[string]int) int {
	n := 0
	for _, q := range reqs {
		if _, ok := sender[q.from]; !ok {
			n++
		}
	}
	return n
}

// watchSockets finds, every 20 ms until the returned function is called,
// which of the processes holds each TCP connection to loopback (Linux's
// /proc: a socket's inode in /proc/PID/fd, its local port in
// /proc/net/tcp), and returns from that function the client addresses
// ("127.0.0.1:port") seen, each with the index of its process in pids.
// The simulator sees only addresses; this tells which process sent what.
// Elsewhere than Linux it finds nothing.
func watchSockets(pids []int) func() map[string]int {
	seen := map[string]int{}
	stop := make(chan struct{})
	done := make(chan struct{})
	look := func() {
		inodes := map[string]int{}
		for i, pid := range pids {
			dir := fmt.Sprintf("/proc/%d/fd", pid)
			fds, _ := os.ReadDir(dir)
			for _, fd := range fds {
				link, err := os.Readlink(filepath.Join(dir, fd.Name()))
				if err == nil && strings.HasPrefix(link, "socket:[") {
					inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = i
				}
			}
		}
		tcp, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			return
		}
		for _, line := range strings.Split(string(tcp), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 {
				continue
			}
			i, ok := inodes[f[9]]
			if !ok {
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			port, err := strconv.ParseUint(hexPort, 16, 16)
			if err == nil {
				seen[fmt.Sprintf("127.0.0.1:%d", port)] = i
			}
		}
	}
	go func() {
		defer close(done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			look()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() map[string]int {
		close(stop)
		<-done
		return seen
	}
}
