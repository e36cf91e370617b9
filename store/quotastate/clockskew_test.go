package quotastate_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/memory"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/transport"
)

// TestSkewedClocksShareOneBucket: two processes (two transports, each with
// its own State, on one store) share one GitHub token at GitHub's real
// numbers, 5,000 an hour and 900 points a minute per endpoint, through two
// windows. One machine's clock runs 3 s behind the server's and the
// database's. Had each written its own clock's times, the other would read
// the slow one's pacing times, pauses and resets 3 s early and send too
// soon (a secondary violation within the first window, as measured); on
// the database's clock neither overspends.
func TestSkewedClocksShareOneBucket(t *testing.T) {
	const (
		limit  = 5000
		window = time.Hour
		jobs   = limit + 500
		skew   = -3 * time.Second
	)
	synctest.Test(t, func(t *testing.T) {
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: limit, Window: window, Latency: 50 * time.Millisecond,
			Tokens: []sim.TokenConfig{{Token: "tok-skew-0001", Owner: "alice"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		db, err := memory.New(store.Options{Now: time.Now}) // the database's clock
		if err != nil {
			t.Fatal(err)
		}
		fast := skewedTransport(t, db, srv, 0)
		slow := skewedTransport(t, db, srv, skew)
		if off := slow.state.ClockOffset(t.Context()); off != -skew {
			t.Fatalf("the slow process measured an offset of %v to the database, want %v", off, -skew)
		}
		jobsCh := make(chan int)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed []error
		for _, tr := range []*transport.Transport{fast.tr, slow.tr} {
			for range 8 {
				wg.Go(func() {
					for i := range jobsCh {
						resp, err := tr.RoundTrip(httpGet(fmt.Sprintf("http://api.test/repos/o/r%d", i)))
						if err == nil {
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							if resp.StatusCode != http.StatusOK {
								err = fmt.Errorf("status %d", resp.StatusCode)
							}
						}
						if err != nil {
							mu.Lock()
							failed = append(failed, err)
							mu.Unlock()
						}
					}
				})
			}
		}
		for i := range jobs {
			jobsCh <- i
		}
		close(jobsCh)
		wg.Wait()
		st := srv.Stats()
		if len(failed) > 0 || st.Total.Accepted != jobs || st.Total.Violations != 0 {
			t.Fatalf("accepted %d of %d, %d violations (%d primary), %d failed (first: %v)",
				st.Total.Accepted, jobs, st.Total.Violations, st.Total.PrimaryViolations, len(failed), firstErr(failed))
		}
		for _, x := range []skewed{fast, slow} {
			x.tr.Close()
			x.state.Close(context.Background())
		}
	})
}

func firstErr(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}

type skewed struct {
	tr    *transport.Transport
	state *quotastate.State
}

// skewedTransport is a process whose clock is the server's plus skew,
// sharing its quota state in db.
func skewedTransport(t *testing.T, db store.Store, srv http.Handler, skew time.Duration) skewed {
	t.Helper()
	p, err := provider.New("github", provider.GitHub, "http://api.test")
	if err != nil {
		t.Fatal(err)
	}
	p.Secondary.MaxConcurrency = 8
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		t.Fatal(err)
	}
	st := quotastate.New(db, nil)
	tr, err := transport.New(transport.Options{
		Providers:      reg,
		Pools:          map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-skew-0001", "test"))},
		State:          st,
		Base:           recorderTransport{srv},
		SkipValidation: true,
		DisableCache:   true,
		MaxWait:        24 * time.Hour,
		Now:            func() time.Time { return time.Now().Add(skew) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return skewed{tr: tr, state: st}
}

func httpGet(url string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	return req
}
