package transport

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// hosts is what the transport knows of hosts no provider owns: which it
// has warned about, and until when each has asked for a pause. No
// credential is ever sent to them; their answers' rate-limit headers still
// pace the requests that follow (anonymous, generic dialect: whatever
// headers.Parse reads). A host that states nothing is never held back.
type hosts struct {
	mu     sync.Mutex
	warned map[string]bool
	until  map[string]time.Time
}

// unmatchedRetries bounds how often a refused request to such a host is
// sent again after the pause its answer asked for.
const unmatchedRetries = 3

// roundTripUnmatched sends req, whose URL no provider owns, through the
// base transport untouched: after the pause an earlier answer of its host
// asked for (a *WaitError instead beyond the max wait), and again after a
// refusal's pause when its body can be replayed.
func (t *Transport) roundTripUnmatched(req *http.Request) (*http.Response, error) {
	host := strings.ToLower(req.URL.Host)
	t.warnUnmatched(host, req.URL)
	ctx := req.Context()
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	for attempt := 1; ; attempt++ {
		if err := t.waitHost(ctx, host); err != nil {
			closeBody(req)
			return nil, err
		}
		out := req
		if attempt > 1 && req.Body != nil && req.Body != http.NoBody {
			body, err := req.GetBody()
			if err != nil {
				return nil, fmt.Errorf("ratekeeper: replaying the request body: %w", err)
			}
			out = req.Clone(ctx)
			out.Body = body
		}
		resp, err := t.base.RoundTrip(out)
		if err != nil {
			return resp, err
		}
		now := t.opts.Now()
		r := headers.Parse(resp.StatusCode, resp.Header, nil, now)
		pause := hostPause(&r, now, t.opts.MaxPause)
		t.pauseHost(host, now.Add(pause))
		if r.Limited == headers.NotLimited || !replayable || attempt > unmatchedRetries {
			return resp, nil
		}
		t.emit(Event{Kind: EventRateLimited, Provider: host, Status: resp.StatusCode, Limit: r.Limited.String(), Wait: pause, Attempt: attempt})
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}
}

// hostPause is how long a host's answer asks its next request to wait: a
// refusal's Retry-After or reset (headers' own wait), or, for an answer
// that leaves nothing (remaining 0), until its reset; capped at maxPause.
// Zero for an answer that says nothing of the kind.
func hostPause(r *headers.Reading, now time.Time, maxPause time.Duration) time.Duration {
	var d time.Duration
	switch {
	case r.Limited != headers.NotLimited:
		d = r.Wait
	case r.Remaining == 0 && r.HasReset():
		d = r.Reset.Sub(now)
	}
	if maxPause > 0 {
		d = min(d, maxPause)
	}
	return max(d, 0)
}

func (t *Transport) pauseHost(host string, until time.Time) {
	t.hosts.mu.Lock()
	defer t.hosts.mu.Unlock()
	if t.hosts.until == nil {
		t.hosts.until = map[string]time.Time{}
	}
	if until.After(t.hosts.until[host]) {
		t.hosts.until[host] = until
	}
}

// waitHost waits out host's pause, or returns a *WaitError when it lasts
// longer than the max wait.
func (t *Transport) waitHost(ctx context.Context, host string) error {
	t.hosts.mu.Lock()
	until := t.hosts.until[host]
	t.hosts.mu.Unlock()
	now := t.opts.Now()
	w := until.Sub(now)
	if w <= 0 {
		return ctx.Err()
	}
	if w > t.opts.MaxWait {
		return &WaitError{Provider: host, Until: until, Wait: w, MaxWait: t.opts.MaxWait}
	}
	t.emit(Event{Kind: EventWaited, Provider: host, Wait: w})
	return t.sleep(ctx, w)
}

// warnUnmatched tells, once per host, that a URL matched no provider.
func (t *Transport) warnUnmatched(host string, u fmt.Stringer) {
	t.hosts.mu.Lock()
	if t.hosts.warned == nil {
		t.hosts.warned = map[string]bool{}
	}
	first := !t.hosts.warned[host]
	t.hosts.warned[host] = true
	t.hosts.mu.Unlock()
	if first {
		t.emit(Event{Kind: EventUnmatched, Provider: host, URL: u.String()})
	}
}
