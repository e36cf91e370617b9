package transport

import (
	"context"
	"time"
)

// maxWaitKey carries a request's own max wait (WithMaxWait).
type maxWaitKey struct{}

// WithMaxWait returns a context under which a request waits at most d for
// quota, instead of the transport's (or its provider's) max wait. With d
// 0 a request that cannot go at once returns a *WaitError at once, saying
// when its quota returns, without sending anything: a scheduler that has
// other work (package batch) sends that meanwhile and asks again then. A
// negative d counts as 0.
func WithMaxWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, maxWaitKey{}, max(d, 0))
}

// maxWait is the longest the request may wait for quota: its context's
// (WithMaxWait), else its lane's.
func (x *exchange) maxWait() time.Duration {
	if d, ok := x.ctx.Value(maxWaitKey{}).(time.Duration); ok {
		return d
	}
	return x.l.maxWait
}

// OnAnswer reports whether the wait is on requests in flight (a first
// probe of an unknown bucket, an owner's concurrency full, a bucket spent
// only by reservations): an answer to one of them may end it before
// RetryAt, which is then only the latest moment, about one round trip
// away.
func (e *WaitError) OnAnswer() bool { return e.onAnswer }

// MaxWait is the transport's max wait (Options.MaxWait): how long a
// request waits for quota unless its provider's Limits.MaxWait or its
// context (WithMaxWait) says otherwise. A scheduler that asks with a max
// wait of 0 (package batch) bounds its own waits with it.
func (t *Transport) MaxWait() time.Duration { return t.opts.MaxWait }
