package poll

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

// simBase is the simulated GitHub's base URL; the host is never dialled:
// the simulator's own RoundTripper serves every request in-process, so
// the fixtures work inside synctest bubbles.
const simBase = "http://sim.test"

// fixture is a simulated GitHub with one token of alice, and the
// rate-keeping client pointed at it.
type fixture struct {
	srv    *sim.Server
	tr     *transport.Transport
	client *http.Client
}

func newFixture(t *testing.T, api sim.APIConfig, maxWait time.Duration) *fixture {
	t.Helper()
	api.Dialect = sim.DialectGitHub
	if api.Tokens == nil {
		api.Tokens = []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}}
	}
	srv, err := sim.New(sim.Config{Seed: 1, APIs: []sim.APIConfig{api}})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := ratekeeper.NewTransport(ratekeeper.Options{
		Providers: []string{"github=" + simBase},
		Tokens:    map[string][]string{"github": {"tok-alice-1"}},
		Base:      srv.Transport(""),
		Policy:    "greedy",
		MaxWait:   maxWait,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{srv: srv, tr: tr, client: &http.Client{Transport: tr}}
}

func (f *fixture) core(t *testing.T) sim.BucketStats {
	t.Helper()
	b, ok := f.srv.Stats().BucketFor("github", "alice", "core")
	if !ok {
		t.Fatal("no core bucket for alice")
	}
	return b
}

// recorder collects a poller's events and changes.
type recorder struct {
	mu      sync.Mutex
	events  []Event
	changes []Change
	onPoll  func(n int, e Event)
	polls   int
}

func (r *recorder) event(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	var hook func(int, Event)
	if e.Kind == EventPolled {
		r.polls++
		hook = r.onPoll
	}
	n := r.polls
	r.mu.Unlock()
	if hook != nil {
		hook(n, e)
	}
}

func (r *recorder) Emit(_ context.Context, c Change) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, c)
	return nil
}

func (r *recorder) kinds(k EventKind) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// utcPolicy is the default profile in UTC.
func utcPolicy() Policy {
	p := DefaultPolicy()
	p.Location = time.UTC
	return p
}

func TestUnchangedPollsAreFreeAfterTheFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, sim.APIConfig{}, 0)
		reg := prometheus.NewRegistry()
		rec := &recorder{}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var chargedAfterFirst int64 = -1
		rec.onPoll = func(n int, e Event) {
			if n == 1 {
				chargedAfterFirst = f.core(t).Charged
			}
			if n == 100 {
				cancel()
			}
		}
		url := simBase + "/repos/o/r/events"
		p, err := New(Options{URLs: []string{url}, Client: f.client, Policy: utcPolicy(), Sink: rec,
			Quota: TransportQuota(f.tr), OnEvent: rec.event, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
		b := f.core(t)
		// The first full answer only.
		if chargedAfterFirst != 1 || b.Charged != chargedAfterFirst {
			t.Fatalf("charged %d after the first poll, %d after 100", chargedAfterFirst, b.Charged)
		}
		if b.NotModified != 99 {
			t.Fatalf("%d answers were 304, want 99", b.NotModified)
		}
		if len(rec.changes) != 0 {
			t.Fatalf("%d changes emitted for an unchanged resource", len(rec.changes))
		}
		if got := counter(t, reg, "ratekeeper_poll_not_modified_total"); got != 99 {
			t.Fatalf("not modified metric %v", got)
		}
		if got := counter(t, reg, "ratekeeper_poll_polls_total"); got != 100 {
			t.Fatalf("polls metric %v", got)
		}
		last := rec.kinds(EventPolled)[99]
		if got := counter(t, reg, "ratekeeper_poll_interval_seconds"); got != last.Interval.Seconds() || got < 60 {
			t.Fatalf("interval metric %v, last interval %v", got, last.Interval)
		}
		// Every interval honours the events feed's X-Poll-Interval (60 s).
		for _, e := range rec.kinds(EventPolled) {
			if e.Interval < time.Minute {
				t.Fatalf("interval %v below X-Poll-Interval", e.Interval)
			}
		}
	})
}

