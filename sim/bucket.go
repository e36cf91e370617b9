package sim

import (
	"sync"
	"time"
)

// maxTimelineSeconds bounds a bucket's per-second timeline (one week), so a
// simulator left running does not grow without end.
const maxTimelineSeconds = 7 * 24 * 3600

// bucket is the primary quota of one (API, owner, resource). Every field
// below mu is guarded by it; a request holds it only to count, never while
// writing its answer.
type bucket struct {
	// Fixed at creation.
	api      *api
	owner    *owner
	resource int
	limit    int64 // 0: unlimited
	window   int64 // seconds
	fixed    bool
	// continuous: a token bucket (level, refilled at), not a window.
	continuous bool

	mu     sync.Mutex
	active bool  // a window is open (rolling mode)
	start  int64 // current window's first second, server clock
	used   int64
	// level is what a continuous bucket holds as of refilled (server
	// clock); an inactive one is full.
	level    float64
	refilled time.Time

	requests, accepted, charged, notModified, unauthorized int64
	primaryViolations, secondaryViolations                 int64
	serverErrors, dropped, bareRefusals                    int64
	earlyRetries                                           int64
	hidden, expired                                        int64
	// scope is the bucket's last refusal, for counting early retries.
	scope       refusalScope
	maxInFlight int64
	timeline    []uint32
}

// bucketState is what a response says about a bucket.
type bucketState struct {
	limit     int64 // 0: unlimited
	used      int64
	remaining int64
	reset     int64 // Unix second the window ends, server clock
	window    int64 // seconds
	fixed     bool
	// full is, for a continuous bucket, how long until it is full again.
	full time.Duration
}

// roll opens the window now falls in. Must hold b.mu.
func (b *bucket) roll(sec int64) {
	if b.fixed {
		start := sec - mod(sec, b.window)
		if !b.active || start != b.start {
			b.active, b.start, b.used = true, start, 0
		}
		return
	}
	if !b.active || sec >= b.start+b.window {
		b.active, b.start, b.used = true, sec, 0
	}
}

// state reports the bucket as of second sec without opening a window: a
// bucket with no open window is full and would reset one window from now
// (rolling) or at the next boundary (fixed). Must hold b.mu.
func (b *bucket) state(sec int64) bucketState {
	st := bucketState{limit: b.limit, window: b.window, fixed: b.fixed}
	switch {
	case b.fixed:
		start := sec - mod(sec, b.window)
		st.reset = start + b.window
		if b.active && b.start == start {
			st.used = b.used
		}
	case b.active && sec < b.start+b.window:
		st.used = b.used
		st.reset = b.start + b.window
	default:
		st.reset = sec + b.window
	}
	st.remaining = max(st.limit-st.used, 0)
	return st
}

// admission is how the bucket answered a request.
type admission int

const (
	admitted admission = iota
	admittedFree
	refused
)

// admit counts one request arriving at server time now with inFlight
// requests of its owner in flight. A request costs cost units unless free;
// a free request (a 304 where those are free, GitHub's /rate_limit) is
// served even from an empty bucket. countRefused makes a refused request
// still count as used, as Rack::Attack counts every request.
func (b *bucket) admit(now time.Time, realNow time.Time, inFlight, cost int64, free, notModified, countRefused bool) (bucketState, admission) {
	sec := now.Unix()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.roll(sec)
	b.requests++
	b.maxInFlight = max(b.maxInFlight, inFlight)
	if b.scope.early(now) {
		b.earlyRetries++
	}
	// A conditional request whose answer would be a free 304 is still
	// refused at an empty bucket: a production GitHub mirror serves its
	// stored copy when such a request comes back 403 "API rate limit
	// exceeded", which says GitHub refuses them; a client must not count
	// on a 304 it cannot be given.
	empty := notModified && b.limit > 0 && b.used >= b.limit
	if (!free || empty) && b.limit > 0 && b.used+cost > b.limit {
		b.primaryViolations++
		if countRefused {
			b.used += cost
		}
		st := b.state(sec)
		// The refusal names the end of the window: the reset it sends,
		// which its Retry-After, where sent, rounds up to whole seconds.
		b.scope.refuse(now, time.Unix(st.reset, 0))
		return st, refused
	}
	b.accepted++
	b.tick(realNow)
	if notModified {
		b.notModified++
	}
	verdict := admittedFree
	if !free {
		b.used += cost
		b.charged += cost
		verdict = admitted
	}
	return b.state(sec), verdict
}

// tick adds one accepted request to the per-second timeline. Must hold b.mu.
func (b *bucket) tick(realNow time.Time) {
	i := int(realNow.Sub(*b.api.srv.start.Load()) / time.Second)
	if i < 0 || i >= maxTimelineSeconds {
		return
	}
	if i >= len(b.timeline) {
		if i < cap(b.timeline) {
			b.timeline = b.timeline[:i+1]
		} else {
			grown := make([]uint32, i+1, max(2*cap(b.timeline), i+1, 64))
			copy(grown, b.timeline)
			b.timeline = grown
		}
	}
	b.timeline[i]++
}

// unaccept takes back the acceptance of a request that an endpoint limit
// refused after the bucket admitted (and charged) it.
func (b *bucket) unaccept(realNow time.Time, notModified bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.accepted--
	if notModified {
		b.notModified--
	}
	if i := int(realNow.Sub(*b.api.srv.start.Load()) / time.Second); i >= 0 && i < len(b.timeline) && b.timeline[i] > 0 {
		b.timeline[i]--
	}
}

// countEarly counts a request of the bucket that came early for its
// owner's secondary-limit penalty.
func (b *bucket) countEarly() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.earlyRetries++
}

