// Package batch sends many HTTP requests through a rate-keeping transport
// with a bounded number in flight, so that no bucket holds back another: a
// request whose quota cannot go now waits in the batch, not in a worker,
// and the workers send the requests whose quota can.
//
// A worker pool over http.RoundTripper blocks: eight goroutines that each
// wait inside RoundTrip for GraphQL points leave the REST quota idle. A
// Batch instead sends each request with a max wait of zero
// (transport.WithMaxWait): the transport answers at once with a
// *transport.WaitError saying when the request's quota returns, and the
// batch parks the request until then — in one heap ordered by that time,
// under one timer, with no goroutine per waiting request — while its
// workers send others. A wait on requests in flight (a first probe of an
// unknown bucket, an owner's concurrency full) ends at the next answer of
// this batch, or at its RetryAt. Which request may go is the transport's
// decision, the same that fetch and tasks workers get from it; with a
// shared database (Options.DB of the transport) other processes' spending
// counts too.
//
// Requests are taken in order of priority (1 before 2, the default, as in
// package tasks and fetch: docs/priority.md), then in the
// order they were added (or of Order): a request that waited for quota
// keeps its place, so it goes before work added while it waited. Each
// request's result comes exactly once, to Options.OnResult — or, for a
// request given to Do, to Do's caller. A batch with KeepRunning fed by Do
// is a scheduler for callers that each hold a request (fetch's task
// workers): they wait, but only Options.InFlight of them send.
//
// The batch keeps its queue in memory: work that must survive a restart
// belongs in package tasks.
package batch

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper/transport"
)

// DefaultInFlight is the number of requests in flight when
// Options.InFlight is 0.
const DefaultInFlight = 8

// minPark is the shortest a request waits in the batch, so that a wait
// that rounds to nothing does not spin.
const minPark = time.Millisecond

// Options configure a Batch.
type Options struct {
	// InFlight bounds how many requests are sent at once, OnResult
	// callbacks included; DefaultInFlight when 0.
	InFlight int
	// OnResult receives each request's result, once. It is called from
	// up to InFlight goroutines at once, and may Add more requests (the
	// next page of a listing, say). The batch closes the response's body
	// when OnResult returns: read it there. A panic in OnResult stops the
	// batch (no more requests are sent) and Run panics with the same
	// value once the requests in flight have ended.
	OnResult func(Result)
	// KeepRunning keeps Run going when every request has its result,
	// until its context ends: the batch of a program that feeds it as
	// work comes, with Do (fetch's task workers do).
	KeepRunning bool
	// MaxScopeWaiting, when positive, bounds how many requests given a
	// MaxWait wait in the batch for one scope (a limit the server does
	// not announce, WaitError.Scope): beyond it, such a request gets the
	// *transport.WaitError as if past its MaxWait. A program whose callers
	// each hold something while their request waits (fetch: a claimed
	// task) keeps the rest for the requests that a paused scope's would
	// otherwise crowd out.
	MaxScopeWaiting int
	// Clock is the clock the batch's waits are timed on; when nil, the
	// transport's (Transport.Clock, when the RoundTripper is a ratekeeper
	// transport), whose times a WaitError names, else the system's.
	Clock transport.Clock
}

// Result is what became of one request.
type Result struct {
	// Request is the request as it was added; Key and Priority as given.
	Request  *http.Request
	Key      string
	Priority int
	// Response is the answer, whatever its status, when Err is nil. Its
	// body is closed when OnResult returns.
	Response *http.Response
	// Err is why there is no answer: the transport's error, or the
	// context's when the batch or the request was cancelled before it
	// was answered.
	Err error
	// Waits counts how often the request waited in the batch for its
	// quota.
	Waits int
}

// An Option sets something of one request given to Add: Key, Priority.
type Option struct{ apply func(*item) }

// Key names the request in its Result.
func Key(k string) Option { return Option{func(it *item) { it.key = k }} }

// Priority orders the request among those that can go: smaller first, as
// tasks and fetch order theirs (1 runs first, 4 last; any int is allowed,
// 0 and below before 1). The default is DefaultPriority.
func Priority(p int) Option { return Option{func(it *item) { it.priority = p }} }

// DefaultPriority is a request's priority when Add is given none: 2, the
// default of tasks and fetch too, so that 1 goes ahead of unmarked work.
const DefaultPriority = 2