// counter sums a metric's values over its series.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += metricValue(m)
		}
	}
	return sum
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

func TestChangeDetectedAndEmittedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, sim.APIConfig{}, 0)
		var out bytes.Buffer
		rec := &recorder{}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		path := "/repos/o/r/events"
		rec.onPoll = func(n int, e Event) {
			switch n {
			case 5:
				if err := f.srv.Touch(path); err != nil {
					t.Error(err)
				}
			case 20:
				cancel()
			}
		}
		reg := prometheus.NewRegistry()
		p, err := New(Options{URLs: []string{simBase + path}, Client: f.client, Policy: utcPolicy(), Sink: JSONLines(&out),
			OnEvent: rec.event, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 1 {
			t.Fatalf("%d lines, want 1:\n%s", len(lines), out.String())
		}
		var line struct {
			URL       string            `json:"url"`
			ETag      string            `json:"etag"`
			ChangedAt time.Time         `json:"changed_at"`
			NewItems  []json.RawMessage `json:"new_items"`
		}
		if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
			t.Fatal(err)
		}
		if line.URL != simBase+path || line.ETag == "" || line.ChangedAt.IsZero() || len(line.NewItems) != 1 {
			t.Fatalf("line %s", lines[0])
		}
		var ev struct{ ID, Type string }
		if err := json.Unmarshal(line.NewItems[0], &ev); err != nil || ev.ID == "" {
			t.Fatalf("new item %s", line.NewItems[0])
		}
		changed := rec.kinds(EventChanged)
		if len(changed) != 1 || changed[0].Interval != time.Minute || changed[0].Rule != RuleAfterChange && changed[0].Rule != RulePollFloor {
			t.Fatalf("changed events %+v", changed)
		}
		if got := counter(t, reg, "ratekeeper_poll_changes_total"); got != 1 {
			t.Fatalf("changes metric %v", got)
		}
		if b := f.core(t); b.Charged != 2 { // first answer, the change
			t.Fatalf("charged %d", b.Charged)
		}
	})
}

