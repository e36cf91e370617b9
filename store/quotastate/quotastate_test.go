package quotastate_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/memory"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/transport"
	"github.com/ratekeeper/ratekeeper/transport/statetest"
)

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openState(ctx context.Context, dsn string) (transport.State, func() error, error) {
	s, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		return nil, nil, err
	}
	st := quotastate.New(s, nil)
	return st, func() error { return errors.Join(st.Close(context.Background()), s.Close()) }, nil
}

// The shared State passes the suite every State must pass, on SQLite and
// PostgreSQL (and on the memory store, which it also accepts).
func TestStateSuite(t *testing.T) {
	backends := map[string]statetest.Backend{
		"sqlite": {
			New:    func(t *testing.T) transport.State { return quotastate.New(openSQLite(t), nil) },
			NewDSN: func(t testing.TB) string { return filepath.Join(t.TempDir(), "state.db") },
			Open:   openState,
		},
		"postgres": {
			New: func(t *testing.T) transport.State {
				s, closeState, err := openState(t.Context(), storetest.NewPostgresSchema(t, storetest.PostgresBase(t)))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { closeState() })
				return s
			},
			NewDSN: func(t testing.TB) string { return storetest.NewPostgresSchema(t, storetest.PostgresBase(t)) },
			Open:   openState,
		},
		"memory-store": {
			New: func(t *testing.T) transport.State {
				s, err := memory.New(store.Options{})
				if err != nil {
					t.Fatal(err)
				}
				return quotastate.New(s, nil)
			},
		},
	}
	for _, name := range []string{"sqlite", "postgres", "memory-store"} {
		t.Run(name, func(t *testing.T) { statetest.Run(t, backends[name]) })
	}
}

// countingStore counts the transactions that write.
type countingStore struct {
	store.Store
	mu     sync.Mutex
	writes int
}

func (c *countingStore) UpdateMany(ctx context.Context, keys []string, fn func([]*store.Record) error) error {
	wrote := false
	err := c.Store.UpdateMany(ctx, keys, func(recs []*store.Record) error {
		before := make([]string, len(recs))
		for i, r := range recs {
			before[i] = string(r.Value)
		}
		err := fn(recs)
		wrote = false
		for i, r := range recs {
			if string(r.Value) != before[i] {
				wrote = true
			}
		}
		return err
	})
	if err == nil && wrote {
		c.mu.Lock()
		c.writes++
		c.mu.Unlock()
	}
	return err
}

// count returns the writes counted since the last reset, and resets.
func (c *countingStore) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.writes
	c.writes = 0
	return n
}

func (c *countingStore) Update(ctx context.Context, key string, fn func(*store.Record) error) error {
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.Store.Update(ctx, key, fn)
}