// MaxWait bounds how long the request waits in the batch for its quota:
// when the transport says quota returns later than d from now, the
// request's result is the transport's *transport.WaitError (nothing was
// sent), as from a transport whose MaxWait is d. A wait on requests in
// flight (WaitError.OnAnswer) is not bounded: an answer may end it. Without
// MaxWait a request waits as long as its quota says.
func MaxWait(d time.Duration) Option {
	return Option{func(it *item) { it.maxWait, it.bounded = d, true }}
}

// StopWaiting ends the request without sending it when ctx ends while
// the request waits for its quota — not yet sent, or parked to be sent
// again — with a result whose error is ErrStoppedWaiting. A request at the
// server when ctx ends is not affected: it ends with its answer. A
// program that stops gives back, this way, the work that only waits
// (fetch's tasks go back to pending at once) while what is in flight
// finishes.
func StopWaiting(ctx context.Context) Option {
	return Option{func(it *item) { it.stopWaiting = ctx }}
}

// ErrStoppedWaiting is the error of a request that StopWaiting's context
// ended while it waited: nothing was sent.
var ErrStoppedWaiting = errors.New("batch: stopped waiting for quota; not sent")

// Order places the request among those of its priority: smaller first,
// and before those added without Order, which go in the order they were
// added. A program that adds its work as it comes but knows an older
// order (fetch: the order its tasks were submitted) gives it here, so
// that the request that has waited longest goes first.
func Order(n uint64) Option {
	return Option{func(it *item) { it.seq, it.ordered = n, true }}
}

// Batch schedules requests over a transport. Its zero value is not usable:
// build one with New. Add and Progress may be called from any goroutine,
// before, during or after Run.
type Batch struct {
	rt       http.RoundTripper
	inFlight int
	onResult func(Result)

	mu       sync.Mutex
	work     sync.Cond // signalled when ready work, or the end, may have come
	ready    readyQueue
	parked   timeQueue // waiting until a known time
	onAnswer timeQueue // waiting for an answer, at the latest until a time
	clock    transport.Clock
	emit     func(transport.Event) // the transport's events; nil over another RoundTripper
	timer    transport.Timer
	timerEnd chan struct{} // closed when timer is replaced or stopped
	timerAt  time.Time
	seq      uint64
	running  bool
	keep     bool
	scopeCap int
	// blocked is, per quota a request waited for, when the latest
	// answer of the transport said it returns: a request that waited for
	// it before waits again until then without asking.
	blocked  map[waitGroup]time.Time
	sendCtx  context.Context // Run's context, with a max wait of 0
	stop     bool            // Run's context ended, or a callback panicked
	active   int             // requests taken by a worker and not yet through OnResult
	panicked any

	added, done, failed int
	started             time.Time
	finishedAt          time.Time // of the last result counted, for the ETA
}

// item is one request in the batch.
type item struct {
	req      *http.Request
	key      string
	priority int
	seq      uint64
	ordered  bool // seq set by Order
	maxWait  time.Duration
	bounded  bool // maxWait set
	waits    int
	parkedAt time.Time // when it first waited in the batch
	sent     bool      // sent once: its body is spent
	until    time.Time
	why      *transport.WaitError
	last     waitGroup // the quota it last waited for, if any
	// While it waits: its place in a timeQueue, and the watch on its
	// own context that takes it out when that ends.
	index   int
	queue   *timeQueue
	unwatch func() bool
	// stopWaiting (StopWaiting) ends the request while it waits;
	// stopped is set, under the batch's lock, once it has ended, and
	// unwatchStop stops watching it.
	stopWaiting context.Context
	stopped     bool
	unwatchStop func() bool
	serving     bool // taken by a worker, and not parked since
	// out receives the result of a request given to Do, with its body
	// open; left is set when Do returned without it.
	out  chan Result
	left atomic.Bool
}

// New returns a batch that sends its requests with rt, normally a
// ratekeeper transport (ratekeeper.NewTransport). Over any other
// RoundTripper it is a plain bounded worker pool. Redirects are not
// followed: RoundTrip returns them.
func New(rt http.RoundTripper, opts Options) *Batch {
	b := &Batch{rt: rt, inFlight: opts.InFlight, onResult: opts.OnResult, keep: opts.KeepRunning, scopeCap: opts.MaxScopeWaiting,
		clock: opts.Clock}
	tr, _ := rt.(*transport.Transport)
	if tr != nil {
		b.emit = tr.Emit
		if b.clock == nil {
			b.clock = tr.Clock()
		}
	}
	if b.clock == nil {
		b.clock = systemClock{}
	}
	if b.inFlight <= 0 {
		b.inFlight = DefaultInFlight
	}
	b.work.L = &b.mu
	return b
}