// TestSimulatedDay polls a resource for a whole Monday (UTC) with the
// default profile and checks the schedule against every rule of it.
func TestSimulatedDay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, sim.APIConfig{}, 0)
		// The bubble starts on Saturday 1 January 2000, midnight UTC.
		monday := time.Date(2000, 1, 3, 0, 0, 0, 0, time.UTC)
		time.Sleep(time.Until(monday.Add(7 * time.Minute)))
		path := "/repos/o/r"
		at := func(h, m, s int) time.Time {
			return monday.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(s)*time.Second)
		}
		// Idle polls fall on the ten minutes; after the first change is seen
		// at 10:10 polls come at 10:11 and 10:12:30, which sees the second.
		touches := []time.Time{at(10, 0, 30), at(10, 12, 0), at(14, 0, 30)}
		go func() {
			for _, tt := range touches {
				time.Sleep(time.Until(tt))
				if err := f.srv.Touch(path); err != nil {
					t.Error(err)
				}
			}
		}()
		rec := &recorder{}
		ctx, cancel := context.WithDeadline(t.Context(), monday.Add(24*time.Hour))
		defer cancel()
		p, err := New(Options{URLs: []string{simBase + path}, Client: f.client, Policy: utcPolicy(), Sink: rec, OnEvent: rec.event})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
		polls := rec.kinds(EventPolled)
		gaps := map[int64]time.Duration{} // by Unix nanoseconds of the poll
		for i := 0; i+1 < len(polls); i++ {
			gaps[polls[i].At.UnixNano()] = polls[i+1].At.Sub(polls[i].At)
		}
		gapAfter := func(at time.Time) (time.Duration, bool) { g, ok := gaps[at.UnixNano()]; return g, ok }
		between := func(from, to time.Time, fn func(e Event, gap time.Duration)) {
			t.Helper()
			n := 0
			for i, e := range polls {
				if !e.At.Before(from) && e.At.Before(to) && i+1 < len(polls) {
					g, _ := gapAfter(e.At)
					fn(e, g)
					n++
				}
			}
			if n == 0 {
				t.Fatalf("no poll between %s and %s", from.Format("15:04"), to.Format("15:04"))
			}
		}
		// Night until 7: every 15 minutes, and the last one cut short so
		// that 07:00 is polled.
		between(at(0, 7, 0), at(6, 52, 0), func(e Event, gap time.Duration) {
			if gap != 15*time.Minute {
				t.Errorf("night poll at %s: next after %v", e.At.Format("15:04:05"), gap)
			}
		})
		if _, ok := gapAfter(at(7, 0, 0)); !ok {
			t.Errorf("07:00 was not polled")
		}
		// Idle since the start: 10 minutes from 7 (morning and business
		// hours alike) until the first change.
		between(at(7, 0, 0), at(9, 59, 0), func(e Event, gap time.Duration) {
			if gap != 10*time.Minute || e.Rule != RuleIdle {
				t.Errorf("idle poll at %s: next after %v (%s)", e.At.Format("15:04:05"), gap, e.Rule)
			}
		})
		// The changes: one poll sees each, then one minute.
		changes := rec.kinds(EventChanged)
		if len(changes) != 3 || len(rec.changes) != 3 {
			t.Fatalf("%d changes seen, %d emitted; want 3", len(changes), len(rec.changes))
		}
		for i, c := range changes {
			if c.At.Before(touches[i]) || c.At.Sub(touches[i]) > 10*time.Minute {
				t.Errorf("change %d seen at %s, made at %s", i, c.At.Format("15:04:05"), touches[i].Format("15:04:05"))
			}
			if g, _ := gapAfter(c.At); g != time.Minute {
				t.Errorf("after the change at %s: next after %v", c.At.Format("15:04:05"), g)
			}
		}
		// After a change the interval stretches back, never shorter than
		// the one before, up to business hours' 3 minutes.
		between(changes[1].At, at(11, 0, 0), func(e Event, gap time.Duration) {
			if gap < time.Minute || gap > 3*time.Minute {
				t.Errorf("active poll at %s: next after %v", e.At.Format("15:04:05"), gap)
			}
		})
		// An hour after the last change: idle again.
		between(changes[2].At.Add(time.Hour+time.Second), at(21, 50, 0), func(e Event, gap time.Duration) {
			if gap != 10*time.Minute {
				t.Errorf("idle poll at %s: next after %v (%s)", e.At.Format("15:04:05"), gap, e.Rule)
			}
		})
		// Quiet hours from 22.
		between(at(22, 0, 0), at(23, 45, 0), func(e Event, gap time.Duration) {
			if gap != 15*time.Minute || e.Rule != RuleNight {
				t.Errorf("night poll at %s: next after %v (%s)", e.At.Format("15:04:05"), gap, e.Rule)
			}
		})
		for _, e := range polls {
			t.Logf("%s %s %v %s", e.At.Format("15:04:05"), e.Outcome, e.Interval, e.Rule)
		}
		t.Logf("%d polls in the day", len(polls))
	})
}

// scripted answers each GET with the next of its handlers (the last one
// repeats), counting requests.
type scripted struct {
	mu       sync.Mutex
	handlers []func(w http.ResponseWriter, r *http.Request)
	n        int
	at       []time.Time
}

func (s *scripted) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	h := s.handlers[min(s.n, len(s.handlers)-1)]
	s.n++
	s.at = append(s.at, time.Now())
	s.mu.Unlock()
	rec := newResponseRecorder()
	h(rec, req)
	resp := rec.result()
	resp.Request = req
	return resp, nil
}

type responseRecorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func newResponseRecorder() *responseRecorder { return &responseRecorder{header: http.Header{}} }

