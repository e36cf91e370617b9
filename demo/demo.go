package demo

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/cache"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
	"github.com/ratekeeper/ratekeeper/wiring"
)

// Defaults of Options: about 20 seconds on a small machine.
const (
	DefaultSize     = 1000
	DefaultWorkers  = 8
	DefaultPolicy   = "greedy"
	DefaultLimit    = 100
	DefaultWindow   = 10 * time.Second
	DefaultLatency  = 20 * time.Millisecond
	DefaultInterval = 2 * time.Second
)

// Limits of Options, so a typo cannot start an hour-long demo.
const (
	MaxSize    = 100_000
	MaxWorkers = 256
)

// Progress modes.
const (
	ProgressAuto  = "auto"  // bars on a terminal, lines otherwise
	ProgressBars  = "bars"  // bars, even when not on a terminal
	ProgressLines = "lines" // a plain line every Interval
	ProgressOff   = "off"   // only the introduction and the summary
)

// Options configure a demo. Run fills zero values with the defaults above
// (see WithDefaults).
type Options struct {
	// Size is the number of GETs in the batch.
	Size int
	// Workers send the batch concurrently.
	Workers int
	// Policy is the client's pacing policy: greedy, spread or adaptive.
	Policy string
	// Limit requests per owner per Window (whole seconds), and Latency of
	// every answer, for the simulated API.
	Limit   int64
	Window  time.Duration
	Latency time.Duration
	// Progress is one of the Progress* modes; Interval is the period of
	// plain progress lines.
	Progress string
	Interval time.Duration
	// InProcess serves the simulator without sockets, through its own
	// RoundTripper, so the demo can run inside a testing/synctest bubble.
	InProcess bool
	// Runner sends the batch; nil means Pool(Workers).
	Runner Runner
	// SkipApp leaves out the part that follows the batch: a GitHub App on
	// three organisations (RunApp).
	SkipApp bool
}

// WithDefaults returns o with every zero value replaced by its default.
// Latency is left alone: zero is a valid latency.
func (o Options) WithDefaults() Options {
	o.Size = cmp.Or(o.Size, DefaultSize)
	o.Workers = cmp.Or(o.Workers, DefaultWorkers)
	o.Policy = cmp.Or(o.Policy, DefaultPolicy)
	o.Limit = cmp.Or(o.Limit, DefaultLimit)
	o.Window = cmp.Or(o.Window, DefaultWindow)
	o.Progress = cmp.Or(o.Progress, ProgressAuto)
	o.Interval = cmp.Or(o.Interval, DefaultInterval)
	return o
}

// Validate reports the first option that cannot work, as given (call
// WithDefaults first to accept zero values), naming it as the command's
// flag is named and saying what would be right.
func (o Options) Validate() error {
	switch {
	case o.Size < 1 || o.Size > MaxSize:
		return fmt.Errorf("size %d: want a number of GETs from 1 to %d", o.Size, MaxSize)
	case o.Workers < 1 || o.Workers > MaxWorkers:
		return fmt.Errorf("workers %d: want 1 to %d", o.Workers, MaxWorkers)
	case o.Limit < 1:
		return fmt.Errorf("limit %d: want at least 1 request per window", o.Limit)
	case o.Window < time.Second || o.Window%time.Second != 0:
		return fmt.Errorf("window %v: want whole seconds, at least 1s (the simulator's windows are whole seconds, as GitHub's)", o.Window)
	case o.Latency < 0 || o.Latency > 10*time.Second:
		return fmt.Errorf("latency %v: want 0 to 10s", o.Latency)
	case o.Interval < 100*time.Millisecond:
		return fmt.Errorf("interval %v: want at least 100ms", o.Interval)
	}
	switch o.Progress {
	case ProgressAuto, ProgressBars, ProgressLines, ProgressOff:
	default:
		return fmt.Errorf("progress %q: want auto, bars, lines or off", o.Progress)
	}
	if _, err := wiring.Transport(wiring.Options{Policy: o.Policy, Tune: onlySimulated}); err != nil {
		return err
	}
	return nil
}

