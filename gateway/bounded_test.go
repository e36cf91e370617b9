package gateway

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// upstreamLog wraps the simulator's transport and records every request
// that reached it: when it was sent, its path, and whether its answer came
// back to the gateway's transport (which records every answer it gets in
// the quota state before anything else).
type upstreamLog struct {
	rt http.RoundTripper

	mu    sync.Mutex
	sends []upstreamSend
}

type upstreamSend struct {
	path     string
	at       time.Time
	answered bool
}

func (l *upstreamLog) RoundTrip(req *http.Request) (*http.Response, error) {
	at := time.Now()
	resp, err := l.rt.RoundTrip(req)
	l.mu.Lock()
	l.sends = append(l.sends, upstreamSend{path: req.URL.Path, at: at, answered: err == nil})
	l.mu.Unlock()
	return resp, err
}

func (l *upstreamLog) all() []upstreamSend {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]upstreamSend(nil), l.sends...)
}

// 200 clients at once against a quota of 40 per 4-second window, with a
// max wait of 5 s and an upstream that takes 250 ms (a tenth of the
// clients ask for the same URL, so their requests coalesce): every answer
// comes within the max wait plus the upstream's time; every refusal is a
// 429 whose Retry-After says truly when quota returns; every request the
// upstream saw had its answer recorded; and a client that leaves while
// waiting is never sent upstream.
//
// Before the gateway owned the wait, the transport's max wait bounded each
// single wait: requests queued behind others waited one window, then
// another, and answers came after up to 16.6 s.
func TestMaxWaitBoundsEveryAnswer(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testMaxWaitBoundsEveryAnswer(t, "") })
	t.Run("sqlite", func(t *testing.T) { testMaxWaitBoundsEveryAnswer(t, filepath.Join(t.TempDir(), "quota.db")) })
}

func testMaxWaitBoundsEveryAnswer(t *testing.T, db string) {
	synctest.Test(t, func(t *testing.T) {
		const (
			clients = 200
			maxWait = 5 * time.Second
			latency = 250 * time.Millisecond
		)
		api := githubAPI(40, 4*time.Second, simTokens...)
		api.Latency = latency
		var up *upstreamLog
		e := newEnv(t, []sim.APIConfig{api}, map[string][]string{"github": {"tok-alice-1"}}, func(o *Options) {
			o.Client.MaxWait = maxWait
			o.Client.DB = db
			up = &upstreamLog{rt: o.Client.Base}
			o.Client.Base = up
		})
		e.get(t, "/github/user") // learns the token's owner: from now on one send per request

		var mu sync.Mutex
		var failures []string
		fail := func(format string, args ...any) {
			mu.Lock()
			failures = append(failures, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		gone := map[string]time.Time{} // path → when its client left
		var answered, refused int
		var slowest time.Duration
		var wg sync.WaitGroup
		start := time.Now()
		for i := range clients {
			path := fmt.Sprintf("/github/repos/o/r%d", i)
			if i%10 == 4 {
				path = "/github/repos/o/shared" // these coalesce
			}
			ctx, cancel := context.WithCancel(t.Context())
			if i%10 == 9 {
				// Every tenth client gives up while waiting.
				leave := time.Second + time.Duration(i)*10*time.Millisecond
				mu.Lock()
				gone[path] = start.Add(leave)
				mu.Unlock()
				time.AfterFunc(leave, cancel)
			}
			wg.Go(func() {
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gwBase+path, nil)
				resp, err := e.client.Do(req)
				took := time.Since(start)
				mu.Lock()
				slowest = max(slowest, took)
				mu.Unlock()
				if took > maxWait+latency {
					fail("%s answered after %s, more than the max wait plus the upstream's %s", path, took, latency)
				}
				if err != nil || ctx.Err() != nil {
					return // the client left; nothing to answer
				}
				defer resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					mu.Lock()
					answered++
					mu.Unlock()
				case http.StatusTooManyRequests:
					mu.Lock()
					refused++
					mu.Unlock()
					now := time.Now()
					secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
					if err != nil || secs < 1 {
						fail("%s: 429 with Retry-After %q", path, resp.Header.Get("Retry-After"))
						return
					}
					back, exhausted := quotaReturns(e.srv, []string{"alice"}, now)
					retry := now.Add(time.Duration(secs) * time.Second)
					if exhausted && retry.Before(back) {
						fail("%s: Retry-After %ds at %s is early: quota returns at %s", path, secs, now.Sub(start), back.Sub(start))
					}
					if late := retry.Sub(back); late > time.Second+500*time.Millisecond {
						fail("%s: Retry-After %ds at %s is %s late: quota returns at %s", path, secs, now.Sub(start), late, back.Sub(start))
					}
				default:
					fail("%s: status %d", path, resp.StatusCode)
				}
			})
		}
		wg.Wait()
		for _, f := range failures {
			t.Error(f)
		}

		sends := up.all()
		st := e.srv.Stats()
		if int64(len(sends)) != st.Total.Requests {
			t.Errorf("the simulator saw %d requests, the gateway sent %d", st.Total.Requests, len(sends))
		}
		sentAfterLeaving := 0
		for _, s := range sends {
			if !s.answered {
				t.Errorf("%s was sent at %s and its answer never reached the quota state", s.path, s.at.Sub(start))
			}
			if left, ok := gone[s.path]; ok && !s.at.Before(left) {
				sentAfterLeaving++
				t.Errorf("%s was sent at %s, after its client left at %s", s.path, s.at.Sub(start), left.Sub(start))
			}
		}
		if st.Total.Violations != 0 {
			t.Errorf("%d violations upstream", st.Total.Violations)
		}
		if answered == 0 || refused == 0 {
			t.Errorf("%d answered, %d refused: the test did not push past the quota", answered, refused)
		}
		t.Logf("%d clients: %d answered, %d refused with Retry-After, %d left; slowest answer after %s; %d upstream requests",
			clients, answered, refused, len(gone), slowest, len(sends))
	})
}

// A client that leaves while the transport is busy with its request (here:
// learning its pass-through token's owner, which takes the upstream's
// 250 ms) is not sent upstream, and the quota the request had reserved is
// returned: the next request goes at once.
func TestClientGoneIsNotSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := githubAPI(100, time.Hour, simTokens...)
		api.Latency = 250 * time.Millisecond
		var up *upstreamLog
		e := newEnv(t, []sim.APIConfig{api}, nil, func(o *Options) {
			o.PassThrough = true
			o.Client.MaxWait = 5 * time.Second
			up = &upstreamLog{rt: o.Client.Base}
			o.Client.Base = up
		})
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gwBase+"/github/repos/o/left", nil)
		req.Header.Set("Authorization", "Bearer tok-alice-1")
		e.client.Do(req)
		synctest.Wait()
		for _, s := range up.all() {
			if s.path == "/github/repos/o/left" {
				t.Fatalf("sent at %s, after its client left", s.at)
			}
		}
		start := time.Now()
		if resp, body := e.do(t, http.MethodGet, "/github/repos/o/next", bearer("tok-alice-1"), nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("next request: %d %s", resp.StatusCode, body)
		}
		if took := time.Since(start); took != 250*time.Millisecond {
			t.Fatalf("next request took %s, want the upstream's 250ms: the left request's quota was kept", took)
		}
	})
}