func (r *responseRecorder) Header() http.Header { return r.header }
func (r *responseRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = 200
	}
	return r.body.Write(b)
}
func (r *responseRecorder) WriteHeader(code int) { r.code = code }
func (r *responseRecorder) result() *http.Response {
	if r.code == 0 {
		r.code = 200
	}
	return &http.Response{StatusCode: r.code, Status: fmt.Sprintf("%d %s", r.code, http.StatusText(r.code)),
		Header: r.header, Body: io.NopCloser(bytes.NewReader(r.body.Bytes())), ProtoMajor: 1, ProtoMinor: 1}
}

func status(code int) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }
}

func body(etag, text string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", etag)
		io.WriteString(w, text)
	}
}

func TestErrorsBackOffResetAndStopRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fails := []func(http.ResponseWriter, *http.Request){}
		for range 3 {
			fails = append(fails, status(500))
		}
		handlers := append([]func(http.ResponseWriter, *http.Request){body(`"v1"`, "one")}, fails...)
		handlers = append(handlers, body(`"v1"`, "one")) // a success resets the count
		for range 5 {
			handlers = append(handlers, status(503))
		}
		s := &scripted{handlers: handlers}
		rec := &recorder{}
		pol := utcPolicy()
		pol.MaxErrors = 5
		p, err := New(Options{URLs: []string{"http://api.test/x"}, Client: &http.Client{Transport: s}, Policy: pol, Sink: rec, OnEvent: rec.event,
			Rand: func() float64 { return 0.5 }})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = p.Run(t.Context())
		var se *StopError
		if !errors.As(err, &se) || !errors.Is(err, ErrTooManyErrors) {
			t.Fatalf("Run: %v", err)
		}
		msg := err.Error()
		if !strings.Contains(msg, "5 consecutive errors") || !strings.Contains(msg, "503 Service Unavailable") || !strings.Contains(msg, "http://api.test/x") {
			t.Fatalf("message %q", msg)
		}
		// 1 + 3 errors + 1 success + 5 errors.
		if s.n != 10 {
			t.Fatalf("%d polls, want 10", s.n)
		}
		var gaps []time.Duration
		for i := 1; i < len(s.at); i++ {
			gaps = append(gaps, s.at[i].Sub(s.at[i-1]))
		}
		// Night (15 min) is longer than the first backoffs (45 s, 1m30s, 3m
		// with jitter 0.5), so errors never poll sooner than that; the
		// fifth error of the second streak backs off 12 min… and the
		// backoff restarted after the success.
		for i, g := range gaps {
			if g < 15*time.Minute {
				t.Fatalf("gap %d is %v, shorter than the night interval", i, g)
			}
		}
		backoffs := rec.kinds(EventBackoff)
		if len(backoffs) != 8 || backoffs[2].Errors != 3 || backoffs[3].Errors != 1 || backoffs[7].Errors != 5 {
			t.Fatalf("backoff events %d: %+v", len(backoffs), backoffs)
		}
		if time.Since(start) <= 0 {
			t.Fatal("no time passed")
		}
	})
}

func TestBackoffGrowsPastTheAdaptiveInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scripted{handlers: []func(http.ResponseWriter, *http.Request){body(`"v"`, "x"), status(502)}}
		pol := utcPolicy()
		pol.AfterChange, pol.Business, pol.Default, pol.Idle, pol.Night, pol.Min = time.Minute, time.Minute, time.Minute, time.Minute, time.Minute, time.Minute
		pol.MaxErrors = 9
		p, err := New(Options{URLs: []string{"http://api.test/x"}, Client: &http.Client{Transport: s}, Policy: pol, Sink: &recorder{},
			Rand: func() float64 { return 0 }})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(t.Context()); !errors.Is(err, ErrTooManyErrors) {
			t.Fatal(err)
		}
		var gaps []time.Duration
		for i := 1; i < len(s.at); i++ {
			gaps = append(gaps, s.at[i].Sub(s.at[i-1]))
		}
		// Jitter 0: half of 1m·2^(n−1), at least the 1 min interval,
		// capped at half of an hour.
		want := []time.Duration{time.Minute, time.Minute, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute}
		if fmt.Sprint(gaps) != fmt.Sprint(want) {
			t.Fatalf("gaps %v, want %v", gaps, want)
		}
	})
}

func TestIdleTimeoutStopsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, sim.APIConfig{}, 0)
		path := "/repos/o/r"
		go func() {
			time.Sleep(40 * time.Minute)
			f.srv.Touch(path)
		}()
		pol := utcPolicy()
		pol.IdleTimeout = 90 * time.Minute
		rec := &recorder{}
		p, err := New(Options{URLs: []string{simBase + path}, Client: f.client, Policy: pol, Sink: rec, OnEvent: rec.event})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = p.Run(t.Context())
		if !errors.Is(err, ErrIdleTimeout) {
			t.Fatalf("Run: %v", err)
		}
		changes := rec.kinds(EventChanged)
		if len(changes) != 1 {
			t.Fatalf("%d changes", len(changes))
		}
		// 90 minutes after the poll that saw the change, to the second.
		if got, want := time.Since(start), changes[0].At.Sub(start)+90*time.Minute; got != want {
			t.Fatalf("stopped after %v, want %v", got, want)
		}
		if !strings.Contains(err.Error(), "no change for 1h30m0s since the last one") {
			t.Fatalf("message %q", err)
		}
	})
}

func TestRefusesToStartBelowTheFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, sim.APIConfig{Limit: 100, Window: time.Hour}, 0)
		for i := range 96 {
			resp, err := f.client.Get(fmt.Sprintf("%s/repos/o/r%d", simBase, i))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		before := f.core(t).Requests
		pol := utcPolicy()
		pol.MinRemaining = 10
		rec := &recorder{}
		p, err := New(Options{URLs: []string{simBase + "/repos/o/r/events"}, Client: f.client, Policy: pol, Sink: rec,
			Quota: TransportQuota(f.tr), OnEvent: rec.event, EmitInitial: true})
		if err != nil {
			t.Fatal(err)
		}
		err = p.Run(t.Context())
		if !errors.Is(err, ErrQuotaFloor) {
			t.Fatalf("Run: %v", err)
		}
		if !strings.Contains(err.Error(), "remaining core quota 4 is below the floor of 10") || !strings.Contains(err.Error(), "not polling http://sim.test/repos/o/r/events") {
			t.Fatalf("message %q", err)
		}
		if after := f.core(t).Requests; after != before {
			t.Fatalf("%d requests spent before refusing", after-before)
		}
		if len(rec.changes) != 0 || len(rec.kinds(EventPolled)) != 0 {
			t.Fatal("polled anyway")
		}
	})
}

func TestFirstAnswerDecidesTheStartWhenQuotaIsUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scripted{handlers: []func(http.ResponseWriter, *http.Request){func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-RateLimit-Limit", "60")
			w.Header().Set("X-RateLimit-Remaining", "3")
			w.Header().Set("X-RateLimit-Reset", fmt.Sprint(time.Now().Add(time.Hour).Unix()))
			io.WriteString(w, "{}")
		}}}
		pol := utcPolicy()
		pol.MinRemaining = 5
		rec := &recorder{}
		p, err := New(Options{URLs: []string{"http://api.test/x"}, Client: &http.Client{Transport: s}, Policy: pol, Sink: rec, EmitInitial: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(t.Context()); !errors.Is(err, ErrQuotaFloor) {
			t.Fatalf("Run: %v", err)
		}
		if s.n != 1 || len(rec.changes) != 0 {
			t.Fatalf("%d polls, %d changes", s.n, len(rec.changes))
		}
	})
}