// Run starts the simulator, sends the batch through a rate-keeping client,
// shows progress on w and ends with the summary, which it also returns.
// A run with violations still returns its summary and a nil error: the
// caller decides what a violation means (the command exits non-zero).
func Run(ctx context.Context, w io.Writer, opts Options) (*Summary, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	sc := NewScenario(opts.Limit, opts.Window, opts.Latency)
	srv, err := sim.New(sc.SimConfig())
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	// An idle connection per worker and a few spare, so workers reuse
	// connections instead of opening one per request.
	root, wire, stop, err := srv.Reach(opts.InProcess, opts.Workers+4)
	if err != nil {
		return nil, err
	}
	defer stop()
	base := root + apiPrefix

	r := newRecorder()
	counted := &countingTransport{next: wire, phase: &r.phase}
	t, err := wiring.Transport(wiring.Options{
		Providers: []string{APIName + "=" + base},
		Tokens:    map[string][]string{APIName: sc.Secrets()},
		Policy:    opts.Policy,
		Base:      counted,
		OnEvent:   r.event,
		Tune:      onlySimulated,
	})
	if err != nil {
		return nil, err
	}
	jobs := Batch(opts.Size)
	writeIntro(w, sc, base, masked(t), jobs, opts)

	start := time.Now()
	if err := t.Refresh(ctx, APIName); err != nil {
		return nil, fmt.Errorf("checking the tokens: %w", err)
	}
	view := &statusView{t: t, sc: sc, r: r, jobs: len(jobs), start: start}
	writeChecks(w, view.snapshot(time.Now()))

	r.startBatch(view.ownerOf)
	prog := startProgress(ctx, w, opts, view)
	runner := opts.Runner
	if runner == nil {
		runner = Pool(opts.Workers)
	}
	client := &http.Client{Transport: t}
	runErr := runner(ctx, client, base, jobs, func(res Result) {
		r.done(res)
		prog.jobDone(res)
	})
	elapsed := time.Since(start)
	last := view.snapshot(time.Now())
	prog.stop(last)

	s := Summarize(Inputs{
		Scenario: sc, Jobs: jobs, Workers: opts.Workers, Policy: opts.Policy, Latency: opts.Latency,
		Elapsed: elapsed, Run: r.totals(), Wire: counted.totals(), Stats: srv.Stats(), Final: last,
	})
	if runErr != nil {
		return s, fmt.Errorf("batch stopped after %d of %d GETs: %w", s.Done+s.Failed, s.Jobs, runErr)
	}
	s.Write(w)
	if !opts.SkipApp {
		app, err := RunApp(ctx, w, opts)
		if err != nil {
			return s, fmt.Errorf("the App part: %w", err)
		}
		s.App = app
	}
	return s, nil
}

// onlySimulated keeps only the simulated provider in the client, so no
// other provider loads tokens from this machine's environment.
func onlySimulated(o *transport.Options) {
	reg := provider.NewRegistry()
	if p := o.Providers.Lookup(APIName); p != nil {
		_ = reg.Add(p)
	}
	o.Providers = reg
}

// Phases of a run, for counting requests.
const (
	phaseChecks = iota // checking the tokens before the batch
	phaseBatch
)

// countingTransport counts the requests that reach the server and their
// statuses, by phase.
type countingTransport struct {
	next  http.RoundTripper
	phase *phaseFlag

	mu     sync.Mutex
	sent   [2]int64
	status map[int]int64
	errors int64
}

type phaseFlag struct {
	mu sync.Mutex
	v  int
}

func (p *phaseFlag) get() int  { p.mu.Lock(); defer p.mu.Unlock(); return p.v }
func (p *phaseFlag) set(v int) { p.mu.Lock(); p.v = v; p.mu.Unlock() }

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	phase := c.phase.get()
	resp, err := c.next.RoundTrip(req)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent[phase]++
	if err != nil {
		c.errors++
		return resp, err
	}
	if c.status == nil {
		c.status = map[int]int64{}
	}
	c.status[resp.StatusCode]++
	return resp, nil
}

// WireTotals are the requests that reached the server, as the client
// counted them.
type WireTotals struct {
	Checks, Batch int64 // sent while checking the tokens, and for the batch
	Errors        int64 // no answer (connection errors)
	Status        map[int]int64
}