// Add queues req, to be sent by Run (the one running, or the next). req
// must not be changed afterwards. A request with a body must be
// replayable (req.GetBody set, as http.NewRequest does for a
// bytes.Reader, strings.Reader or bytes.Buffer): one that waits for quota
// is sent again. The request's own context, if not Background, can cancel
// it too.
func (b *Batch) Add(req *http.Request, opts ...Option) error {
	_, err := b.add(req, nil, opts)
	return err
}

// Do sends req through the batch, as Add, and returns its answer, whose
// body the caller closes, or the error of its Result. It returns when the
// request has its result, or when req's context ends (with its error), or
// when StopWaiting's ends before the request is sent (ErrStoppedWaiting).
// The request goes when a running Run sends it: use Options.KeepRunning
// for a batch fed by Do. OnResult is not called for it.
func (b *Batch) Do(req *http.Request, opts ...Option) (*http.Response, error) {
	it, err := b.add(req, make(chan Result, 1), opts)
	if err != nil {
		return nil, err
	}
	var stopWaiting <-chan struct{}
	if it.stopWaiting != nil {
		stopWaiting = it.stopWaiting.Done()
	}
	for {
		select {
		case r := <-it.out:
			return r.Response, r.Err
		case <-stopWaiting:
			// Ready or parked, it ends now, and the worker that takes
			// it hands its result to no one; one being sent ends with
			// its answer.
			b.mu.Lock()
			it.stopped = true
			serving := it.serving
			b.mu.Unlock()
			if !serving {
				it.leave()
				return nil, ErrStoppedWaiting
			}
			stopWaiting = nil
		case <-req.Context().Done():
			it.leave()
			return nil, req.Context().Err()
		}
	}
}

// leave marks a request whose Do returned without its result: the result,
// when it comes, is dropped, its body closed.
func (it *item) leave() {
	it.left.Store(true)
	select {
	case r := <-it.out:
		if r.Response != nil {
			r.Response.Body.Close()
		}
	default:
	}
}

func (b *Batch) add(req *http.Request, out chan Result, opts []Option) (*item, error) {
	if req == nil || req.URL == nil {
		return nil, errors.New("batch: Add: a nil request or URL")
	}
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return nil, fmt.Errorf("batch: Add: %s %s has a body but no GetBody, so it could not be sent again after waiting for quota; "+
			"build it with http.NewRequest from a bytes.Reader, strings.Reader or bytes.Buffer, or set GetBody", req.Method, req.URL.Redacted())
	}
	it := &item{req: req, out: out, priority: DefaultPriority}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(it)
		}
	}
	b.mu.Lock()
	b.added++
	if it.stopWaiting != nil {
		it.unwatchStop = context.AfterFunc(it.stopWaiting, func() { b.stopWaiting(it) })
	}
	if it.ordered {
		b.ready.putBack(it)
	} else {
		b.seq++
		it.seq = b.seq
		b.ready.add(it)
	}
	b.mu.Unlock()
	b.work.Signal()
	return it, nil
}

// Run sends the queued requests, and those added meanwhile, until all
// have their result, or until ctx ends: then the requests in flight end
// with its error, every request not yet answered gets a Result with it,
// and Run returns it. Run returns nil when every request has its result
// (failed ones included: see Result.Err). Only one Run may go at a time.
func (b *Batch) Run(ctx context.Context) error {
	b.mu.Lock()
	if b.running {
		b.mu.Unlock()
		return errors.New("batch: Run called while the batch is running")
	}
	b.running, b.stop, b.panicked = true, false, nil
	b.sendCtx = transport.WithMaxWait(ctx, 0)
	if b.started.IsZero() {
		b.started = b.clock.Now()
	}
	// The timer of parked requests runs with Run only.
	b.armLocked()
	b.mu.Unlock()
	stopWatch := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		b.stop = true
		b.mu.Unlock()
		b.work.Broadcast()
	})
	var wg sync.WaitGroup
	for range b.inFlight {
		wg.Go(b.worker)
	}
	wg.Wait()
	stopWatch()

	b.mu.Lock()
	b.stopTimerLocked()
	p := b.panicked
	// Stopped and no panic: the context ended before the batch was
	// through (a context ending just after is no error).
	var err error
	var left []*item
	if p == nil && b.stop {
		err = ctx.Err()
		left = b.drainLocked()
	}
	b.running = false
	b.mu.Unlock()
	if p != nil {
		panic(p)
	}
	for _, it := range left {
		// Not through deliver: a panic here is Run's own.
		if it.unwatchStop != nil {
			it.unwatchStop()
		}
		it.closeUnsent()
		b.count(nil, err)
		r := Result{Request: it.req, Key: it.key, Priority: it.priority, Err: err, Waits: it.waits}
		if it.out != nil {
			it.hand(r)
		} else if b.onResult != nil {
			b.onResult(r)
		}
	}
	return err
}