// TestBudgetGuardAgainstTheSimulator polls an events feed that changes
// every minute (so every poll costs a request) with a small quota: the
// guard stretches the interval and says so, and polling spends no more
// than its share.
func TestBudgetGuardAgainstTheSimulator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, sim.APIConfig{Limit: 100, Window: time.Hour, EventsEvery: time.Minute}, 0)
		reg := prometheus.NewRegistry()
		rec := &recorder{}
		pol := utcPolicy()
		pol.BudgetShare = 0.2
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour-2*time.Second)
		defer cancel()
		p, err := New(Options{URLs: []string{simBase + "/repos/o/r/events"}, Client: f.client, Policy: pol, Sink: rec, OnEvent: rec.event,
			Quota: TransportQuota(f.tr), Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
		b := f.core(t)
		spent := b.Charged - 1 // the token's validation
		if spent > 21 {
			t.Fatalf("polling spent %d of 100 within the window, more than 20 %% plus one poll", spent)
		}
		budget := rec.kinds(EventBudget)
		if len(budget) == 0 || counter(t, reg, "ratekeeper_poll_budget_total") == 0 {
			t.Fatal("the guard never said it stretched the interval")
		}
		if !strings.Contains(budget[0].String(), "budget guard stretches the interval") || !strings.Contains(budget[0].String(), "of 100 requests remaining (core)") {
			t.Fatalf("event %q", budget[0].String())
		}
		if b.Violations != 0 {
			t.Fatalf("%d violations", b.Violations)
		}
		t.Logf("spent %d, %d changes, %d budget events", spent, len(rec.changes), len(budget))
	})
}

func TestWaitErrorPausesUntilQuotaReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, sim.APIConfig{Limit: 5, Window: time.Hour}, time.Minute)
		// Spend the bucket so that the next poll would wait about an hour.
		for i := range 5 {
			resp, err := f.client.Get(fmt.Sprintf("%s/repos/o/r%d", simBase, i))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		reg := prometheus.NewRegistry()
		rec := &recorder{}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		rec.onPoll = func(n int, e Event) {
			if n == 2 {
				cancel()
			}
		}
		p, err := New(Options{URLs: []string{simBase + "/repos/o/x"}, Client: f.client, Policy: utcPolicy(), Sink: rec, OnEvent: rec.event, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
		limited := rec.kinds(EventRateLimited)
		if len(limited) != 1 || limited[0].Errors != 0 || limited[0].Rule != RuleRateLimited {
			t.Fatalf("rate-limited events %+v", limited)
		}
		polls := rec.kinds(EventPolled)
		if polls[1].At.Sub(start) < 59*time.Minute || polls[1].Outcome != First {
			t.Fatalf("second poll at +%v (%s)", polls[1].At.Sub(start), polls[1].Outcome)
		}
		if counter(t, reg, "ratekeeper_poll_rate_limited_total") != 1 {
			t.Fatal("rate-limit hit not counted")
		}
		if v := f.core(t).Violations; v != 0 {
			t.Fatalf("%d violations", v)
		}
	})
}

func TestSeveralURLsShareTheBucketAndSpreadOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, sim.APIConfig{}, 0)
		rec := &recorder{}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		rec.onPoll = func(n int, e Event) {
			if n == 4 {
				cancel()
			}
		}
		urls := []string{simBase + "/repos/o/a", simBase + "/repos/o/b", simBase + "/repos/o/c", simBase + "/repos/o/d"}
		p, err := New(Options{URLs: urls, Client: f.client, Policy: utcPolicy(), Sink: rec, OnEvent: rec.event,
			Quota: TransportQuota(f.tr), WorkerID: "worker-1"})
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range p.targets {
			if tg.sharers != 4 || tg.bucket != "github/core" {
				t.Fatalf("%s: bucket %q shared by %d", tg.shown, tg.bucket, tg.sharers)
			}
		}
		start := time.Now()
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
		// Night at the bubble's start: a 15 minute span, a quarter each,
		// starting at worker-1's offset.
		span := 15 * time.Minute
		first := Offset("worker-1", span)
		for i, e := range rec.kinds(EventPolled) {
			want := (first + time.Duration(i)*span/4) % span
			if got := e.At.Sub(start); got.Round(time.Second) != want.Round(time.Second) {
				t.Fatalf("poll %d (%s) at +%v, want +%v", i, e.URL, got, want)
			}
		}
	})
}

func TestClientCacheMarkerMeansUnchanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A client whose cache answers: no ETag reaches the poller's own
		// validators, and the second answer is the stored 200 marked
		// revalidated.
		revalidated := func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Ratekeeper-Cache", "revalidated")
			io.WriteString(w, `{"a":1}`)
		}
		s := &scripted{handlers: []func(http.ResponseWriter, *http.Request){revalidated, revalidated}}
		reg := prometheus.NewRegistry()
		rec := &recorder{}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		rec.onPoll = func(n int, e Event) {
			if n == 3 {
				cancel()
			}
		}
		p, err := New(Options{URLs: []string{"http://api.test/x"}, Client: &http.Client{Transport: s}, Policy: utcPolicy(), Sink: rec,
			OnEvent: rec.event, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
		polls := rec.kinds(EventPolled)
		if polls[0].Outcome != First || polls[1].Outcome != Unchanged || polls[2].Outcome != Unchanged {
			t.Fatalf("outcomes %s %s %s", polls[0].Outcome, polls[1].Outcome, polls[2].Outcome)
		}
		if counter(t, reg, "ratekeeper_poll_not_modified_total") != 2 {
			t.Fatal("revalidated answers not counted as 304s")
		}
	})
}

func TestOwnValidatorsAndInitialEmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sawINM []string
		var mu sync.Mutex
		s := &scripted{handlers: []func(http.ResponseWriter, *http.Request){func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			sawINM = append(sawINM, r.Header.Get("If-None-Match")+"|"+r.Header.Get("If-Modified-Since")+"|"+r.Header.Get("Accept")+"|"+r.Header.Get("Cache-Control"))
			mu.Unlock()
			if r.Header.Get("If-None-Match") == `"v1"` {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			w.Header().Set("ETag", `"v1"`)
			w.Header().Set("Last-Modified", "Mon, 03 Jan 2000 00:00:00 GMT")
			io.WriteString(w, "[1,2]")
		}}}
		rec := &recorder{}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		rec.onPoll = func(n int, e Event) {
			if n == 2 {
				cancel()
			}
		}
		p, err := New(Options{URLs: []string{"http://api.test/x"}, Client: &http.Client{Transport: s}, Policy: utcPolicy(), Sink: rec,
			OnEvent: rec.event, EmitInitial: true, Header: http.Header{"Accept": {"application/vnd.github+json"}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
		// Every poll asks the server: no cache's fresh copy is news.
		want := []string{"||application/vnd.github+json|no-cache", `"v1"|Mon, 03 Jan 2000 00:00:00 GMT|application/vnd.github+json|no-cache`}
		if fmt.Sprint(sawINM) != fmt.Sprint(want) {
			t.Fatalf("requests %q", sawINM)
		}
		if len(rec.changes) != 1 || !rec.changes[0].Initial || string(rec.changes[0].Body) != "[1,2]" {
			t.Fatalf("changes %+v", rec.changes)
		}
	})
}

func TestNewRejectsBadInput(t *testing.T) {
	bad := DefaultPolicy()
	bad.Min, bad.Max = time.Hour, time.Minute
	cases := []struct {
		opts Options
		want string
	}{
		{Options{}, "no URL to poll"},
		{Options{URLs: []string{"ftp://x/y"}}, `"ftp://x/y" is not an http(s) URL`},
		{Options{URLs: []string{"https://x/a", "https://x/a"}}, "given twice"},
		{Options{URLs: []string{"https://x/a"}, Policy: bad}, "Min 1h0m0s is above Max 1m0s"},
	}
	for _, c := range cases {
		if _, err := New(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.opts, err, c.want)
		}
	}
}

func TestSinkFailureStopsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scripted{handlers: []func(http.ResponseWriter, *http.Request){body(`"a"`, "a"), body(`"b"`, "b")}}
		broken := SinkFunc(func(context.Context, Change) error { return io.ErrClosedPipe })
		p, err := New(Options{URLs: []string{"http://api.test/x"}, Client: &http.Client{Transport: s}, Policy: utcPolicy(), Sink: broken})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(t.Context()); !errors.Is(err, io.ErrClosedPipe) {
			t.Fatalf("Run: %v", err)
		}
	})
}