func (c *countingTransport) totals() WireTotals {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := make(map[int]int64, len(c.status))
	for k, v := range c.status {
		st[k] = v
	}
	return WireTotals{Checks: c.sent[phaseChecks], Batch: c.sent[phaseBatch], Errors: c.errors, Status: st}
}

// recorder tallies results and the transport's events.
type recorder struct {
	phase phaseFlag

	mu        sync.Mutex
	t         RunTotals
	firstBy   map[string]string // path → owner of the credential of its first fetch
	sentByCrd map[string]int
	// ownerOf names the owner of a masked credential; set before the
	// batch starts, when the tokens have been checked.
	ownerOf func(masked string) string
}

// RunTotals are the run as the client saw it.
type RunTotals struct {
	Done, Failed int
	// Revalidated counts jobs answered from the cache after a 304.
	Revalidated int
	// Fresh counts jobs answered from the cache without a request: the
	// stored answer was still fresh for its max-age.
	Fresh int
	// RepeatsOtherOwner counts repeats sent with a token of another
	// owner than the URL's first fetch: conditional requests all the same,
	// as the cache revalidates a stored answer with any token.
	RepeatsOtherOwner int
	// RepeatsSameOwner counts repeats sent with a token of the same owner.
	RepeatsSameOwner       int
	Waits                  int
	WaitTotal, LongestWait time.Duration
	Refusals               int // rate-limit refusals the client saw
	Retries                int
	FirstError             error
	// ByCredential counts the batch's answers per masked credential.
	ByCredential map[string]int
}

func newRecorder() *recorder {
	return &recorder{firstBy: map[string]string{}, sentByCrd: map[string]int{}}
}

func (r *recorder) startBatch(ownerOf func(masked string) string) {
	r.mu.Lock()
	r.ownerOf = ownerOf
	r.mu.Unlock()
	r.phase.set(phaseBatch)
}

func (r *recorder) event(e transport.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Kind {
	case transport.EventWaited:
		r.t.Waits++
		r.t.WaitTotal += e.Wait
		r.t.LongestWait = max(r.t.LongestWait, e.Wait)
	case transport.EventRateLimited:
		r.t.Refusals++
	case transport.EventRetried:
		r.t.Retries++
	}
}

func (r *recorder) done(res Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := res.Err == nil && res.Status < 400
	if !ok {
		r.t.Failed++
		if r.t.FirstError == nil {
			r.t.FirstError = res.Err
			if res.Err == nil {
				r.t.FirstError = fmt.Errorf("GET %s: HTTP %d", res.Job.Path, res.Status)
			}
		}
		return
	}
	r.t.Done++
	switch res.Cache {
	case cache.Revalidated:
		r.t.Revalidated++
	case cache.Fresh, cache.Stale:
		// No request went, so no credential: nothing to count per owner.
		r.t.Fresh++
		return
	}
	if res.Credential != "" {
		r.sentByCrd[res.Credential]++
	}
	owner := res.Credential
	if r.ownerOf != nil {
		owner = r.ownerOf(res.Credential)
	}
	if res.Job.Kind == KindRepeat {
		if first, ok := r.firstBy[res.Job.Path]; ok && first != owner {
			r.t.RepeatsOtherOwner++
		} else if ok {
			r.t.RepeatsSameOwner++
		}
		return
	}
	r.firstBy[res.Job.Path] = owner
}

func (r *recorder) totals() RunTotals {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.t
	t.ByCredential = make(map[string]int, len(r.sentByCrd))
	for k, v := range r.sentByCrd {
		t.ByCredential[k] = v
	}
	return t
}

// progressCounts are the few numbers the progress display needs.
func (r *recorder) progressCounts() (done, failed, revalidated, fresh, waits int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.t.Done, r.t.Failed, r.t.Revalidated, r.t.Fresh, r.t.Waits
}

// answeredBy counts the batch's answers per masked credential so far.
func (r *recorder) answeredBy() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.sentByCrd))
	for k, v := range r.sentByCrd {
		out[k] = v
	}
	return out
}
