package poll

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper/cache"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/internal/sleep"
)

// DefaultMaxBody is the largest body a poll reads when Options.MaxBody is 0.
const DefaultMaxBody = 32 << 20

// Options configure a Poller.
type Options struct {
	// URLs are the http(s) URLs to poll with GET.
	URLs []string
	// Client sends the polls; nil means http.DefaultClient. Pass
	// ratekeeper's rate-keeping client to pace them and keep them within
	// the quota.
	Client *http.Client
	// Policy decides the intervals; the zero value means DefaultPolicy().
	Policy Policy
	// Header is added to every poll (Accept, say).
	Header http.Header
	// WorkerID names this poller in a fleet: it sets a stable offset of
	// the first polls (see Offset). Empty: the first URL is polled at
	// once and the others spread over the first interval.
	WorkerID string
	// Sink receives the changes; nil means JSON lines on os.Stdout.
	Sink Sink
	// EmitInitial emits each URL's first answer as a change marked
	// initial; by default the first answer is only the baseline.
	EmitInitial bool
	// Quota tells which URLs share a quota bucket (they split the budget)
	// and what quota remains before polling starts; nil: each URL is its
	// own bucket, and the first answer's rate-limit headers decide the
	// start check. See TransportQuota.
	Quota QuotaSource
	// Registerer receives the Prometheus metrics; nil: none.
	Registerer prometheus.Registerer
	// OnEvent is told about polls, changes, budget stretches and pauses,
	// rate limits, errors and warnings. It must not block for long.
	OnEvent func(Event)
	// Logger receives the same as debug (polls) and info (the rest) logs;
	// nil: none.
	Logger *slog.Logger
	// Rand returns numbers in [0, 1) for the backoff jitter; nil means
	// math/rand/v2.
	Rand func() float64
	// MaxBody bounds the body a poll reads; a larger one is an error.
	// 0 means DefaultMaxBody.
	MaxBody int64
	// DBOutageTimeout is how long the database of durable polls
	// (NewTaskHandler's) may be away before a call on it gives up;
	// meanwhile every call waits for it (0: 2m, negative: no wait).
	DBOutageTimeout time.Duration
}

// QuotaSource tells the poller about the quota its polls spend.
type QuotaSource interface {
	// Bucket names the quota a GET of u spends ("" when unknown); URLs
	// with the same bucket split the budget.
	Bucket(u *url.URL) string
	// Quota returns what is known of the quota a GET of u spends, asking
	// the server (with free requests where it can) when nothing is known
	// yet.
	Quota(ctx context.Context, u *url.URL, now time.Time) (Quota, error)
}

// Stop conditions, found with errors.Is on the error Run returns.
var (
	// ErrTooManyErrors: one URL failed Policy.MaxErrors times in a row
	// (it is also Decision.Stop).
	ErrTooManyErrors = errors.New("too many consecutive errors")
	// ErrIdleTimeout: no URL changed for Policy.IdleTimeout.
	ErrIdleTimeout = errors.New("idle timeout")
	// ErrQuotaFloor: the remaining quota is below Policy.MinRemaining at
	// the start (Policy.CheckStart).
	ErrQuotaFloor = errors.New("quota below the floor")
)

// StopError is returned by Run when a stop condition ends polling: Err is
// ErrTooManyErrors, ErrIdleTimeout or ErrQuotaFloor.
type StopError struct {
	// URL is the URL that stopped polling ("" for the idle timeout).
	URL string
	Err error
	// Last is the last error of a URL that failed too often.
	Last error
	// Detail completes the message.
	Detail string
}

func (e *StopError) Error() string {
	switch {
	case errors.Is(e.Err, ErrTooManyErrors):
		return fmt.Sprintf("polling %s stopped after %s; the last: %v", e.URL, e.Detail, e.Last)
	case errors.Is(e.Err, ErrIdleTimeout):
		return fmt.Sprintf("polling stopped: %s (idle timeout)", e.Detail)
	case errors.Is(e.Err, ErrQuotaFloor):
		return fmt.Sprintf("not polling %s: %v", e.URL, e.Err)
	}
	return fmt.Sprintf("polling %s stopped: %v", e.URL, e.Err)
}