// refuseBare counts a request that arrived at now and that the injected
// proxy refused (see FaultConfig.BareRefusalAt), and records the refusal
// as decided at at, naming until.
func (b *bucket) refuseBare(now, at, until time.Time, inFlight int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.requests++
	b.maxInFlight = max(b.maxInFlight, inFlight)
	if b.scope.early(now) {
		b.earlyRetries++
	}
	b.bareRefusals++
	b.scope.refuse(at, until)
}

// outcome is a request that never reached the quota check.
type outcome int

const (
	outUnauthorized outcome = iota
	outSecondary
	outServerError
	outDropped
)

// record counts a request that ended before the quota check and returns the
// bucket's state for the headers of the answer.
func (b *bucket) record(now time.Time, inFlight int64, o outcome) bucketState {
	sec := now.Unix()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.requests++
	b.maxInFlight = max(b.maxInFlight, inFlight)
	if o != outUnauthorized && b.scope.early(now) {
		b.earlyRetries++
	}
	switch o {
	case outUnauthorized:
		b.unauthorized++
	case outSecondary:
		b.secondaryViolations++
	case outServerError:
		b.serverErrors++
	case outDropped:
		b.dropped++
	}
	return b.state(sec)
}

// countHidden counts a request answered 404 because its token cannot see
// the repository's owner.
func (b *bucket) countHidden() {
	b.mu.Lock()
	b.hidden++
	b.mu.Unlock()
}

// countExpired counts a request refused for an expired installation token.
func (b *bucket) countExpired() {
	b.mu.Lock()
	b.expired++
	b.mu.Unlock()
}

// peek reports the bucket without counting anything.
func (b *bucket) peek(now time.Time) bucketState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state(now.Unix())
}

func (b *bucket) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.active, b.start, b.used = false, 0, 0
	b.requests, b.accepted, b.charged, b.notModified, b.unauthorized = 0, 0, 0, 0, 0
	b.primaryViolations, b.secondaryViolations, b.serverErrors, b.dropped, b.bareRefusals = 0, 0, 0, 0, 0
	b.earlyRetries, b.scope = 0, refusalScope{}
	b.hidden, b.expired = 0, 0
	b.maxInFlight = 0
	b.timeline = nil
}

// secondary is the secondary-limit state of one owner.
type secondary struct {
	cfg SecondaryConfig
	// minWait is the least wait a refusal without Retry-After asks for.
	minWait time.Duration

	mu           sync.Mutex
	penaltyUntil time.Time
	wrote        bool
	lastWrite    time.Time
	points       pointWindow // REST, and GraphQL without a budget of its own
	graphql      pointWindow // GraphQL, when GraphQLPointsPerMinute is set
	scope        refusalScope
}

// pointWindow counts points over a sliding minute: slot i holds the
// points of second slotSec[i]; sum is their total over the minute.
type pointWindow struct {
	slots   [60]int64
	slotSec [60]int64
	sum     int64
}

// admit decides whether a request of points points (a write if write; to
// the GraphQL endpoint if graphql) may go, with inFlight requests of the
// owner in flight including this one. A refusal during a penalty leaves
// the penalty as it is; tripping a limit starts one. It returns how long
// until the penalty ends when refused, and whether the request came
// early: before the time the owner's last refusal named.
func (s *secondary) admit(now time.Time, inFlight, points int64, write, graphql bool) (ok bool, wait time.Duration, early bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	early = s.scope.early(now)
	if now.Before(s.penaltyUntil) {
		s.refuse(now)
		return false, s.penaltyUntil.Sub(now), early
	}
	sec := now.Unix()
	w, budget := &s.points, int64(s.cfg.PointsPerMinute)
	if graphql && s.cfg.GraphQLPointsPerMinute > 0 {
		w, budget = &s.graphql, int64(s.cfg.GraphQLPointsPerMinute)
	}
	if budget > 0 {
		w.expire(sec)
	}
	trip := (s.cfg.MaxConcurrent > 0 && inFlight > int64(s.cfg.MaxConcurrent)) ||
		(budget > 0 && w.sum+points > budget) ||
		(write && s.cfg.WriteSpacing > 0 && s.wrote && now.Sub(s.lastWrite) < s.cfg.WriteSpacing)
	if trip {
		s.penaltyUntil = now.Add(s.cfg.Penalty)
		s.refuse(now)
		return false, s.cfg.Penalty, early
	}
	if budget > 0 {
		w.add(sec, points)
	}
	if write {
		s.wrote, s.lastWrite = true, now
	}
	return true, 0, early
}

// refuse records a refusal at now: it names the end of the penalty when
// it sends Retry-After, else the least wait (GitHub: a minute). Must hold
// s.mu.
func (s *secondary) refuse(now time.Time) {
	until := now.Add(s.minWait)
	if s.cfg.RetryAfter {
		until = s.penaltyUntil
	}
	s.scope.refuse(now, until)
}

func (w *pointWindow) add(sec, points int64) {
	i := mod(sec, 60)
	w.slots[i] += points
	w.slotSec[i] = sec
	w.sum += points
}

// expire drops the points of seconds older than a minute.
func (w *pointWindow) expire(sec int64) {
	for i := range w.slots {
		if w.slots[i] != 0 && w.slotSec[i] <= sec-60 {
			w.sum -= w.slots[i]
			w.slots[i] = 0
		}
	}
}

func (s *secondary) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.penaltyUntil, s.wrote, s.lastWrite = time.Time{}, false, time.Time{}
	s.points, s.graphql = pointWindow{}, pointWindow{}
	s.scope = refusalScope{}
}

// mod is the non-negative remainder, so windows align before 1970 too.
func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}
