package statetest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

// testConcurrentHolders: two holders (goroutines with their own leases)
// reserve and settle against one owner and bucket as fast as they can. A
// model server counts what they spend and what they hold at once: neither
// the bucket's budget nor the owner's concurrency cap is ever exceeded.
func testConcurrentHolders(t *testing.T, b Backend) {
	s := b.New(t)
	a := slot("alice", "core")
	const limit, capN = 40, 3
	reset := t0.Add(time.Hour)
	known(t, s, a, limit, limit, reset, t0)
	var inFlight, most, served atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for h := range 2 {
		wg.Go(func() {
			ask := capped(capN)
			for n := range 60 {
				l := quota.Lease{ID: uint64(h*1000 + n + 1), Until: t0.Add(time.Minute)}
				d, err := s.Reserve(context.Background(), &transport.ReserveParams{Slots: []transport.Slot{a}, Ask: ask, Lease: l, Now: t0})
				if err != nil {
					errs <- err
					return
				}
				if d.Wait > 0 {
					continue
				}
				cur := inFlight.Add(1)
				for m := most.Load(); cur > m && !most.CompareAndSwap(m, cur); m = most.Load() {
				}
				left := limit - served.Add(1)
				inFlight.Add(-1)
				err = s.Settle(context.Background(), &transport.SettleParams{Slot: a, Lease: l.ID, Now: t0,
					Answer: quota.Answer{Reading: ok(limit, left, reset), Counted: true}})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if served.Load() > limit || most.Load() > capN {
		t.Fatalf("served %d of a limit of %d, at most %d in flight of a cap of %d", served.Load(), limit, most.Load(), capN)
	}
	if served.Load() < limit {
		t.Fatalf("served %d: the holders stopped before the budget was spent", served.Load())
	}
}

// newTransport is a transport over s, for provider "github" at url with
// one token, the owner's concurrency capped at capN.
func newTransport(s transport.State, url string, capN int) (*transport.Transport, error) {
	p, err := provider.New("github", provider.GitHub, url)
	if err != nil {
		return nil, err
	}
	p.Secondary = provider.Secondary{MaxConcurrency: capN}
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		return nil, err
	}
	return transport.New(transport.Options{
		Providers:      reg,
		Pools:          map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-statetest-1", "test"))},
		State:          s,
		SkipValidation: true,
		MaxWait:        time.Minute,
		// Leases long enough that a leak cannot hide by lapsing.
		Lease:        time.Hour,
		DisableCache: true,
	})
}

// testTransportCancelled: requests cancelled while in flight or while
// waiting for a slot give back everything they took. 50 requests are
// cancelled, then 100 more run: no lease is left, and the owner's whole
// concurrency is available.
func testTransportCancelled(t *testing.T, b Backend) {
	s := b.New(t)
	const capN = 8
	arrived := make(chan struct{}, 100)
	var hang atomic.Bool
	hang.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			arrived <- struct{}{}
			<-r.Context().Done() // until the client gives up
			return
		}
		w.Header().Set("X-RateLimit-Limit", "5000")
		w.Header().Set("X-RateLimit-Remaining", "4000")
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
		io.WriteString(w, "{}")
	}))
	defer srv.Close()
	tr, err := newTransport(s, srv.URL, capN)
	if err != nil {
		t.Fatal(err)
	}
	get := func(ctx context.Context, i int) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/repos/o/r%d", srv.URL, i), nil)
		return tr.RoundTrip(req)
	}
	// One answer makes the bucket known, so requests then go capN at a
	// time instead of one probe.
	hang.Store(false)
	if resp, err := get(t.Context(), 0); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	hang.Store(true)

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if resp, err := get(ctx, i); err == nil {
				resp.Body.Close()
				t.Errorf("request %d answered although cancelled", i)
			}
		})
	}
	// As many requests as the owner's cap allows hang at the server (a
	// new owner starts below capN, see quota.RampStart), the rest wait
	// for a slot; then the caller gives up on all of them.
	for range min(capN, quota.RampStart) {
		<-arrived
	}
	cancel()
	wg.Wait()

	hang.Store(false)
	// These take milliseconds; the deadline only bounds a failure (a
	// leaked slot would make them wait for its hour-long lease).
	ctx, cancel = context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 100 {
		wg.Go(func() {
			resp, err := get(ctx, 100+i)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("request %d: %s", i, resp.Status)
			}
		})
	}
	wg.Wait()
	buckets := mustBuckets(t, s)
	if len(buckets) != 1 {
		t.Fatalf("%d buckets, want the token's one", len(buckets))
	}
	var a transport.Slot
	for id, bk := range buckets {
		if len(bk.Leases) != 0 {
			t.Errorf("bucket %s holds %d leases", id, len(bk.Leases))
		}
		a = transport.Slot{Owner: transport.OwnerID{Provider: id.Provider, Owner: id.Owner}, Bucket: id}
	}
	if o := ownerOf(t, s, a); len(o.Leases) != 0 {
		t.Errorf("owner holds %d leases", len(o.Leases))
	}
	// The owner's whole concurrency is there to take.
	now := time.Now()
	for n := range capN {
		l := quota.Lease{ID: uint64(1e9 + n), Until: now.Add(time.Minute)}
		if _, w := reserve(t, s, capped(capN), l, now, a); w != 0 {
			t.Fatalf("slot %d of %d: wait %v", n+1, capN, w)
		}
	}
}

