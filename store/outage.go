package store

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// DefaultOutageTimeout is how long a database may stay away before the
// calls waiting for it give up, when OutageOptions.Timeout is 0.
const DefaultOutageTimeout = 2 * time.Minute

// IsTransient reports whether err says the database is away for a moment
// rather than refusing the call, so that the same call made again
// succeeds once it is back: a PostgreSQL restart or lost connection
// (connection refused or reset, 57P01, 57P03…), a serialization failure
// (40001), SQLite's busy or locked (another process holds the write lock).
// A damaged database, a closed store, a bad key or a context that ended
// are not transient. It is the one place that tells them apart: the
// outage wait ([Outage]) and the callers that answer for a database
// outage (the gateway's 503) ask it, and it asks each registered store
// ([Driver]).
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return anyTransient(err)
}

// UnavailableError is what a call made through an [Outage] returns when it
// stops waiting for its database (the outage outlasted the timeout, or the
// call's wait limit or context came first): the database's last error,
// whose text it keeps, so that a caller tells a database that is away from
// any other failure (the gateway answers 503 for it, not 502).
type UnavailableError struct {
	Err error
	// Since is when the outage began.
	Since time.Time
	// ctxErr is the call's context's error when that ended the wait, so
	// that errors.Is(err, context.Canceled) holds for a cancelled call.
	ctxErr error
}

func (e *UnavailableError) Error() string { return e.Err.Error() }

func (e *UnavailableError) Unwrap() []error {
	if e.ctxErr != nil {
		return []error{e.Err, e.ctxErr}
	}
	return []error{e.Err}
}

// IsUnavailable reports whether err's chain holds an *UnavailableError.
func IsUnavailable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u)
}

// OutageOptions configure an [Outage]. The zero value waits up to
// DefaultOutageTimeout on the system's clock.
type OutageOptions struct {
	// Timeout is how long the database may stay away, counted from the
	// first call that found it away: a call retries a transient error
	// while the outage is younger, then returns it. 0 means
	// DefaultOutageTimeout; a negative value, no wait (the first error is
	// returned).
	Timeout time.Duration
	// Name says which database the log lines are about (with its
	// password masked: see Redact).
	Name string
	// Logger receives one warning when the database goes away and one
	// line when it is back (nil: slog.Default()).
	Logger *slog.Logger
	// Now and After are the clock and timers of the waits (nil: the
	// system's), injected by tests.
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
	// Rand returns numbers in [0, 1) for the backoff's jitter (nil:
	// math/rand/v2), injected where a run must replay exactly.
	Rand func() float64
}

// Outage waits out a database's outages: Do runs a call, and while it
// fails with a transient error (IsTransient) runs it again after a backoff
// with full jitter, until it succeeds, the outage is older than the
// timeout, or the call's context (or its wait limit, WithWaitLimit) ends.
// One Outage serves every call on one database, so the bound counts from
// the first call that found the database away, whoever made it, and the
// log says once that the database is away and once that it is back.
type Outage struct {
	opts OutageOptions

	mu     sync.Mutex
	since  time.Time // start of the outage under way; zero: none
	warned bool      // the outage under way was logged
	over   bool      // the outage under way outlasted the timeout
	epoch  uint64    // outages begun so far
}

