package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/transport"
)

// The gateway owns each request's wait for quota, rather than leaving it
// to the transport, because a client holds a connection open meanwhile
// and must get its answer within the max wait: the transport's max wait
// bounds one wait, and a request that queues behind others waits several
// times (each next wait computed after the others went). So the gateway's
// transports run with a max wait of one nanosecond — every wait comes back
// at once as a *transport.WaitError saying when quota returns — and send
// waits here, until the request can go or until the quota returns after
// the request's deadline (then the client gets 429 with that time).
//
// Once a request is sent, it is no longer tied to its client: an answer
// the upstream has charged is always read and recorded in the quota state
// (a client that left still costs quota; that is what the state must
// know), and the upstream is given Options.UpstreamTimeout to answer.

// transportMaxWait is the max wait of the gateway's transports: any wait
// at all is returned to the gateway's own loop.
const transportMaxWait = time.Nanosecond

// minRetry is the shortest pause before asking the transport again, so a
// wait that rounds to nothing does not spin.
const minRetry = time.Millisecond

// nextTry decides, at now, for a request that must have stopped waiting
// for quota by deadline and whose quota returns at until: wait d and ask
// again, or (ok false) give up now, since waiting would end past the
// deadline.
func nextTry(now, until, deadline time.Time) (d time.Duration, ok bool) {
	if until.After(deadline) {
		return 0, false
	}
	d = max(until.Sub(now), minRetry)
	if left := deadline.Sub(now); d > left {
		d = max(left, 0)
	}
	return d, true
}

// quotaError is a request refused because its quota returns after its
// deadline: the gateway answers 429 with Retry-After.
type quotaError struct {
	*transport.WaitError
	maxWait time.Duration // the gateway's max wait for this provider
	waited  time.Duration // how long the request had waited already
}

func (e *quotaError) Unwrap() error { return e.WaitError }

// errClientGone is what a request whose clients all left gets instead of
// being sent.
var errClientGone = errors.New("the client went away before the request was sent")

// send passes one request to its route's rate-keeping transport, waiting
// for quota as long as the request's deadline allows: it asks the
// transport, which either sends the request or says when quota returns;
// in the second case it waits until then (or until some answer changes
// the quota state) and asks again, unless quota returns after the
// deadline. It stops waiting when out's context ends: nobody wants the
// answer any more.
func (g *Gateway) send(out *http.Request) (*http.Response, error) {
	ri := routeOf(out.Context())
	wanted := out.Context()
	var waited time.Duration
	for {
		resp, err := g.attempt(out, ri)
		var we *transport.WaitError
		if !errors.As(err, &we) {
			if err == nil && waited > 0 {
				g.noteWait(ri.p.Name, resp, waited)
			}
			return resp, err
		}
		now := g.now()
		d, ok := nextTry(now, we.Until, ri.deadline)
		if !ok {
			return nil, &quotaError{WaitError: we, maxWait: ri.maxWait, waited: waited}
		}
		// A wait until a known time (pacing, the reset, a penalty's end)
		// is slept: an early wake would only cost a decision (with a
		// shared database, a transaction). A wait on requests in flight
		// (a first probe, an owner's concurrency full, a bucket spent
		// only in flight) ends at the answer that may free it, as the
		// transport's own waits do: its WaitError says when quota
		// returns as one round trip from now, which is also when that
		// answer comes, and a request that asked just before the answer
		// would otherwise wait one more round trip.
		span := g.waitSpan(out, we)
		next, err := we.Await(wanted, d)
		endWait(span, g.now().Sub(now), err)
		if err != nil {
			return nil, errClientGone
		}
		// The next attempt carries the wake that ended the wait, if
		// one did, for the transport to hand on once it has decided.
		out = out.WithContext(next)
		waited += g.now().Sub(now)
		ri.waited = waited
	}
}

