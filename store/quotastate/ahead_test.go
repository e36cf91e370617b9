package quotastate_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/memory"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/transport"
)

// aheadStates opens two States on one SQLite database (two processes), the
// first through a keysStore, and makes one credential's bucket known with
// remaining of 5,000 left.
func aheadStates(t *testing.T, remaining int64) (ks *keysStore, st, other *quotastate.State, slot transport.Slot, now time.Time) {
	t.Helper()
	ks = &keysStore{Store: openSQLite(t)}
	st = quotastate.New(ks, nil)
	t.Cleanup(func() { st.Close(context.Background()) })
	other = quotastate.New(ks.Store, nil)
	t.Cleanup(func() { other.Close(context.Background()) })
	now = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	slot = pool(1)[0]
	spend(t, st, slot, remaining, now)
	ks.locked = nil
	return ks, st, other, slot, now
}

// inFlight is what another process sees in flight on slot's bucket and
// owner, once st wrote what waits.
func inFlight(t *testing.T, st, other *quotastate.State, slot transport.Slot, now time.Time) (bucket, owner int64) {
	t.Helper()
	if err := st.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	bs, err := other.Buckets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	os, err := other.Owners(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b, o := bs[slot.Bucket], os[slot.Owner]
	return b.InFlight(now), o.InFlight(now)
}

func settleAt(t *testing.T, st *quotastate.State, slot transport.Slot, id uint64, r *headers.Reading, now time.Time) {
	t.Helper()
	if err := st.Settle(t.Context(), &transport.SettleParams{Slot: slot, Lease: id, Now: now,
		Answer: quota.Answer{Reading: r, Counted: r != nil}}); err != nil {
		t.Fatal(err)
	}
}

func ok200(remaining int64, now time.Time) *headers.Reading {
	return &headers.Reading{Status: 200, Limit: 5000, Remaining: remaining, Reset: now.Add(time.Hour)}
}

// On a plentiful bucket, the transaction of a first reservation takes a
// block for the next ones: 32 requests then go without a transaction,
// every process counting them in flight all along; each answer ends one
// of them; a block used up at once is followed by a larger one; Close
// gives back what was not handed out.
func TestBlockDecidesWithoutTheDatabase(t *testing.T) {
	ks, st, other, slot, now := aheadStates(t, 4000)
	slots := []transport.Slot{slot}
	if i, w := reserveGreedy(t, st, slots, 1, now); i != 0 || w != 0 {
		t.Fatalf("first reservation: slot %d, wait %v", i, w)
	}
	if len(ks.locked) != 1 {
		t.Fatalf("%d transactions for the first reservation, want 1", len(ks.locked))
	}
	if b, o := inFlight(t, st, other, slot, now); b != 33 || o != 33 {
		t.Fatalf("another process sees %d in the bucket and %d in the owner in flight, want 33 (the request and its block of 32)", b, o)
	}
	reserveBlockOf32(t, ks, st, slots, now)
	if b, _ := inFlight(t, st, other, slot, now); b != 33 {
		t.Fatalf("in flight %d with the block handed out, want 33", b)
	}
	// The block is used up: the next reservation decides in the
	// database, and takes a larger block (used up at once: four times).
	ks.locked = nil
	reserveGreedy(t, st, slots, 34, now)
	if len(ks.locked) != 1 {
		t.Fatalf("the reservation after the block took %d transactions, want 1", len(ks.locked))
	}
	if b, _ := inFlight(t, st, other, slot, now); b != 33+1+128 {
		t.Fatalf("in flight %d, want %d (33, the new request and a block of 128)", b, 33+1+128)
	}
	// Each answer ends one request of the first block.
	for id := uint64(2); id <= 33; id++ {
		settleAt(t, st, slot, id, ok200(4000-int64(id), now), now)
	}
	if b, o := inFlight(t, st, other, slot, now); b != 1+1+128 || o != 1+1+128 {
		t.Fatalf("after the first block's answers: %d and %d in flight, want 130", b, o)
	}
	settleAt(t, st, slot, 1, nil, now)
	settleAt(t, st, slot, 34, nil, now)
	if err := st.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if b, o := inFlight(t, st, other, slot, now); b != 0 || o != 0 {
		t.Fatalf("after Close: %d and %d in flight, want 0 (the unused block given back)", b, o)
	}
}

// A bucket that would fall below half its limit, or below
// quota.PlentyFloor, takes no block: every reservation is decided in the
// database, and holds only its own request.
func TestNoBlockWhenNotPlentiful(t *testing.T) {
	for _, remaining := range []int64{2502, 1100} {
		ks, st, other, slot, now := aheadStates(t, remaining)
		for id := uint64(1); id <= 3; id++ {
			reserveGreedy(t, st, []transport.Slot{slot}, id, now)
		}
		if len(ks.locked) != 3 {
			t.Errorf("remaining %d: 3 reservations took %d transactions, want 3", remaining, len(ks.locked))
		}
		if b, _ := inFlight(t, st, other, slot, now); b != 3 {
			t.Errorf("remaining %d: %d in flight, want 3 (no block)", remaining, b)
		}
	}
}

// A refusal on the owner closes this process's block at once and gives
// back what it had not handed out, in the refusal's own transaction; the
// next request is decided in the database, which makes it wait.
func TestRefusalClosesTheOwnersBlocks(t *testing.T) {
	ks, st, other, slot, now := aheadStates(t, 4000)
	slots := []transport.Slot{slot}
	for id := uint64(1); id <= 3; id++ {
		reserveGreedy(t, st, slots, id, now)
	}
	refusal := &headers.Reading{Status: http.StatusTooManyRequests, Limit: 5000, Remaining: 3990, Reset: now.Add(time.Hour),
		Limited: headers.Secondary, RetryAfter: time.Minute, HasRetryAfter: true}
	settleAt(t, st, slot, 2, refusal, now)
	if b, o := inFlight(t, st, other, slot, now); b != 2 || o != 2 {
		t.Fatalf("after the refusal: %d and %d in flight, want 2 (requests 1 and 3; the block's 30 unused given back)", b, o)
	}
	ks.locked = nil
	if _, w := reserveGreedy(t, st, slots, 4, now); w == 0 {
		t.Fatal("a request went after the refusal: the block still handed out units")
	}
	if len(ks.locked) == 0 && ks.reads == 0 {
		t.Fatal("the request after the refusal was not decided in the database")
	}
}

// A reservation that asked a second before its transaction decided (it
// waited its turn, or for the rows' locks, on a busy database) takes a
// block whose lease outlasts the leases of the requests that ask from the
// time it is taken: they go on its units, without a transaction.
func TestBlockOfALateTransactionServesRequestsAskedAfter(t *testing.T) {
	ks, st, _, slot, asked := aheadStates(t, 4000)
	now := asked.Add(time.Second) // when the transaction decides
	quotastate.UseBlockClock(st, func() time.Time { return now })
	slots := []transport.Slot{slot}
	reserveGreedy(t, st, slots, 1, asked)
	if len(ks.locked) != 1 {
		t.Fatalf("%d transactions for the first reservation, want 1", len(ks.locked))
	}
	reserveBlockOf32(t, ks, st, slots, now)
}

// A block hands out units for blockMaxAge; then what it did not hand out
// is given back. A request that ends without an answer gives its unit back
// to the open block, with nothing written.
func TestBlockExpiresAndTakesBackUnansweredUnits(t *testing.T) {
	ks, st, other, slot, now := aheadStates(t, 4000)
	var mu sync.Mutex
	clock := time.Now()
	quotastate.UseBlockClock(st, func() time.Time { mu.Lock(); defer mu.Unlock(); return clock })
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	slots := []transport.Slot{slot}
	reserveGreedy(t, st, slots, 1, now)
	reserveGreedy(t, st, slots, 2, now)
	ks.locked = nil
	settleAt(t, st, slot, 2, nil, now) // back to the block
	if b, _ := inFlight(t, st, other, slot, now); b != 33 {
		t.Fatalf("in flight %d, want 33: an unanswered unit stays the block's", b)
	}
	if len(ks.locked) != 0 {
		t.Fatalf("an unanswered unit of an open block wrote %d transactions, want 0", len(ks.locked))
	}
	reserveGreedy(t, st, slots, 3, now)
	if len(ks.locked) != 0 {
		t.Fatal("the unit given back was not handed out again")
	}
	advance(quotastate.BlockMaxAge)
	quotastate.ExpireBlocks(st)
	if b, _ := inFlight(t, st, other, slot, now); b != 2 {
		t.Fatalf("in flight %d after the block expired, want 2 (requests 1 and 3)", b)
	}
	ks.locked = nil
	reserveGreedy(t, st, slots, 4, now)
	if len(ks.locked) != 1 {
		t.Fatalf("after the block expired a reservation took %d transactions, want 1", len(ks.locked))
	}
	settleAt(t, st, slot, 3, ok200(3990, now), now)
	settleAt(t, st, slot, 1, ok200(3989, now), now)
	settleAt(t, st, slot, 4, ok200(3988, now), now)
	if err := st.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if b, o := inFlight(t, st, other, slot, now); b != 0 || o != 0 {
		t.Fatalf("after every answer and Close: %d and %d in flight, want 0", b, o)
	}
}

// Two processes' transports share one SQLite database and one token of an
// API that limits only its quota (no cap on requests in flight), 100,000
// an hour: 600 requests on 8 goroutines each are all answered, the server
// counts 600, most decisions take no transaction, and once both are
// closed nothing is left in flight.
func TestBlocksThroughTheTransport(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := served.Add(1)
		w.Header().Set("X-RateLimit-Limit", "100000")
		w.Header().Set("X-RateLimit-Remaining", strconv.FormatInt(100000-n, 10))
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
		io.WriteString(w, "{}")
	}))
	defer srv.Close()
	db := openSQLite(t)
	var locks atomic.Int64
	counted := &lockCounter{Store: db, n: &locks}
	procs := make([]*quotastate.State, 2)
	trs := make([]*transport.Transport, 2)
	for i := range procs {
		procs[i] = quotastate.New(counted, nil)
		p, err := provider.New("github", provider.GitHub, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		p.Secondary = provider.Secondary{} // max_concurrency = 0, no points
		reg := provider.NewRegistry()
		if err := reg.Add(p); err != nil {
			t.Fatal(err)
		}
		trs[i], err = transport.New(transport.Options{Providers: reg, State: procs[i], SkipValidation: true, DisableCache: true,
			Pools:   map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-ahead-0001", "test"))},
			MaxWait: time.Minute, Policy: quota.Policy{Kind: quota.Greedy}})
		if err != nil {
			t.Fatal(err)
		}
	}
	const n = 600
	jobs := make(chan int)
	var wg sync.WaitGroup
	for _, tr := range trs {
		for range 8 {
			wg.Go(func() {
				for i := range jobs {
					resp, err := tr.RoundTrip(httpGet(fmt.Sprintf("%s/repos/o/r%d", srv.URL, i)))
					if err != nil {
						t.Error(err)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						t.Errorf("request %d: %s", i, resp.Status)
					}
				}
			})
		}
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if got := served.Load(); got != n {
		t.Errorf("the server answered %d requests, want %d", got, n)
	}
	if l := locks.Load(); l > n/4 {
		t.Errorf("%d transactions for %d requests, want at most a quarter: blocks were not used", l, n)
	}
	for i := range trs {
		trs[i].Close()
		if err := procs[i].Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	check := quotastate.New(db, nil)
	defer check.Close(context.Background())
	bs, err := check.Buckets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for id, b := range bs {
		if len(b.Leases) != 0 {
			t.Errorf("bucket %s holds %v after both processes closed", id.Resource, b.Leases)
		}
		if b.Remaining != 100000-n {
			t.Errorf("bucket %s: remaining %d, want %d", id.Resource, b.Remaining, 100000-n)
		}
	}
	os, err := check.Owners(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range os {
		if len(o.Leases) != 0 {
			t.Errorf("owner holds %v after both processes closed", o.Leases)
		}
	}
}

// lockCounter counts the store's write transactions.
type lockCounter struct {
	store.Store
	n *atomic.Int64
}

func (c *lockCounter) UpdateMany(ctx context.Context, keys []string, fn func([]*store.Record) error) error {
	c.n.Add(1)
	return c.Store.UpdateMany(ctx, keys, fn)
}

func (c *lockCounter) GetMany(ctx context.Context, keys []string) ([]store.Record, error) {
	return c.Store.(store.Snapshot).GetMany(ctx, keys)
}

// Requests to different endpoints, whose points nothing counts, share one
// block; a paced request never takes a unit of a greedy one's.
func TestBlockServesEveryEndpoint(t *testing.T) {
	ks, st, _, slot, now := aheadStates(t, 4000)
	ask := func(endpoint string, kind quota.Kind) *transport.ReserveParams {
		return &transport.ReserveParams{Slots: []transport.Slot{slot}, Now: now,
			Ask: quota.Ask{Policy: quota.Policy{Kind: kind}, Cost: quota.Cost{Points: 1, Endpoint: endpoint}}}
	}
	for id, p := range []*transport.ReserveParams{ask("GET /repos/*", quota.Greedy), ask("GET /users/*", quota.Greedy), ask("GET /orgs/*", quota.Greedy)} {
		p.Lease = quota.Lease{ID: uint64(id + 1), Until: now.Add(time.Minute)}
		if d, err := st.Reserve(t.Context(), p); err != nil || d.Wait != 0 {
			t.Fatalf("reservation %d: wait %v, %v", id+1, d.Wait, err)
		}
	}
	if len(ks.locked) != 1 {
		t.Fatalf("3 requests to 3 endpoints took %d transactions, want 1 (one block for all)", len(ks.locked))
	}
	paced := ask("GET /repos/*", quota.Spread)
	paced.Lease = quota.Lease{ID: 9, Until: now.Add(time.Minute)}
	if _, err := st.Reserve(t.Context(), paced); err != nil {
		t.Fatal(err)
	}
	if len(ks.locked) != 2 {
		t.Fatalf("a paced request took %d transactions in all, want 2: it must not take a greedy block's unit", len(ks.locked))
	}
}

// A request whose scope nothing is known of (GitLab's /projects/* before
// any refusal) decides on a block; once a refusal teaches the scope, the
// block is closed and the next request of the scope waits in the
// database for the scope's pause.
func TestBlockOnAnUnknownScope(t *testing.T) {
	ks, st, _, slot, now := aheadStates(t, 4000)
	slot.Scope = transport.BucketID{Provider: slot.Bucket.Provider, Owner: slot.Bucket.Owner, Resource: "/api/v4/projects/*"}
	slots := []transport.Slot{slot}
	for id := uint64(1); id <= 5; id++ {
		if _, w := reserveGreedy(t, st, slots, id, now); w != 0 {
			t.Fatalf("reservation %d waits %v", id, w)
		}
	}
	if len(ks.locked) != 1 {
		t.Fatalf("5 requests of an unknown scope took %d transactions, want 1 (a block)", len(ks.locked))
	}
	bare := &headers.Reading{Status: http.StatusTooManyRequests, Limit: quota.UnknownCount, Remaining: quota.UnknownCount,
		Used: quota.UnknownCount, Limited: headers.Primary}
	settleAt(t, st, slot, 3, bare, now)
	ks.locked = nil
	if _, w := reserveGreedy(t, st, slots, 6, now); w == 0 {
		t.Fatal("a request of the refused scope went at once")
	}
	if len(ks.locked) == 0 && ks.reads == 0 {
		t.Fatal("the request after the scope's refusal was not decided in the database")
	}
}

// Another process's primary refusal reaches this process's block: the
// refusal's transaction notifies, the block's holder reads its rows again
// and closes it, and no reservation goes after, although the block's age
// (its clock held still) would let it hand out units for ever.
func TestAnotherProcessRefusalClosesTheBlock(t *testing.T) {
	dsns := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "state.db") },
		"postgres": func(t *testing.T) string { return storetest.NewPostgresSchema(t, storetest.PostgresBase(t)) },
	}
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			dsn := dsns[name](t)
			open := func() *quotastate.State {
				s, err := store.Open(t.Context(), dsn, store.Options{})
				if err != nil {
					t.Fatal(err)
				}
				st := quotastate.New(s, nil)
				t.Cleanup(func() { st.Close(context.Background()); s.Close() })
				return st
			}
			st, other := open(), open()
			quotastate.UseBlockClock(st, func() time.Time { return time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC) })
			now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
			slot := pool(1)[0]
			spend(t, st, slot, 4000, now)
			slots := []transport.Slot{slot}
			if _, w := reserveGreedy(t, st, slots, 1, now); w != 0 {
				t.Fatalf("the first reservation waits %v", w)
			}
			if quotastate.OpenBlocks(st) != 1 {
				t.Fatal("no block was taken")
			}
			refusal := &headers.Reading{Status: http.StatusForbidden, Limit: 5000, Remaining: 0, Used: 5000,
				Reset: now.Add(time.Hour), Limited: headers.Primary}
			settleAt(t, other, slot, 0, refusal, now)
			// The news travels on its own: a notification, or SQLite's
			// data_version read every sqlite.DataVersionPoll.
			for deadline := time.Now().Add(10 * time.Second); quotastate.OpenBlocks(st) > 0 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			went := 0
			for id := uint64(2); id <= 40; id++ {
				if _, w := reserveGreedy(t, st, slots, id, now); w == 0 {
					went++
				}
			}
			if went != 0 {
				t.Fatalf("after another process's refusal %d of 39 reservations went, want 0", went)
			}
		})
	}
}