// NewOutage returns an Outage with opts.
func NewOutage(opts OutageOptions) *Outage {
	if opts.Timeout == 0 {
		opts.Timeout = DefaultOutageTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.After == nil {
		opts.After = time.After
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	return &Outage{opts: opts}
}

// outages holds this process's Outage of each database (see SharedOutage).
var outages struct {
	mu sync.Mutex
	m  map[outageKey]*Outage
}

type outageKey struct {
	dsn     string
	timeout time.Duration
}

// SharedOutage returns this process's Outage for the database dsn with
// opts (Name is set from dsn): the quota state, the task queue and the
// polls' state of one command use one database, which goes away for all
// of them at once, so they share one wait and one pair of log lines. The
// first call for a (dsn, timeout) makes it, with its Logger; options with
// their own clock (tests) always get a new one.
func SharedOutage(dsn string, opts OutageOptions) *Outage {
	opts.Name = Redact(dsn)
	if opts.Now != nil || opts.After != nil {
		return NewOutage(opts)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultOutageTimeout
	}
	k := outageKey{dsn, opts.Timeout}
	outages.mu.Lock()
	defer outages.mu.Unlock()
	if o, ok := outages.m[k]; ok {
		return o
	}
	if outages.m == nil {
		outages.m = map[outageKey]*Outage{}
	}
	o := NewOutage(opts)
	outages.m[k] = o
	return o
}

// Timeout is how long an outage is waited out (negative: not at all).
func (o *Outage) Timeout() time.Duration { return o.opts.Timeout }

// Epoch counts the outages begun so far: a cache of what the database
// held, kept while the epoch stays the same, never spans an outage (what
// other processes did meanwhile is unknown).
func (o *Outage) Epoch() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.epoch
}

// Backoff bounds: the first retry comes within outageBase, each next one
// within twice the last bound, up to outageCap. Full jitter: each wait is
// drawn uniformly below its bound, so that the processes of a fleet that
// lost their database at the same instant do not all come back at once.
const (
	outageBase = 50 * time.Millisecond
	outageCap  = 2 * time.Second
)

// Do runs fn and, while it fails with a transient error, runs it again
// (see Outage). When it stops waiting it returns fn's last error in an
// *UnavailableError, whose text is that error's, so that a command that
// gives up says what it said before any wait. fn must be safe to run
// again after a transient error: a store's update is (its transaction was
// rolled back, or never began).
func (o *Outage) Do(ctx context.Context, fn func(context.Context) error) error {
	bound := outageBase
	for {
		err := fn(ctx)
		if !IsTransient(err) {
			if err == nil {
				o.back()
			}
			return err
		}
		now := o.opts.Now()
		if o.opts.Timeout < 0 {
			return &UnavailableError{Err: err, Since: now}
		}
		since, over := o.away(now, err)
		wait := time.Duration(o.opts.Rand()*float64(bound)) + 1
		bound = min(2*bound, outageCap)
		if over || now.Add(wait).Sub(since) > o.opts.Timeout {
			o.giveUp()
			return &UnavailableError{Err: err, Since: since}
		}
		if limit, ok := WaitLimit(ctx); ok && now.Add(wait).After(limit) {
			return &UnavailableError{Err: err, Since: since}
		}
		if ctx.Err() != nil {
			return &UnavailableError{Err: err, Since: since, ctxErr: ctx.Err()}
		}
		select {
		case <-ctx.Done():
			return &UnavailableError{Err: err, Since: since, ctxErr: ctx.Err()}
		case <-o.opts.After(wait):
		}
	}
}

// away records that a call found the database away at now, logging it at
// the first, and returns when the outage began and whether it was given
// up on already (a call then fails at once, until the database is back).
func (o *Outage) away(now time.Time, err error) (since time.Time, over bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		o.since = now
		o.epoch++
	}
	if !o.warned {
		o.warned = true
		o.opts.Logger.Warn("database unavailable; waiting for it to come back",
			"db", o.opts.Name, "up_to", o.opts.Timeout.String(), "err", err)
	}
	return o.since, o.over
}

// giveUp records that the outage under way outlasted the timeout.
func (o *Outage) giveUp() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.over = true
}

// back records a call that succeeded: an outage under way is over.
func (o *Outage) back() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		return
	}
	o.opts.Logger.Info("database is back", "db", o.opts.Name, "after", o.opts.Now().Sub(o.since).Round(time.Millisecond).String())
	o.since, o.warned, o.over = time.Time{}, false, false
}

type waitLimitKey struct{}

// WithWaitLimit returns ctx carrying a limit on the waits for a database
// outage: a call made with it stops waiting, and returns the database's
// error, rather than wait past at. The context itself does not end, so a
// call that has begun is never cut short (an update cut short may have
// committed unseen): only the waits between calls are. The gateway gives
// each request its max wait this way.
func WithWaitLimit(ctx context.Context, at time.Time) context.Context {
	if prev, ok := ctx.Value(waitLimitKey{}).(time.Time); ok && prev.Before(at) {
		return ctx
	}
	return context.WithValue(ctx, waitLimitKey{}, at)
}

// WaitLimit returns the limit WithWaitLimit put on ctx, if any.
func WaitLimit(ctx context.Context) (time.Time, bool) {
	at, ok := ctx.Value(waitLimitKey{}).(time.Time)
	return at, ok
}

// WaitOutages returns s with every call run through o: a call that meets
// a transient error (the database restarting, a connection lost, another
// process holding SQLite's write lock) is tried again until it succeeds
// or o gives up. The result offers what s offers of Snapshot, Clock and
// Notifier (a Notifier's Listen is passed through: it reconnects itself).
// An Update's fn may thus run more than once, as the Store contract
// already allows.
func WaitOutages(s Store, o *Outage) Store {
	w := &outageStore{s: s, o: o}
	w.board, _ = s.(Newsboard)
	if n, ok := s.(Notifier); ok {
		return &outageNotifier{w, n}
	}
	return w
}