// attempt is one call of the route's transport. Its context keeps out's
// values but not its cancellation, so that nothing the transport does
// after sending (reading the answer, recording it in the quota state) is
// cut short by a client leaving; the guard in the context lets the
// upstream wrapper refuse to send for a client that has left.
func (g *Gateway) attempt(out *http.Request, ri *route) (*http.Response, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(out.Context()))
	gd := &sendGuard{wanted: out.Context(), url: out.URL}
	req := out.WithContext(context.WithValue(ctx, guardKey{}, gd))
	if out.GetBody != nil {
		body, err := out.GetBody()
		if err != nil {
			cancel()
			return nil, err
		}
		req.Body = body
	}
	resp, err := ri.rt.RoundTrip(req)
	if err != nil {
		cancel()
		return nil, err
	}
	// The answer is recorded: from now on only the client reads it, and
	// the upstream request ends when the client leaves.
	stop := context.AfterFunc(out.Context(), cancel)
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: func() { stop(); cancel() }}
	return resp, nil
}

// noteWait records that a request waited for quota before it went.
func (g *Gateway) noteWait(name string, resp *http.Response, waited time.Duration) {
	g.metrics.waits.WithLabelValues(name).Observe(waited.Seconds())
	g.onEvent(transport.Event{Kind: transport.EventWaited, Provider: name,
		Credential: resp.Header.Get(transport.HeaderCredential), Wait: waited})
}

// sendGuard travels in the context of one attempt, for the upstream
// wrapper to recognise the request itself among what the transport sends
// (it also sends "who am I" requests to learn a token's owner).
type sendGuard struct {
	wanted context.Context // ends when no client wants the answer
	url    *url.URL        // the request's URL: the transport's copy of the request shares it
}

type guardKey struct{}

func guardOf(ctx context.Context) *sendGuard {
	g, _ := ctx.Value(guardKey{}).(*sendGuard)
	return g
}

// upstream is the base transport of the gateway's rate-keeping
// transports: the last step before the wire. It refuses to send a request
// whose clients have all left (the transport then returns the quota it
// had reserved), and gives the upstream timeout to answer with a header.
type upstream struct {
	base    http.RoundTripper
	timeout time.Duration
}

func (u upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if gd := guardOf(req.Context()); gd != nil && req.URL == gd.url {
		if gd.wanted.Err() != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, errClientGone
		}
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(u.timeout, func() { cancel(errUpstreamTimeout) })
	resp, err := u.base.RoundTrip(req.WithContext(ctx))
	timer.Stop()
	if err != nil {
		timedOut := context.Cause(ctx) == errUpstreamTimeout
		cancel(nil)
		if timedOut {
			name := req.URL.Host
			if ri := routeOf(req.Context()); ri != nil {
				name = ri.p.Name
			}
			return nil, &timeoutError{provider: name, after: u.timeout}
		}
		return nil, err
	}
	// The header came: the answer is the transport's to record, even if
	// the timer fired at the same moment (its body may then be cut).
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
	return resp, nil
}

// errUpstreamTimeout is the cause of a request that got no answer within
// the upstream timeout.
var errUpstreamTimeout = errors.New("no answer within the upstream timeout")

type timeoutError struct {
	provider string
	after    time.Duration
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("upstream %s sent no answer within %s (--upstream-timeout)", e.provider, e.after)
}

func (e *timeoutError) Unwrap() error { return errUpstreamTimeout }

// cancelBody ends a request's context when its body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel func()
	once   sync.Once
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.cancel)
	return err
}

// gatewayWaits returns the gateway's max wait per provider of reg (a
// provider's configured max wait wins over the client's, as in the
// transport) and a copy of reg whose providers have no max wait of their
// own, so that the transport's max wait (transportMaxWait) applies to
// every one of them.
func gatewayWaits(reg *provider.Registry, clientWait time.Duration) (map[string]time.Duration, *provider.Registry, error) {
	waits := map[string]time.Duration{}
	out := provider.NewRegistry()
	for _, p := range reg.Providers() {
		waits[p.Name] = clientWait
		if p.Limits.MaxWait > 0 {
			waits[p.Name] = p.Limits.MaxWait
		}
		q := *p
		q.Limits.MaxWait = 0
		if err := out.Add(&q); err != nil {
			return nil, nil, err
		}
	}
	return waits, out, nil
}