// drainLocked empties the queues.
func (b *Batch) drainLocked() []*item {
	var out []*item
	for _, q := range []*timeQueue{&b.parked, &b.onAnswer} {
		for _, it := range *q {
			if it.unwatch != nil {
				it.unwatch()
			}
			it.queue = nil
		}
		out = append(out, *q...)
		*q = nil
	}
	out = append(out, b.ready.drain()...)
	return out
}

// worker takes requests that can go, one at a time, until the batch is
// through or stopped.
func (b *Batch) worker() {
	for {
		b.mu.Lock()
		for !b.stop && b.ready.len() == 0 && (b.keep || b.active > 0 || len(b.parked) > 0 || len(b.onAnswer) > 0) {
			b.work.Wait()
		}
		if b.stop || b.ready.len() == 0 {
			b.mu.Unlock()
			b.work.Broadcast() // the batch is through: the others too
			return
		}
		it := b.ready.take()
		if !it.stopped && b.waitAgainLocked(it) {
			b.mu.Unlock()
			continue
		}
		b.active++
		it.serving = true
		ctx := b.sendCtx
		b.mu.Unlock()
		b.serve(it, ctx)
	}
}

// serve sends one request and parks it or delivers its result, giving
// back the worker's place on every exit, a panic included (kept for Run
// to raise).
func (b *Batch) serve(it *item, ctx context.Context) {
	defer func() {
		p := recover()
		b.mu.Lock()
		b.active--
		if p != nil && b.panicked == nil {
			b.panicked, b.stop = p, true
		}
		b.mu.Unlock()
		b.work.Broadcast()
	}()
	if own := it.req.Context(); it.out != nil {
		// Do's caller reads the body after the request leaves the
		// batch: its own context alone may cancel it.
		ctx = transport.WithMaxWait(own, 0)
	} else if own != context.Background() {
		// The request's own context keeps its values, and its end or
		// Run's cancels the request — after OnResult, which reads the
		// body.
		c, cancel := context.WithCancel(transport.WithMaxWait(own, 0))
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		ctx = c
	}
	b.mu.Lock()
	stopped := it.stopped
	b.mu.Unlock()
	if stopped {
		it.closeUnsent()
		b.deliver(it, nil, ErrStoppedWaiting)
		return
	}
	resp, err := b.send(it, ctx)
	var we *transport.WaitError
	if errors.As(err, &we) {
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
		} else if !it.bounded || we.OnAnswer() || we.RetryAt().Sub(b.clock.Now()) <= it.maxWait && b.scopeRoom(we) {
			if b.park(it, we) {
				return
			}
			err = ErrStoppedWaiting
		}
	}
	b.answered()
	if it.waits > 0 && b.emit != nil && err == nil && it.why != nil {
		// The transport sent it at once (a max wait of 0): its wait
		// was the batch's, and is reported as the transport's would be.
		b.emit(transport.Event{Kind: transport.EventWaited, Provider: it.why.Provider, Resource: it.why.Resource,
			Credential: it.why.Credential, Wait: b.clock.Now().Sub(it.parkedAt)})
	}
	b.deliver(it, resp, err)
}

// send makes one attempt of it under ctx, with a body of its own when the
// request's was spent by an earlier attempt.
func (b *Batch) send(it *item, ctx context.Context) (*http.Response, error) {
	if err := ctx.Err(); err != nil {
		it.closeUnsent()
		return nil, err
	}
	out := it.req.WithContext(ctx)
	if it.sent && out.Body != nil && out.Body != http.NoBody {
		body, err := out.GetBody()
		if err != nil {
			return nil, fmt.Errorf("batch: renewing the body of %s %s to send it again: %w", out.Method, out.URL.Redacted(), err)
		}
		out.Body = body
	}
	it.sent = true
	return b.rt.RoundTrip(out)
}