// OutageTimeoutOf returns how long s waits out an outage of its database:
// o's timeout for a store from WaitOutages, 0 for any other.
func OutageTimeoutOf(s Store) time.Duration {
	switch w := s.(type) {
	case *outageStore:
		return max(w.o.Timeout(), 0)
	case *outageNotifier:
		return max(w.o.Timeout(), 0)
	}
	return 0
}

// OutageEpoch returns the Epoch of the Outage behind a store from
// WaitOutages, 0 for any other store.
func OutageEpoch(s Store) uint64 {
	switch w := s.(type) {
	case *outageStore:
		return w.o.Epoch()
	case *outageNotifier:
		return w.o.Epoch()
	}
	return 0
}

type outageStore struct {
	s     Store
	o     *Outage
	board Newsboard // s's, or nil
}

func (w *outageStore) Update(ctx context.Context, key string, fn func(rec *Record) error) error {
	return w.o.Do(ctx, func(ctx context.Context) error { return w.s.Update(ctx, key, fn) })
}

func (w *outageStore) UpdateMany(ctx context.Context, keys []string, fn func(recs []*Record) error) error {
	return w.o.Do(ctx, func(ctx context.Context) error { return w.s.UpdateMany(ctx, keys, fn) })
}

func (w *outageStore) Get(ctx context.Context, key string) (rec Record, err error) {
	err = w.o.Do(ctx, func(ctx context.Context) error {
		rec, err = w.s.Get(ctx, key)
		return err
	})
	return rec, err
}

func (w *outageStore) List(ctx context.Context, prefix string) (recs []Record, err error) {
	err = w.o.Do(ctx, func(ctx context.Context) error {
		recs, err = w.s.List(ctx, prefix)
		return err
	})
	return recs, err
}

// GetMany implements Snapshot, by the store's own when it has one, else
// one Get a key.
func (w *outageStore) GetMany(ctx context.Context, keys []string) (recs []Record, err error) {
	err = w.o.Do(ctx, func(ctx context.Context) error {
		if sn, ok := w.s.(Snapshot); ok {
			recs, err = sn.GetMany(ctx, keys)
			return err
		}
		recs = make([]Record, len(keys))
		for i, k := range keys {
			r, err := w.s.Get(ctx, k)
			switch {
			case errors.Is(err, ErrNotFound):
				r = Record{Key: k}
			case err != nil:
				return err
			}
			recs[i] = r
		}
		return nil
	})
	return recs, err
}

// DatabaseNow implements Clock, by the store's own when it has one, else
// the system's clock.
func (w *outageStore) DatabaseNow(ctx context.Context) (t time.Time, err error) {
	c, ok := w.s.(Clock)
	if !ok {
		return time.Now(), nil
	}
	err = w.o.Do(ctx, func(ctx context.Context) error {
		t, err = c.DatabaseNow(ctx)
		return err
	})
	return t, err
}

// News implements Newsboard, the store's own (no I/O: nothing to wait out).
func (w *outageStore) News() uint64 {
	if w.board == nil {
		return 0
	}
	return w.board.News()
}

// outageNotifier is an outageStore over a store that is a Notifier:
// Listen is the store's own, which reconnects by itself.
type outageNotifier struct {
	*outageStore
	n Notifier
}

func (w *outageNotifier) Listen(ctx context.Context, channel string, fn func(payload string), waiting func() bool) error {
	return w.n.Listen(ctx, channel, fn, waiting)
}

func (w *outageStore) GetBlob(ctx context.Context, key string) (v []byte, ok bool, err error) {
	err = w.o.Do(ctx, func(ctx context.Context) error {
		v, ok, err = w.s.GetBlob(ctx, key)
		return err
	})
	return v, ok, err
}

func (w *outageStore) PutBlob(ctx context.Context, key string, value []byte) error {
	return w.o.Do(ctx, func(ctx context.Context) error { return w.s.PutBlob(ctx, key, value) })
}

func (w *outageStore) DeleteBlob(ctx context.Context, key string) error {
	return w.o.Do(ctx, func(ctx context.Context) error { return w.s.DeleteBlob(ctx, key) })
}

func (w *outageStore) TouchBlob(ctx context.Context, key string) error {
	return w.o.Do(ctx, func(ctx context.Context) error { return w.s.TouchBlob(ctx, key) })
}

func (w *outageStore) Close() error { return w.s.Close() }
