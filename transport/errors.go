package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/sleep"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
)

// WaitError is returned instead of waiting when the quota a request needs
// returns later than the transport's MaxWait. It carries when the quota
// returns, so a caller can schedule the work for then: package tasks turns
// it into a durable sleep (it finds it with errors.As against any error
// with a RetryAt method).
type WaitError struct {
	Provider string
	Resource string
	// Scope is the request's endpoint group of a limit the server does
	// not announce (GitLab's Users API, say), when it has one: the wait
	// may be for it rather than the resource.
	Scope string
	// Credential is the masked credential that could go soonest.
	Credential string
	// Until is when the quota returns; Wait is how far away that was.
	Until   time.Time
	Wait    time.Duration
	MaxWait time.Duration
	// Latest is when the quota returns if no answer in flight frees
	// any: Until, unless the wait is on answers (OnAnswer), when Until
	// is only the next answer, about a round trip away, and Latest the
	// decision's own latest moment (a bucket's refill, when requests in
	// flight spend it; their leases' lapse, for a concurrency slot).
	// Zero when not known.
	Latest time.Time

	// t is the transport that decided (nil: a WaitError made
	// elsewhere). onAnswer says the wait is on requests in flight (a
	// first probe, a concurrency slot, a bucket spent only in flight):
	// an answer may end it, and Await wakes at that answer. gen is the
	// transport's count of wakes when the decision began (see waiters).
	t        *Transport
	onAnswer bool
	gen      uint64
	// waited is the quota the request waited for (see ReadyAt).
	waited *waitedFor
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("ratekeeper: %s %s quota returns at %s (in %s), beyond the max wait of %s",
		e.Provider, e.Resource, e.Until.UTC().Format(time.RFC3339), e.Wait.Round(time.Second), e.MaxWait)
}

// RetryAt is when the request could be sent.
func (e *WaitError) RetryAt() time.Time { return e.Until }

// Await waits d (until RetryAt, or a caller's deadline before it) or
// until ctx ends, whose error it then returns; when the wait is on
// requests in flight it ends at the first answer that may have freed
// what the request lacks — of this transport, or of another process
// sharing its state that wakes it (Waker) — so that a caller waiting for
// quota itself (the gateway) asks again at once. A wake since the
// decision that returned e, before Await was called, ends it at once.
//
// It returns the context to send the request again with: ctx, carrying
// the wake when an answer ended the wait. The transport hands that wake
// on to the next waiter once the request has decided again, as it does
// for its own waiters, so one answer has the waiters decide one after
// the other, not all at once.
func (e *WaitError) Await(ctx context.Context, d time.Duration) (context.Context, error) {
	if e.t == nil {
		return ctx, sleep.For(ctx, d)
	}
	timer := e.t.opts.Clock.NewTimer(d)
	defer timer.Stop()
	if !e.onAnswer {
		select {
		case <-timer.C():
		case <-ctx.Done():
		}
		return ctx, ctx.Err()
	}
	q := &e.t.waiters
	w := q.join(e.gen, waitKey{})
	select {
	case baton := <-w.woken:
		return withWake(ctx, baton), nil
	case <-timer.C():
	case <-ctx.Done():
	}
	if !q.leave(w) {
		// A wake was handed over just as the wait ended.
		baton := <-w.woken
		if ctx.Err() == nil {
			return withWake(ctx, baton), nil
		}
		q.pass(baton)
	}
	return ctx, ctx.Err()
}

// wakeKey carries a wake handed to a request that waited outside the
// transport (WaitError.Await) into its next attempt.
type wakeKey struct{}

// heldWake is such a wake, taken once: by the first decision of the
// attempt, which passes it on (see acquire).
type heldWake struct{ baton atomic.Pointer[relay] }

func withWake(ctx context.Context, baton relay) context.Context {
	if baton.upTo == 0 {
		return ctx
	}
	h := &heldWake{}
	h.baton.Store(&baton)
	return context.WithValue(ctx, wakeKey{}, h)
}

// takeWake returns the wake ctx carries, once; none (a zero upTo) for none.
func takeWake(ctx context.Context) relay {
	if h, ok := ctx.Value(wakeKey{}).(*heldWake); ok {
		if b := h.baton.Swap(nil); b != nil {
			return *b
		}
	}
	return relay{}
}

// NoCredentialError is returned when every credential of a provider has
// been rejected by the server.
type NoCredentialError struct {
	Provider string
	// Invalid lists the masked credentials and why each was rejected.
	Invalid []string
}

func (e *NoCredentialError) Error() string {
	return fmt.Sprintf("ratekeeper: no usable credential for %s: %s", e.Provider, strings.Join(e.Invalid, "; "))
}

// ReserveError is returned for a request to a bucket the configured
// reserve leaves nothing of: a count reserve at or above the bucket's
// limit, found out when the limit became known (GitHub's search allows 30
// a minute, so --reserve 100 would keep every search waiting for ever).
// It is a configuration error: retrying cannot help.
type ReserveError struct {
	Provider, Resource string
	Reserve, Limit     int64
}

func (e *ReserveError) Error() string {
	return fmt.Sprintf("ratekeeper: %s %s: the reserve of %d requests leaves nothing of this resource's limit of %d, so no request could ever go; "+
		"keep back fewer than %d (--reserve, or reserve in the provider's config), or a percentage of each resource's limit such as \"10%%\"",
		e.Provider, e.Resource, e.Reserve, e.Limit, e.Limit)
}

// reserveFailed is the error of a State's Reserve for a request of class
// to p.
func reserveFailed(p *provider.Provider, class provider.Request, err error) error {
	var re *quota.ReserveError
	if errors.As(err, &re) {
		return &ReserveError{Provider: p.Name, Resource: class.Resource, Reserve: re.Reserve, Limit: re.Limit}
	}
	return fmt.Errorf("ratekeeper: reserving quota: %w", err)
}