// TestTwoWritesPerRequest: a request through the transport on shared state
// writes the state twice — its reservation and its settle — whatever the
// number of credentials to choose from, and a refused reservation writes
// nothing.
func TestTwoWritesPerRequest(t *testing.T) {
	cs := &countingStore{Store: openSQLite(t)}
	st := quotastate.New(cs, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "5000")
		w.Header().Set("X-RateLimit-Remaining", "4000")
		w.Header().Set("X-RateLimit-Reset", fmt.Sprint(time.Now().Add(time.Hour).Unix()))
		io.WriteString(w, "{}")
	}))
	defer srv.Close()
	tr, err := ratekeeper.NewTransport(ratekeeper.Options{
		Providers: []string{"github=" + srv.URL},
		Tokens:    map[string][]string{"github": {"tok-count-1", "tok-count-2", "tok-count-3"}},
		Tune:      func(o *transport.Options) { o.State, o.SkipValidation = st, true },
	})
	if err != nil {
		t.Fatal(err)
	}
	get := func() {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/repos/o/r", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for range 3 { // each token's bucket becomes known
		get()
	}
	cs.count()
	const n = 20
	for range n {
		get()
	}
	// A settle waits for the next reservation's transaction (or a
	// timer), so most requests write once.
	if err := st.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if w := cs.count(); w > 2*n {
		t.Fatalf("%d requests wrote the state %d times, want at most %d", n, w, 2*n)
	} else {
		t.Logf("%d requests, %d write transactions", n, w)
	}

	a := transport.Slot{Owner: transport.OwnerID{Provider: "p", Owner: "o"}, Bucket: transport.BucketID{Provider: "p", Owner: "o", Resource: "core"}}
	now := time.Now()
	if err := st.Settle(t.Context(), &transport.SettleParams{Slot: a, Now: now, Answer: quota.Answer{Reading: &headers.Reading{
		Status: 403, Limit: 10, Remaining: 0, Used: 10, Reset: now.Add(time.Hour), Limited: headers.Primary, Wait: time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		d, err := st.Reserve(t.Context(), &transport.ReserveParams{Slots: []transport.Slot{a}, Ask: quota.Ask{Policy: quota.DefaultPolicy()},
			Lease: quota.Lease{ID: 7, Until: now.Add(time.Minute)}, Now: now})
		if err != nil || d.Wait == 0 {
			t.Fatalf("reserve on a spent bucket: %v %v", d.Wait, err)
		}
	}
	if w := cs.count(); w != 1 {
		t.Fatalf("%d writes for one settle and three refused reservations, want 1", w)
	}
}

func TestCorruptedValueIgnoredAndLoggedOnce(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	var logs bytes.Buffer
	st := quotastate.New(s, slog.New(slog.NewTextHandler(&logs, nil)))
	a := transport.Slot{Owner: transport.OwnerID{Provider: "p", Owner: "o"}, Bucket: transport.BucketID{Provider: "p", Owner: "o", Resource: "core"}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	spent := &headers.Reading{Status: 200, Limit: 10, Remaining: 0, Used: 10, Reset: now.Add(time.Hour)}
	if err := st.Settle(ctx, &transport.SettleParams{Slot: a, Now: now, Answer: quota.Answer{Reading: spent}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Damage the value behind the store's back, the way a hand edit or an
	// older format would.
	all, _ := s.List(ctx, "bucket/")
	if err := s.Update(ctx, all[0].Key, func(r *store.Record) error { r.Value = []byte("{not json"); return nil }); err != nil {
		t.Fatal(err)
	}
	ask := quota.Ask{Policy: quota.DefaultPolicy()}
	for i := range 3 {
		// The spent bucket is forgotten: it is unknown again, so the
		// first request probes it.
		d, err := st.Reserve(ctx, &transport.ReserveParams{Slots: []transport.Slot{a}, Ask: ask,
			Lease: quota.Lease{ID: uint64(i + 1), Until: now.Add(time.Minute)}, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && d.Wait != 0 {
			t.Fatalf("corrupted value not ignored: wait %v", d.Wait)
		}
	}
	if n := strings.Count(logs.String(), "corrupted"); n != 1 {
		t.Fatalf("logged %d times:\n%s", n, logs.String())
	}
	all2, _ := st.Buckets(ctx)
	if len(all2[a.Bucket].Leases) != 1 {
		t.Fatalf("not rebuilt by the reservation: %+v", all2[a.Bucket])
	}
}

func TestCredentials(t *testing.T) {
	ctx := context.Background()
	st := quotastate.New(openSQLite(t), nil)
	if _, ok, err := st.LoadCredential(ctx, "github", "token:00"); ok || err != nil {
		t.Fatal(ok, err)
	}
	rec := transport.CredentialRecord{Invalid: true, Reason: "GET /user answered 401", ValidatedAt: time.Unix(1, 0).UTC()}
	if err := st.SaveCredential(ctx, "github", "token:00", rec); err != nil {
		t.Fatal(err)
	}
	got, ok, err := st.LoadCredential(ctx, "github", "token:00")
	if err != nil || !ok || got != rec {
		t.Fatalf("%+v %v %v", got, ok, err)
	}
}