func (e *StopError) Unwrap() error { return e.Err }

// Poller polls a set of URLs, each on its own adaptive schedule.
type Poller struct {
	opts    Options
	policy  Policy
	client  *http.Client
	sink    Sink
	metrics *Metrics
	log     *slog.Logger
	rand    func() float64
	maxBody int64

	targets []*target
	byURL   map[string]*target

	mu         sync.Mutex
	lastChange time.Time
}

// target is one polled URL and what is known about it.
type target struct {
	raw     string
	u       *url.URL
	shown   string
	bucket  string
	sharers int
	index   int

	mu    sync.Mutex
	state State
	base  Baseline
	// checkFloor asks the first answer in this process to decide the
	// start check (the quota was unknown before).
	checkFloor bool
	announced  announced
}

// New checks the options and returns a Poller. Bad input — no URL, one
// that is not http(s), a URL given twice, an invalid policy — is an
// error saying what is wrong.
func New(opts Options) (*Poller, error) {
	if len(opts.URLs) == 0 {
		return nil, errors.New("no URL to poll: give at least one http(s) URL")
	}
	return newPoller(opts)
}

// newPoller is New without the need for URLs (a task handler learns them
// from its tasks).
func newPoller(opts Options) (*Poller, error) {
	p := &Poller{opts: opts, policy: opts.Policy, client: opts.Client, sink: opts.Sink, log: opts.Logger,
		rand: opts.Rand, maxBody: opts.MaxBody, byURL: map[string]*target{}}
	if p.policy == (Policy{}) {
		p.policy = DefaultPolicy()
	}
	if err := p.policy.Validate(); err != nil {
		return nil, fmt.Errorf("poll policy: %w", err)
	}
	if p.client == nil {
		p.client = http.DefaultClient
	}
	if p.sink == nil {
		p.sink = JSONLines(os.Stdout)
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.rand == nil {
		p.rand = rand.Float64
	}
	if p.maxBody <= 0 {
		p.maxBody = DefaultMaxBody
	}
	m, err := NewMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	p.metrics = m
	for _, raw := range opts.URLs {
		tg, err := p.newTarget(raw)
		if err != nil {
			return nil, err
		}
		if _, dup := p.byURL[raw]; dup {
			return nil, fmt.Errorf("URL %s given twice: poll each URL once", tg.shown)
		}
		tg.index = len(p.targets)
		p.targets = append(p.targets, tg)
		p.byURL[raw] = tg
	}
	p.countSharers()
	return p, nil
}

func (p *Poller) newTarget(raw string) (*target, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an http(s) URL such as https://api.github.com/repos/OWNER/REPO/events", raw)
	}
	tg := &target{raw: raw, u: u, shown: Redact(u), sharers: 1}
	if p.opts.Quota != nil {
		tg.bucket = p.opts.Quota.Bucket(u)
	}
	return tg, nil
}

// countSharers counts, for each URL, the URLs polled in the same bucket.
func (p *Poller) countSharers() {
	n := map[string]int{}
	for _, tg := range p.targets {
		if tg.bucket != "" {
			n[tg.bucket]++
		}
	}
	for _, tg := range p.targets {
		tg.sharers = max(n[tg.bucket], 1)
	}
}

// Policy returns the policy in force (the default when Options gave none).
func (p *Poller) Policy() Policy { return p.policy }

// Run polls every URL until ctx ends (it then returns nil) or a stop
// condition is met (it returns a *StopError), or the sink fails (it
// returns that error). Before the first poll it checks the remaining
// quota against Policy.MinRemaining. The first poll of URL i of n happens
// at the start plus its offset (see Offset), each later one when the
// policy's decision says.
func (p *Poller) Run(ctx context.Context) error {
	start := time.Now()
	if err := p.checkStart(ctx, start); err != nil {
		return err
	}
	p.mu.Lock()
	p.lastChange = time.Time{}
	p.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, tg := range p.targets {
		first := start.Add(p.firstOffset(tg, start))
		wg.Go(func() { p.loop(ctx, cancel, tg, first) })
	}
	if p.policy.IdleTimeout > 0 {
		wg.Go(func() { p.watchIdle(ctx, cancel, start) })
	}
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return cause
	}
	return nil
}

