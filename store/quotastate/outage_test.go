package quotastate_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/transport"
)

// countingTransport counts the requests that reach the server.
type countingTransport struct {
	h    http.Handler
	sent atomic.Int64
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.sent.Add(1)
	return recorderTransport{c.h}.RoundTrip(req)
}

// TestOutageSendsNothingUnreserved: for each class of transient error, on
// SQLite and PostgreSQL, a request made while the quota state's database
// is away waits for it, sends nothing meanwhile (no process guesses
// quota it could not reserve), and goes once the database is back, on
// quota reserved then; the bucket is never overspent.
func TestOutageSendsNothingUnreserved(t *testing.T) {
	for _, k := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"SQLite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "q.db") }},
		{"PostgreSQL", func(t *testing.T) string { return storetest.NewPostgresSchema(t, storetest.PostgresBase(t)) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			for _, e := range storetest.TransientErrors(t) {
				t.Run(e.Name, func(t *testing.T) {
					const limit = 5
					srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: limit, Window: time.Hour,
						Tokens: []sim.TokenConfig{{Token: "tok-outage-0001", Owner: "alice"}}}}})
					if err != nil {
						t.Fatal(err)
					}
					db, err := store.Open(t.Context(), k.dsn(t), store.Options{})
					if err != nil {
						t.Fatal(err)
					}
					defer db.Close()
					faulty := storetest.NewFaulty(db)
					clk := storetest.NewInstantWaits(time.Now())
					shared := store.WaitOutages(faulty, store.NewOutage(store.OutageOptions{Timeout: 2 * time.Minute, Now: clk.Now, After: clk.After}))
					st := quotastate.New(shared, nil)
					defer st.Close(t.Context())
					wire := &countingTransport{h: srv}
					tr := outageTransport(t, st, wire)
					defer tr.Close()

					get := func() int {
						resp, err := tr.RoundTrip(httpGet("http://api.test/repos/o/r"))
						if err != nil {
							t.Fatalf("request: %v", err)
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						return resp.StatusCode
					}
					for range 2 {
						if code := get(); code != http.StatusOK {
							t.Fatalf("status %d before the outage", code)
						}
					}
					before := wire.sent.Load()
					const outageCalls = 12
					var sentDuring atomic.Int64
					var failures atomic.Int64
					faulty.OnFail(func() {
						if failures.Add(1) == outageCalls {
							sentDuring.Store(wire.sent.Load() - before)
							faulty.Heal()
						}
					})
					faulty.Fail(e.Err, -1)
					if code := get(); code != http.StatusOK {
						t.Fatalf("status %d for the request made during the outage; want it to wait and go", code)
					}
					if failures.Load() < outageCalls {
						t.Fatalf("the database failed %d calls; want the outage of %d to be met", failures.Load(), outageCalls)
					}
					if n := sentDuring.Load(); n != 0 {
						t.Errorf("%d requests were sent while the quota state could not be read; want none", n)
					}
					if n := wire.sent.Load() - before; n != 1 {
						t.Errorf("%d requests sent after the outage; want the one that waited", n)
					}
					if s := srv.Stats(); s.Total.Violations != 0 {
						t.Errorf("%d violations; want none", s.Total.Violations)
					}
				})
			}
		})
	}
}

// outageTransport is a process's transport sharing its quota state in st,
// sending through wire.
func outageTransport(t *testing.T, st *quotastate.State, wire http.RoundTripper) *transport.Transport {
	t.Helper()
	p, err := provider.New("github", provider.GitHub, "http://api.test")
	if err != nil {
		t.Fatal(err)
	}
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		t.Fatal(err)
	}
	tr, err := transport.New(transport.Options{
		Providers:      reg,
		Pools:          map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-outage-0001", "test"))},
		State:          st,
		Base:           wire,
		SkipValidation: true,
		DisableCache:   true,
		MaxWait:        time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// snapshotCounter counts the snapshot reads (store.Snapshot) of a store.
type snapshotCounter struct {
	*storetest.Faulty
	reads atomic.Int64
}

func (c *snapshotCounter) GetMany(ctx context.Context, keys []string) ([]store.Record, error) {
	c.reads.Add(1)
	return c.Faulty.GetMany(ctx, keys)
}

// TestNoStaleViewAfterAnOutage: a decision may choose on what this process
// last saw of the rows instead of reading them, but not on what it saw
// before an outage of the database: what other processes did meanwhile is
// unknown, so the first decision after it reads the rows.
func TestNoStaleViewAfterAnOutage(t *testing.T) {
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: 100, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-view-0001", Owner: "alice"}, {Token: "tok-view-0002", Owner: "bob"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "v.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	counted := &snapshotCounter{Faulty: storetest.NewFaulty(db)}
	clk := storetest.NewInstantWaits(time.Now())
	st := quotastate.New(store.WaitOutages(counted, store.NewOutage(store.OutageOptions{Now: clk.Now, After: clk.After})), nil)
	defer st.Close(t.Context())
	p, err := provider.New("github", provider.GitHub, "http://api.test")
	if err != nil {
		t.Fatal(err)
	}
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		t.Fatal(err)
	}
	tr, err := transport.New(transport.Options{
		Providers: reg,
		Pools: map[string]*creds.Pool{"github": creds.NewPool("github",
			creds.NewToken("github", 1, "tok-view-0001", "test"), creds.NewToken("github", 2, "tok-view-0002", "test"))},
		State: st, Base: recorderTransport{srv}, SkipValidation: true, DisableCache: true, MaxWait: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	get := func() {
		t.Helper()
		resp, err := tr.RoundTrip(httpGet("http://api.test/repos/o/r"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// Learn both owners' buckets, then see that a decision right after
	// another chooses on the view, without a read.
	for range 4 {
		get()
	}
	// The last answer written on its own, as the timer writes it
	// (FlushDelay) when the next request is slow to come: what it
	// wrote is the rows as they are, still good for the next decision.
	if err := st.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	reads := counted.reads.Load()
	get()
	if counted.reads.Load() != reads {
		t.Fatalf("a decision right after another read the rows; want it to choose on the view (fresh for 500 ms)")
	}
	// An outage: the next decision's transaction waits it out.
	counted.Fail(storetest.TransientErrors(t)[0].Err, 3)
	get()
	reads = counted.reads.Load()
	get()
	if counted.reads.Load() == reads {
		t.Errorf("the first decision after an outage chose on what was seen before it; want the rows read")
	}
}