func mustBuckets(t *testing.T, s transport.State) map[transport.BucketID]quota.Bucket {
	t.Helper()
	all, err := s.Buckets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// A worker is the test binary run again with these variables set: it
// sends its GETs through a transport over the State at the DSN and exits.
const (
	envWorker = "RATEKEEPER_STATETEST_WORKER"
	envDSN    = "RATEKEEPER_STATETEST_DSN"
	envURL    = "RATEKEEPER_STATETEST_URL"
	envCount  = "RATEKEEPER_STATETEST_COUNT"
)

// processCap is the owner's concurrency cap in the multi-process case.
const processCap = 3

// Main runs the tests, or the worker job when this process is a worker.
func Main(m *testing.M, open OpenFunc) {
	if os.Getenv(envWorker) != "" {
		if err := work(open); err != nil {
			fmt.Fprintln(os.Stderr, "statetest worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func work(open OpenFunc) error {
	ctx := context.Background()
	s, closeState, err := open(ctx, os.Getenv(envDSN))
	if err != nil {
		return err
	}
	defer closeState()
	n, err := strconv.Atoi(os.Getenv(envCount))
	if err != nil {
		return err
	}
	url := os.Getenv(envURL)
	tr, err := newTransport(s, url, processCap)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	jobs := make(chan int)
	for range 2 * processCap {
		wg.Go(func() {
			for i := range jobs {
				req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/repos/o/r%d", url, i), nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d of %d requests failed", f, n)
	}
	return nil
}

// testProcesses: two processes share one owner through the database, with
// a simulated GitHub that counts what each owner has in flight and what it
// spends: never more than the cap in flight, never a refusal.
func testProcesses(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	// Opening it here creates the schema before the workers race to.
	_, closeState, err := b.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer closeState()
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: 40, Window: 2 * time.Second,
		Latency:   5 * time.Millisecond,
		Tokens:    []sim.TokenConfig{{Token: "tok-statetest-1", Owner: "alice"}},
		Secondary: &sim.SecondaryConfig{MaxConcurrent: processCap, Penalty: time.Minute}}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 2, 30
	var wg sync.WaitGroup
	for range workers {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), envWorker+"=1", envDSN+"="+dsn, envURL+"="+ts.URL, envCount+"="+strconv.Itoa(each))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := cmd.Wait(); err != nil {
				t.Errorf("worker: %v\n%s", err, stderr.String())
			}
		})
	}
	wg.Wait()
	st := srv.Stats().Total
	if st.Accepted != workers*each || st.Violations != 0 || st.MaxInFlight > processCap {
		t.Fatalf("accepted %d of %d, violations %d, at most %d in flight (cap %d)",
			st.Accepted, workers*each, st.Violations, st.MaxInFlight, processCap)
	}
}