// Another process's refusal of a scope nothing was known of reaches this
// process's block for that scope at its next decision, on a store that
// sends no notification (memory): the refusal's transaction counts news
// in the store value that both share, and a block that has not heard it
// hands out nothing. Before, the block heard only at its age, and
// requests of the refused scope went meanwhile (fleetsim memory seed 2
// with -sim.plenty).
func TestAnotherProcessScopeRefusalReachesTheBlockAtOnce(t *testing.T) {
	s, err := memory.New(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, other := quotastate.New(s, nil), quotastate.New(s, nil)
	t.Cleanup(func() { st.Close(context.Background()); other.Close(context.Background()) })
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	quotastate.UseBlockClock(st, func() time.Time { return now })
	slot := pool(1)[0]
	spend(t, st, slot, 4000, now)
	slot.Scope = transport.BucketID{Provider: slot.Bucket.Provider, Owner: slot.Bucket.Owner, Resource: "/search/*"}
	slots := []transport.Slot{slot}
	for id := uint64(1); id <= 3; id++ {
		if _, w := reserveGreedy(t, st, slots, id, now); w != 0 {
			t.Fatalf("reservation %d waits %v", id, w)
		}
	}
	if quotastate.OpenBlocks(st) != 1 {
		t.Fatal("no block was taken")
	}
	// The other process's request of the scope, refused.
	if _, w := reserveGreedy(t, other, slots, 100, now); w != 0 {
		t.Fatalf("the other process's reservation waits %v", w)
	}
	refusal := &headers.Reading{Status: http.StatusTooManyRequests, Limit: quota.UnknownCount, Remaining: quota.UnknownCount,
		Used: quota.UnknownCount, Limited: headers.Primary, RetryAfter: time.Minute, HasRetryAfter: true}
	settleAt(t, other, slot, 100, refusal, now)
	went := 0
	for id := uint64(4); id <= 40; id++ {
		if _, w := reserveGreedy(t, st, slots, id, now); w == 0 {
			went++
		}
	}
	if went != 0 {
		t.Fatalf("after another process's refusal of the scope %d of 37 reservations went, want 0", went)
	}
}

// A block's age is counted to the time its request asks, on the
// transport's clock, which the transport reads just before it reserves:
// a request asking BlockMaxAge after the block was kept is decided on the
// rows even before the timer that expires the block has run, and one that
// asked before the block was kept (another goroutine's transaction took it
// meanwhile) may take a unit.
func TestBlockAgeCountsToTheRequestsTime(t *testing.T) {
	ks, st, _, slot, now := aheadStates(t, 4000)
	quotastate.UseBlockClock(st, func() time.Time { return now })
	slots := []transport.Slot{slot}
	reserveGreedy(t, st, slots, 1, now)
	if quotastate.OpenBlocks(st) != 1 {
		t.Fatal("no block was taken")
	}
	ks.locked = nil
	for id, at := range map[uint64]time.Time{2: now.Add(-time.Second), 3: now.Add(quotastate.BlockMaxAge - time.Millisecond)} {
		if _, w := reserveGreedy(t, st, slots, id, at); w != 0 || len(ks.locked) != 0 {
			t.Fatalf("a request asking %v after the block was kept: wait %v, %d transactions, want a unit of the block",
				at.Sub(now), w, len(ks.locked))
		}
	}
	if _, w := reserveGreedy(t, st, slots, 4, now.Add(quotastate.BlockMaxAge)); w != 0 || len(ks.locked) != 1 {
		t.Fatalf("a request asking the block's max age after it was kept: wait %v, %d transactions, want 1", w, len(ks.locked))
	}
}

// reserveBlockOf32 reserves leases 2 to 33 at now, the units of the block
// of 32 the first reservation took, and fails unless each goes at once on
// slots[0] without a transaction.
func reserveBlockOf32(t *testing.T, ks *keysStore, st *quotastate.State, slots []transport.Slot, now time.Time) {
	t.Helper()
	ks.locked = nil
	for id := uint64(2); id <= 33; id++ {
		if i, w := reserveGreedy(t, st, slots, id, now); i != 0 || w != 0 {
			t.Fatalf("reservation %d: slot %d, wait %v", id, i, w)
		}
	}
	if len(ks.locked) != 0 {
		t.Fatalf("32 reservations from the block took %d transactions, want 0 (the block's 32 units)", len(ks.locked))
	}
}

// An answer of a block's request that comes after its block closed (here
// too old) is judged by the block's copy still: one it leaves short of
// plenty, 0 remaining, is written within FlushDelay, as any other answer,
// so that the other processes hear it within that bound; one that leaves
// plenty may wait blockFlushDelay, as an open block's answers do, so that
// a busy process writes a few transactions a second. Before, every such
// answer waited blockFlushDelay (50 ms), and another process's request
// went 35 ms after one stating 0 remaining (fleetsim memory seed 269775).
func TestAnswerOfAClosedBlockIsWrittenSoon(t *testing.T) {
	for _, c := range []struct {
		remaining int64
		soon      bool
	}{{0, true}, {3990, false}} {
		t.Run(fmt.Sprint(c.remaining), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, err := memory.New(store.Options{})
				if err != nil {
					t.Fatal(err)
				}
				st, other := quotastate.New(s, nil), quotastate.New(s, nil)
				defer other.Close(context.Background())
				defer st.Close(context.Background())
				now := time.Now()
				slot := pool(1)[0]
				spend(t, st, slot, 4000, now)
				slots := []transport.Slot{slot}
				for id := uint64(1); id <= 2; id++ {
					if _, w := reserveGreedy(t, st, slots, id, now); w != 0 {
						t.Fatalf("reservation %d waits %v", id, w)
					}
				}
				time.Sleep(quota.BlockMaxAge + time.Millisecond)
				synctest.Wait()
				if n := quotastate.OpenBlocks(st); n != 0 {
					t.Fatalf("%d blocks open after their max age, want 0", n)
				}
				settleAt(t, st, slot, 2, ok200(c.remaining, now), time.Now())
				read := func() int64 {
					synctest.Wait()
					bs, err := other.Buckets(t.Context())
					if err != nil {
						t.Fatal(err)
					}
					return bs[slot.Bucket].Remaining
				}
				time.Sleep(quotastate.DefaultFlushDelay)
				if got := read(); (got == c.remaining) != c.soon {
					t.Fatalf("another process reads %d remaining %v after the answer stating %d; written then: %v, want %v",
						got, quotastate.DefaultFlushDelay, c.remaining, got == c.remaining, c.soon)
				}
				time.Sleep(quotastate.BlockFlushDelay)
				if got := read(); got != c.remaining {
					t.Fatalf("another process reads %d remaining after blockFlushDelay, want %d", got, c.remaining)
				}
			})
		})
	}
}
