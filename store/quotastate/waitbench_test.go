package quotastate_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/transport"
)

// countingTx counts the store calls of a State, each one transaction or
// statement; it passes on the optional interfaces the store has.
type countingTx struct {
	store.Store
	n atomic.Int64
}

func (c *countingTx) Update(ctx context.Context, key string, fn func(*store.Record) error) error {
	c.n.Add(1)
	return c.Store.Update(ctx, key, fn)
}

func (c *countingTx) UpdateMany(ctx context.Context, keys []string, fn func([]*store.Record) error) error {
	c.n.Add(1)
	return c.Store.UpdateMany(ctx, keys, fn)
}

func (c *countingTx) Get(ctx context.Context, key string) (store.Record, error) {
	c.n.Add(1)
	return c.Store.Get(ctx, key)
}

func (c *countingTx) List(ctx context.Context, prefix string) ([]store.Record, error) {
	c.n.Add(1)
	return c.Store.List(ctx, prefix)
}

func (c *countingTx) GetMany(ctx context.Context, keys []string) ([]store.Record, error) {
	c.n.Add(1)
	return c.Store.(interface {
		GetMany(context.Context, []string) ([]store.Record, error)
	}).GetMany(ctx, keys)
}

func (c *countingTx) DatabaseNow(ctx context.Context) (time.Time, error) {
	c.n.Add(1)
	return c.Store.(interface {
		DatabaseNow(context.Context) (time.Time, error)
	}).DatabaseNow(ctx)
}

func (c *countingTx) Listen(ctx context.Context, channel string, fn func(string), waiting func() bool) error {
	return c.Store.(interface {
		Listen(context.Context, string, func(string), func() bool) error
	}).Listen(ctx, channel, fn, waiting)
}

// The wait measurement's window: from waitFrom to waitFrom+waitSpan after
// a worker starts, the fleet's waitSlots requests in flight are held by
// the server for slowDelay, and every other request waits for a slot.
const (
	waitFrom  = 1500 * time.Millisecond
	waitSpan  = 3 * time.Second
	slowDelay = 6 * time.Second
	waitSlots = 8
)

// waitWorker (envWorker=wait) sends one GET (the bucket and the round
// trip become known), then envCount GETs at once, which wait for a
// concurrency slot, and prints "window N", the store calls of the window.
func waitWorker() int {
	count, _ := strconv.Atoi(os.Getenv(envCount))
	url := os.Getenv(envURL)
	s, err := store.Open(context.Background(), os.Getenv(envDB), store.Options{Advisory: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer s.Close()
	cs := &countingTx{Store: s}
	st := quotastate.New(cs, nil)
	defer st.Close(context.Background())
	tr, err := ratekeeper.NewTransport(ratekeeper.Options{
		DB: "memory", Providers: []string{"github=" + url}, Policy: "greedy", MaxWait: time.Minute,
		Tune: func(o *transport.Options) {
			o.SkipValidation, o.State = true, st
			o.Pools = map[string]*creds.Pool{"github": workerPool()}
			// The fleet's one owner has waitSlots slots; 900 points a
			// minute would make the run last a minute.
			gh := o.Providers.Lookup("github")
			gh.Secondary.EndpointPointsPerMinute, gh.Secondary.MaxConcurrency = 0, waitSlots
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer tr.Close()
	var window int64
	var sampled sync.WaitGroup
	sampled.Go(func() {
		time.Sleep(waitFrom)
		c := cs.n.Load()
		time.Sleep(waitSpan)
		window = cs.n.Load() - c
	})
	failed := sendAll(tr, url+"/warm", 0, 1, 1)
	failed += sendAll(tr, url, 0, count, count)
	sampled.Wait()
	fmt.Printf("window %d\n", window)
	fmt.Printf("done %d failed %d\n", count, failed)
	return 0
}

// BenchmarkWaiting measures what 800 requests waiting across 8 processes
// cost the database: each process sends 100 GETs at once on one token
// whose owner allows 8 requests in flight; the server holds the first 8
// for 6 s (then answers in about a millisecond), so 792 wait for a slot.
// It reports the store calls per second (transactions or statements the
// States ran) from 1.5 s to 4.5 s after the start, and on PostgreSQL the
// database's committed transactions per second
// (pg_stat_database.xact_commit) over the same span. Run with
// -benchtime=1x.
func BenchmarkWaiting(b *testing.B) {
	backends := map[string]func(b *testing.B) string{
		"sqlite":   func(b *testing.B) string { return filepath.Join(b.TempDir(), "wait.db") },
		"postgres": func(b *testing.B) string { fleetPostgres(b); return storetest.NewPostgresDatabase(b, "rkwait") },
	}
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				calls, xacts := runWaiting(b, backends[name](b), name == "postgres")
				b.ReportMetric(calls, "store-calls/s")
				if name == "postgres" {
					b.ReportMetric(xacts, "xact/s")
				}
			}
		})
	}
}

// runWaiting runs the 8 waiting processes on dsn and returns the store
// calls per second and, when pg, the database's commits per second.
func runWaiting(b *testing.B, dsn string, pg bool) (calls, xacts float64) {
	var slow atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/warm") && slow.Add(1) <= waitSlots {
			time.Sleep(slowDelay)
		}
		w.Header().Set("X-RateLimit-Limit", "1000000")
		w.Header().Set("X-RateLimit-Remaining", "999000")
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
		io.WriteString(w, "{}")
	}))
	defer srv.Close()
	var commits func() int64
	if pg {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close(context.Background())
		commits = func() int64 {
			var n int64
			if err := conn.QueryRow(context.Background(), `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	var total atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			lines, err := runWorker([]string{envWorker + "=wait", envURL + "=" + srv.URL, envDB + "=" + dsn,
				envCount + "=100", envTokens + "=tok-wait-01=waiter"})
			if err == nil && lines[len(lines)-1] != "done 100 failed 0" {
				err = fmt.Errorf("worker said %q", lines[len(lines)-1])
			}
			if err != nil {
				b.Error(err)
				return
			}
			for _, l := range lines {
				if n, ok := strings.CutPrefix(l, "window "); ok {
					v, _ := strconv.ParseInt(n, 10, 64)
					total.Add(v)
				}
			}
		})
	}
	if pg {
		time.Sleep(waitFrom)
		c := commits()
		time.Sleep(waitSpan)
		xacts = float64(commits()-c) / waitSpan.Seconds()
	}
	wg.Wait()
	return float64(total.Load()) / waitSpan.Seconds(), xacts
}
