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
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/memory"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/transport"
)

// refusalCount counts the 429s a process received, by the server's
// window they came in.
type refusalCount struct {
	base   http.RoundTripper
	window time.Duration

	mu sync.Mutex
	by map[int64]int
}

func (rc *refusalCount) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rc.base.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		rc.mu.Lock()
		rc.by[time.Now().UnixNano()/int64(rc.window)]++
		rc.mu.Unlock()
	}
	return resp, err
}

// TestFleetLearnsAnUnannouncedLimit: 8 processes — each a transport with
// its own State, all on one database — read GitLab
// projects by their encoded paths (group%2Fproject), 4 requests at a time
// each, against a server whose Projects API allows 60 requests per aligned
// 10 s and says nothing of it until it refuses (429 with Retry-After, no
// rate-limit header). After 3 windows without a refusal the limit the
// fleet learnt is within a tenth of the server's 60, and stays so; no
// refusal reaches a caller. Before the fleet's successes were counted in
// the scope's shared state, the first refusal set the limit to one
// process's share (about 8) and it rose by a tenth per clean window.
//
// The database is the memory store, on the bubble's clock: SQLite's busy
// handler sleeps on a timer while another goroutine waits on a mutex,
// which keeps a synctest bubble's clock from moving. The same fleet runs
// on SQLite and PostgreSQL in the State suite (statetest's
// FleetLearnsAScopesLimit), on an injected clock.
func TestFleetLearnsAnUnannouncedLimit(t *testing.T) {
	const (
		window  = 10 * time.Second
		limit   = 60
		fleet   = 8
		each    = 4
		windows = 13
	)
	synctest.Test(t, func(t *testing.T) {
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "gitlab", Limit: 100_000, Window: time.Hour,
			Latency: 20 * time.Millisecond,
			Tokens:  []sim.TokenConfig{{Token: "tok-fleet-0001", Owner: "alice"}},
			EndpointLimits: []sim.EndpointLimitConfig{{Pattern: "GET /api/v4/projects/*", Limit: limit, Window: window,
				Refusal: sim.RefusalRetryAfter}}}}})
		if err != nil {
			t.Fatal(err)
		}
		db, err := memory.New(store.Options{Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		refusals := &refusalCount{base: srv.Transport(""), window: window, by: map[int64]int{}}
		var states []*quotastate.State
		var trs []*transport.Transport
		for range fleet {
			p, err := provider.New("gitlab", provider.GitLab, "http://gitlab.test/api/v4")
			if err != nil {
				t.Fatal(err)
			}
			reg := provider.NewRegistry()
			if err := reg.Add(p); err != nil {
				t.Fatal(err)
			}
			st := quotastate.New(db, nil)
			tr, err := transport.New(transport.Options{
				Providers:      reg,
				Pools:          map[string]*creds.Pool{"gitlab": creds.NewPool("gitlab", creds.NewToken("gitlab", 1, "tok-fleet-0001", "test"))},
				State:          st,
				Base:           refusals,
				SkipValidation: true,
				DisableCache:   true,
				MaxWait:        time.Hour,
				Policy:         quota.Policy{Kind: quota.Greedy},
			})
			if err != nil {
				t.Fatal(err)
			}
			states, trs = append(states, st), append(trs, tr)
		}
		start := time.Now() // aligned: synctest's clock starts at midnight
		end := start.Add(windows * window)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed []error
		for i, tr := range trs {
			for g := range each {
				wg.Go(func() {
					for n := 0; time.Now().Before(end); n++ {
						u := fmt.Sprintf("http://gitlab.test/api/v4/projects/group%%2Fproject-%d-%d-%d", i, g, n)
						req, _ := http.NewRequest(http.MethodGet, u, nil)
						resp, err := tr.RoundTrip(req)
						if err == nil {
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							if resp.StatusCode != http.StatusOK {
								err = fmt.Errorf("%s: status %d", u, resp.StatusCode)
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
		// At each window's end (a little after, so its last answers are
		// settled), the limit the fleet learnt.
		clean, checked := 0, 0
		for w := int64(0); w < windows-1; w++ {
			time.Sleep(time.Until(start.Add(time.Duration(w+1)*window + window/20)))
			refusals.mu.Lock()
			refused := refusals.by[start.UnixNano()/int64(window)+w]
			refusals.mu.Unlock()
			if refused == 0 {
				clean++
			}
			learnt := scopeLimit(t, states[0])
			t.Logf("window %d: %d refused; learnt %d (provisional %v)", w, refused, learnt.Limit, learnt.Provisional)
			if clean >= 3 {
				checked++
				if d := learnt.Limit - limit; d < -limit/10 || d > limit/10 {
					t.Errorf("after window %d (%d without a refusal) the learnt limit is %d, want %d within a tenth", w, clean, learnt.Limit, limit)
				}
			}
		}
		wg.Wait()
		if len(failed) > 0 {
			t.Errorf("%d requests failed (first: %v)", len(failed), failed[0])
		}
		if checked < 2 {
			t.Errorf("only %d windows checked after 3 without a refusal", checked)
		}
		for i := range trs {
			trs[i].Close()
			states[i].Close(context.Background())
		}
	})
}

// scopeLimit is the one scope the State knows.
func scopeLimit(t *testing.T, st *quotastate.State) quota.Bucket {
	t.Helper()
	bs, err := st.Buckets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for id, b := range bs {
		if transport.IsScope(id.Resource) {
			return b
		}
	}
	return quota.NewBucket()
}