// firstOffset is the wait before a URL's first poll: its share of the
// interval the policy gives at start.
func (p *Poller) firstOffset(tg *target, now time.Time) time.Duration {
	span, _ := p.policy.Adaptive(State{}, now)
	return targetOffset(p.opts.WorkerID, tg.index, len(p.targets), span)
}

func (p *Poller) loop(ctx context.Context, stop context.CancelCauseFunc, tg *target, next time.Time) {
	for {
		if sleep.For(ctx, time.Until(next)) != nil {
			return
		}
		d, err := p.pollOnce(ctx, tg)
		if err != nil {
			if ctx.Err() == nil {
				stop(err)
			}
			return
		}
		next = d.Next
	}
}

// watchIdle stops polling once no URL changed for the idle timeout since
// start.
func (p *Poller) watchIdle(ctx context.Context, stop context.CancelCauseFunc, start time.Time) {
	timeout := p.policy.IdleTimeout
	for {
		p.mu.Lock()
		ref := p.lastChange
		p.mu.Unlock()
		if ref.Before(start) {
			ref = start
		}
		deadline := ref.Add(timeout)
		if !time.Now().Before(deadline) {
			detail := fmt.Sprintf("no change for %s since the start", timeout)
			if ref != start {
				detail = fmt.Sprintf("no change for %s since the last one at %s", timeout, ref.Format(time.RFC3339))
			}
			stop(&StopError{Err: ErrIdleTimeout, Detail: detail})
			return
		}
		if sleep.For(ctx, time.Until(deadline)) != nil {
			return
		}
	}
}

// checkStart refuses to start when a URL's remaining quota is known and
// below the floor; URLs whose quota is unknown are checked on their first
// answer instead.
func (p *Poller) checkStart(ctx context.Context, now time.Time) error {
	if p.policy.MinRemaining <= 0 {
		return nil
	}
	for _, tg := range p.targets {
		tg.mu.Lock()
		tg.checkFloor = true
		tg.mu.Unlock()
		if p.opts.Quota == nil {
			continue
		}
		q, err := p.opts.Quota.Quota(ctx, tg.u, now)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.event(Event{Kind: EventWarning, URL: tg.shown, At: now, Err: err,
				Message: "remaining quota unknown before the first poll; its answer will decide"})
			continue
		}
		if !q.Known {
			continue
		}
		tg.mu.Lock()
		tg.checkFloor = false
		tg.mu.Unlock()
		if err := p.policy.CheckStart(q, now); err != nil {
			return &StopError{URL: tg.shown, Err: err}
		}
	}
	return nil
}

// answer is what one poll got back, before the policy sees it.
type answer struct {
	obs    Observation
	status int
	change *Change
	err    error
}

// pollOnce polls tg once, emits a change if there is one, and returns the
// policy's decision. An error is returned only when polling must stop:
// ctx ended, the sink failed, or a stop condition (a *StopError).
func (p *Poller) pollOnce(ctx context.Context, tg *target) (Decision, error) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	a := p.fetch(ctx, tg)
	if ctx.Err() != nil {
		return Decision{}, ctx.Err()
	}
	now := time.Now()
	a.obs.Sharers = tg.sharers
	a.obs.Jitter = p.rand()
	if tg.checkFloor && a.obs.Quota.Known {
		tg.checkFloor = false
		if err := p.policy.CheckStart(a.obs.Quota, now); err != nil {
			return Decision{}, &StopError{URL: tg.shown, Err: err}
		}
	}
	var d Decision
	tg.state, d = p.policy.Next(tg.state, a.obs, now)
	p.metrics.record(tg.shown, a.obs.Outcome, a.obs.NotModified, d)

	ev := Event{URL: tg.shown, At: now, Outcome: a.obs.Outcome, Status: a.status, Interval: d.Interval, Next: d.Next,
		Rule: d.Rule, Unstretched: d.Unstretched, Quota: a.obs.Quota, Errors: tg.state.Errors, Err: a.err}
	p.log.Debug("poll", "url", tg.shown, "outcome", a.obs.Outcome.String(), "status", a.status,
		"interval", d.Interval, "rule", string(d.Rule), "err", a.err)
	if p.opts.OnEvent != nil {
		e := ev
		e.Kind = EventPolled
		p.opts.OnEvent(e)
	}
	if a.change != nil {
		if a.obs.Outcome == Changed {
			p.mu.Lock()
			p.lastChange = now
			p.mu.Unlock()
			p.event(withKind(ev, EventChanged))
		}
		if err := p.sink.Emit(ctx, *a.change); err != nil {
			if ctx.Err() != nil {
				return Decision{}, ctx.Err()
			}
			if !isExecError(err) {
				return Decision{}, fmt.Errorf("writing the change of %s: %w", tg.shown, err)
			}
			p.event(Event{Kind: EventExecFailed, URL: tg.shown, At: now, Err: err})
		}
	}
	p.tellNext(tg, ev, d)
	if d.Stop != nil {
		return d, &StopError{URL: tg.shown, Err: d.Stop, Last: a.err,
			Detail: fmt.Sprintf("%d consecutive errors", tg.state.Errors)}
	}
	return d, nil
}