// closeUnsent closes the body of a request that ends without being sent,
// as RoundTrip would have.
func (it *item) closeUnsent() {
	if !it.sent && it.req.Body != nil {
		it.req.Body.Close()
	}
}

// scopeRoom reports whether a request with a MaxWait may wait in the
// batch for we's scope (Options.MaxScopeWaiting).
func (b *Batch) scopeRoom(we *transport.WaitError) bool {
	if b.scopeCap <= 0 || we.Scope == "" {
		return true
	}
	g := groupOf(we)
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, it := range b.parked {
		if it.bounded && it.last == g {
			n++
		}
	}
	return n < b.scopeCap
}

// waitGroup names a quota a request waits for: its provider, resource
// and scope, and the credential that could go soonest. The credential
// keeps apart requests that only some credentials may serve (an App's
// installations, routed by owner): one installation's return time says
// nothing of another's.
type waitGroup struct{ provider, resource, scope, credential string }

func groupOf(we *transport.WaitError) waitGroup {
	return waitGroup{we.Provider, we.Resource, we.Scope, we.Credential}
}

// waitAgainLocked parks it again, without asking the transport, when
// the quota it last waited for is known to return later: a bucket's
// requests woken together at its reset ask one at a time, and once
// one is told the next time, the others wait for it. A request given a
// MaxWait asks when that wait would exceed it.
func (b *Batch) waitAgainLocked(it *item) bool {
	if it.last == (waitGroup{}) {
		return false
	}
	until, ok := b.blocked[it.last]
	now := b.clock.Now()
	if !ok || !until.After(now.Add(minPark)) {
		return false
	}
	if it.bounded && (until.Sub(now) > it.maxWait || it.last.scope != "" && b.scopeCap > 0) {
		return false
	}
	if err := it.req.Context().Err(); err != nil {
		return false
	}
	it.waits++
	it.until = until
	heap.Push(&b.parked, it)
	if own := it.req.Context(); own != context.Background() {
		it.unwatch = context.AfterFunc(own, func() { b.ended(it) })
	}
	b.armLocked()
	return true
}