func withKind(e Event, k EventKind) Event { e.Kind = k; return e }

// tellNext says when tg's next poll is due, once per change of the
// interval (see announced): as a refusal or an error, whose lines say it
// too; as a pause until the reset, every time; as the budget guard's
// stretch when it lengthens the interval by a tenth or more; else plainly.
func (p *Poller) tellNext(tg *target, ev Event, d Decision) {
	changed := tg.announced.update(d)
	switch {
	case ev.Outcome == RateLimited:
		p.event(withKind(ev, EventRateLimited))
	case ev.Outcome == Failed:
		p.event(withKind(ev, EventBackoff))
	case d.Rule == RulePaused:
		p.event(withKind(ev, EventPaused))
	case !changed:
	case d.Rule == RuleBudget && d.Interval-d.Unstretched >= d.Unstretched/10:
		p.event(withKind(ev, EventBudget))
	default:
		p.event(withKind(ev, EventNext))
	}
}

// announced is the interval last said for a URL, and the rule that set it.
type announced struct {
	interval time.Duration
	rule     Rule
}

// update records d and reports whether it is a change worth saying: its
// rule differs, or its interval by more than a tenth (the budget guard's
// interval moves a little at every poll as the quota falls).
func (a *announced) update(d Decision) bool {
	diff := d.Interval - a.interval
	if d.Rule == a.rule && a.interval > 0 && diff.Abs() <= a.interval/10 {
		return false
	}
	a.interval, a.rule = d.Interval, d.Rule
	return true
}

// event reports e to OnEvent and the logger.
func (p *Poller) event(e Event) {
	if p.opts.OnEvent != nil {
		p.opts.OnEvent(e)
	}
	p.log.Info(e.String(), "kind", string(e.Kind), "url", e.URL)
}

// fetch sends one conditional GET and classifies the answer.
func (p *Poller) fetch(ctx context.Context, tg *target) answer {
	req, err := p.newRequest(ctx, tg)
	if err != nil {
		return answer{obs: Observation{Outcome: Failed}, err: err}
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return unanswered(tg, err)
	}
	defer resp.Body.Close()
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, p.maxBody+1))
	return p.classify(tg, resp, body, readErr, time.Now())
}

// newRequest makes the GET of tg with the configured headers, conditional
// on the version last seen.
func (p *Poller) newRequest(ctx context.Context, tg *target) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tg.raw, nil)
	if err != nil {
		return nil, err
	}
	for k, vs := range p.opts.Header {
		req.Header[k] = append([]string(nil), vs...)
	}
	// Seeing change is the poller's job: an answer a cache holds as fresh
	// is not news, so every poll asks the server (Cache-Control:
	// no-cache), whatever the answer's max-age.
	if _, set := req.Header["Cache-Control"]; !set {
		req.Header.Set("Cache-Control", "no-cache")
	}
	// Our own validators make the request conditional: the server answers
	// an unchanged resource with a 304 (free on GitHub), and this works
	// after a restart and with any client, not only with the rate-keeping
	// client's cache (which steps aside for a request made conditional by
	// its caller).
	if tg.base.Seen {
		if tg.base.ETag != "" {
			req.Header.Set("If-None-Match", tg.base.ETag)
		}
		if tg.base.LastModified != "" {
			req.Header.Set("If-Modified-Since", tg.base.LastModified)
		}
	}
	return req, nil
}