// park puts it aside until its quota returns, as we says, and reports
// whether it did: not when StopWaiting's context has ended.
func (b *Batch) park(it *item, we *transport.WaitError) bool {
	now := b.clock.Now()
	if it.waits == 0 {
		it.parkedAt = now
	}
	it.waits++
	it.why = we
	it.until = we.RetryAt()
	if it.until.Before(now.Add(minPark)) {
		it.until = now.Add(minPark)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if it.stopped {
		return false
	}
	it.serving = false
	if we.OnAnswer() {
		heap.Push(&b.onAnswer, it)
	} else {
		heap.Push(&b.parked, it)
		it.last = groupOf(we)
		if b.blocked == nil {
			b.blocked = map[waitGroup]time.Time{}
		}
		b.blocked[it.last] = it.until
	}
	if own := it.req.Context(); own != context.Background() {
		// Its own context's end is its result, now rather than when
		// its quota returns (a function to call, not a goroutine).
		it.unwatch = context.AfterFunc(own, func() { b.ended(it) })
	}
	b.armLocked()
	return true
}

// stopWaiting ends a request whose StopWaiting context ended: a parked
// one given to Do at once; one ready or being sent, or whose result goes
// to OnResult (called from the workers only), by the worker that takes it
// or would park it (serve); none once it is answered.
func (b *Batch) stopWaiting(it *item) {
	b.mu.Lock()
	it.stopped = true
	now := it.queue != nil && it.out != nil
	if it.queue != nil {
		heap.Remove(it.queue, it.index)
		if it.unwatch != nil {
			it.unwatch()
			it.unwatch = nil
		}
		if !now {
			b.ready.putBack(it)
		}
		b.armLocked()
	}
	b.mu.Unlock()
	if now {
		it.closeUnsent()
		b.deliver(it, nil, ErrStoppedWaiting)
	}
	b.work.Broadcast()
}

// ended takes a waiting request whose own context ended back among those
// ready: sending it, a worker finds the context's error, its result.
func (b *Batch) ended(it *item) {
	b.mu.Lock()
	if it.queue == nil {
		b.mu.Unlock()
		return
	}
	heap.Remove(it.queue, it.index)
	b.wakeLocked(it)
	b.armLocked()
	b.mu.Unlock()
	b.work.Broadcast()
}

// answered wakes, at an answer, as many of the requests waiting for one
// as could be sent at once: the answer may have freed what they wait for
// (if not, they wait again, behind the others).
func (b *Batch) answered() {
	b.mu.Lock()
	n := 0
	for len(b.onAnswer) > 0 && n < b.inFlight {
		b.wakeLocked(heap.Pop(&b.onAnswer).(*item))
		n++
	}
	if n > 0 {
		b.armLocked()
	}
	b.mu.Unlock()
	if n > 0 {
		b.work.Broadcast()
	}
}

// wakeLocked puts a parked request back among those ready, in its place:
// ahead of work of its priority added since.
func (b *Batch) wakeLocked(it *item) {
	if it.unwatch != nil {
		it.unwatch()
		it.unwatch = nil
	}
	// it.why stays: Progress shows it should the request wait again
	// for the same quota without asking (waitAgainLocked).
	b.ready.putBack(it)
}

// armLocked sets the one timer for the earliest parked request.
func (b *Batch) armLocked() {
	var at time.Time
	for _, q := range []timeQueue{b.parked, b.onAnswer} {
		if len(q) > 0 && (at.IsZero() || q[0].until.Before(at)) {
			at = q[0].until
		}
	}
	if at.IsZero() || !b.running || (b.timer != nil && at.Equal(b.timerAt)) {
		return
	}
	b.stopTimerLocked()
	t, end := b.clock.NewTimer(at.Sub(b.clock.Now())), make(chan struct{})
	b.timer, b.timerEnd, b.timerAt = t, end, at
	// One goroutine per timer set (a Clock's timer has no AfterFunc),
	// ended with it: a few per quota's return, not one per request.
	go func() {
		select {
		case <-t.C():
			b.due()
		case <-end:
		}
	}()
}

// stopTimerLocked stops the timer of parked requests and its goroutine.
func (b *Batch) stopTimerLocked() {
	if b.timer == nil {
		return
	}
	b.timer.Stop()
	close(b.timerEnd)
	b.timer, b.timerEnd, b.timerAt = nil, nil, time.Time{}
}

// systemClock is the system's time, for a batch over a RoundTripper
// other than ratekeeper's transport.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
func (systemClock) NewTimer(d time.Duration) transport.Timer {
	return sysTimer{time.NewTimer(d)}
}

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time { return t.t.C }
func (t sysTimer) Stop() bool          { return t.t.Stop() }

// due moves the requests whose time has come back among those ready.
func (b *Batch) due() {
	b.mu.Lock()
	now := b.clock.Now()
	n := 0
	for _, q := range []*timeQueue{&b.parked, &b.onAnswer} {
		for len(*q) > 0 && !(*q)[0].until.After(now) {
			b.wakeLocked(heap.Pop(q).(*item))
			n++
		}
	}
	b.timerAt = time.Time{}
	b.armLocked()
	b.mu.Unlock()
	if n > 0 {
		b.work.Broadcast()
	}
}

// deliver hands the result to OnResult and closes the body after it.
func (b *Batch) deliver(it *item, resp *http.Response, err error) {
	if it.unwatchStop != nil {
		it.unwatchStop()
	}
	b.count(resp, err)
	if it.out != nil {
		it.hand(Result{Request: it.req, Key: it.key, Priority: it.priority, Response: resp, Err: err, Waits: it.waits})
		return
	}
	if resp != nil {
		defer resp.Body.Close()
	}
	if b.onResult != nil {
		b.onResult(Result{Request: it.req, Key: it.key, Priority: it.priority, Response: resp, Err: err, Waits: it.waits})
	}
}

func (b *Batch) count(resp *http.Response, err error) {
	b.mu.Lock()
	if err != nil {
		b.failed++
	} else {
		b.done++
	}
	b.finishedAt = b.clock.Now()
	b.mu.Unlock()
}

// hand gives r to the Do waiting for it, or closes its body when that Do
// has returned without it.
func (it *item) hand(r Result) {
	it.out <- r
	if it.left.Load() {
		select {
		case r := <-it.out:
			if r.Response != nil {
				r.Response.Body.Close()
			}
		default:
		}
	}
}