// unanswered is the answer for a request that got no response: rate
// limited and never sent when the error says when to retry (its
// RetryAt, as the rate-keeping transport's WaitError has), else failed.
func unanswered(tg *target, err error) answer {
	var a answer
	var ue *url.Error
	if errors.As(err, &ue) {
		// http.Client masks a password in the URL, not a token
		// given as the user name.
		ue.URL = tg.shown
	}
	var ra interface{ RetryAt() time.Time }
	if errors.As(err, &ra) {
		a.obs.Outcome, a.obs.RetryAt, a.obs.Unsent = RateLimited, ra.RetryAt(), true
	} else {
		a.obs.Outcome = Failed
	}
	a.err = err
	return a
}

// classify reads a response received at now, with body its first
// maxBody+1 bytes: its quota, then whether it is a refusal, a failure, the
// version last seen or a new one.
func (p *Poller) classify(tg *target, resp *http.Response, body []byte, readErr error, now time.Time) answer {
	a := answer{status: resp.StatusCode}
	reading := headers.Parse(resp.StatusCode, resp.Header, body[:min(len(body), 8<<10)], now)
	a.obs.PollInterval = reading.PollInterval
	a.obs.Quota = quotaOf(&reading, now)
	revalidated := resp.Header.Get(cache.HeaderName) == cache.Revalidated
	switch {
	case reading.Limited != headers.NotLimited:
		a.obs.Outcome, a.obs.RetryAt = RateLimited, now.Add(reading.Wait)
		a.err = fmt.Errorf("GET %s: %s (%s rate limit)", tg.shown, resp.Status, reading.Limited)
	case readErr != nil:
		a.obs.Outcome, a.err = Failed, fmt.Errorf("GET %s: reading the body: %w", tg.shown, readErr)
	case int64(len(body)) > p.maxBody:
		a.obs.Outcome, a.err = Failed, fmt.Errorf("GET %s: body larger than %d bytes", tg.shown, p.maxBody)
	case resp.StatusCode == http.StatusNotModified && tg.base.Seen,
		revalidated && tg.base.Seen && resp.StatusCode == http.StatusOK:
		a.obs.Outcome, a.obs.NotModified = Unchanged, true
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		p.compare(tg, resp, body, now, &a)
	default:
		a.obs.Outcome, a.err = Failed, fmt.Errorf("GET %s: %s", tg.shown, resp.Status)
	}
	return a
}

// compare sets a's outcome for a successful response against the version
// last seen, with the change to emit, and makes the response the version
// last seen.
func (p *Poller) compare(tg *target, resp *http.Response, body []byte, now time.Time, a *answer) {
	etag, lastMod := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	base, diff := Compare(tg.base, etag, lastMod, body)
	first := !tg.base.Seen
	tg.base = base
	switch {
	case first:
		a.obs.Outcome = First
		if p.opts.EmitInitial {
			a.change = &Change{URL: tg.shown, ETag: etag, ChangedAt: now, Initial: true, Body: body, ContentType: resp.Header.Get("Content-Type")}
		}
	case diff.Changed:
		a.obs.Outcome = Changed
		a.change = &Change{URL: tg.shown, ETag: etag, ChangedAt: now, Body: body, ContentType: resp.Header.Get("Content-Type"),
			NewItems: diff.NewItems, Items: diff.Items}
	default:
		a.obs.Outcome = Unchanged
	}
}

// quotaOf turns a reading into a Quota on the local clock: the time to
// reset is measured on the server's clock when the answer has a Date, so
// clock skew does not shift it.
func quotaOf(r *headers.Reading, now time.Time) Quota {
	if r.Remaining == headers.UnknownCount {
		return Quota{}
	}
	q := Quota{Known: true, Remaining: r.Remaining, Limit: r.Limit, Resource: r.Resource}
	if r.HasReset() {
		if !r.ServerTime.IsZero() {
			q.Reset = now.Add(r.Reset.Sub(r.ServerTime))
		} else {
			q.Reset = r.Reset
		}
	}
	return q
}
