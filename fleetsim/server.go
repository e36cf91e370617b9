package fleetsim

import (
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The simulated server: a custom API host that speaks GitHub's
// x-ratelimit-* fields, with every refusal kind the client must read. It
// writes its headers itself and shares no code with the client's parser.
// It is also the referee: it sees every request arrive and every answer
// leave, on the true clock, and so judges invariants 1, 2, 3 and 6 (see
// invariants.go) where a real server would see the violations.
//
// Requests carry X-Sim-Job (the job) and X-Sim-Proc (the process), which
// the client passes through untouched.
type server struct {
	plan  *Plan
	ref   *referee
	trace *trace
	start time.Time // the schedule's start, true clock

	mu           sync.Mutex
	used         map[int64]int // primary window → units used
	searchUsed   map[int64]int // endpoint window → units used
	inFlight     int
	penaltyUntil time.Time   // true clock
	lastWrite    time.Time   // true clock, last admitted write
	bareUntil    time.Time   // a proxy answers bare 429s until then
	processed    map[int]int // write job → times processed
	arrivals     int
	// The endpoint limit's windows since its first refusal: fleet
	// requests and refusals in each (for the learnt-limit invariant).
	searchSince   int64 // the window of the first refusal; 0: none yet
	searchWindows map[int64][2]int
	// The fleet's searches, job → when it started and ended (zero while
	// under way): a window teaches the limit only if the fleet had at
	// least the limit's worth of searches to send in it.
	searchJobs map[int][2]time.Time
	// The endpoint windows in which the learnt limit held the fleet
	// back: the state's /search bucket, not provisional, had none left.
	searchHeld map[int64]bool
	// The endpoint windows in which the state's /search limit capped
	// nothing at some step: none was learnt, or it was provisional.
	searchUncapped map[int64]bool
}

func newServer(p *Plan, ref *referee, tr *trace, start time.Time) *server {
	return &server{plan: p, ref: ref, trace: tr, start: start,
		used: map[int64]int{}, searchUsed: map[int64]int{}, processed: map[int]int{}, searchWindows: map[int64][2]int{},
		searchJobs: map[int][2]time.Time{}, searchHeld: map[int64]bool{}, searchUncapped: map[int64]bool{}}
}

// serverNow is the server's clock (skewed) at true time t.
func (s *server) serverNow(t time.Time) time.Time { return t.Add(s.plan.ServerSkew) }

// window returns the fixed window of length w holding true time t: its
// index and its end on the true clock.
func (s *server) window(t time.Time, w time.Duration) (int64, time.Time) {
	st := s.serverNow(t)
	idx := st.UnixNano() / int64(w)
	end := time.Unix(0, (idx+1)*int64(w)).Add(-s.plan.ServerSkew)
	return idx, end
}

// answer is what the server decided at a request's arrival.
type answer struct {
	status  int
	header  http.Header
	body    string
	kind    refusalKind // none for an admitted request
	primary *reading    // the primary bucket as this answer states it
	until   func(delivered time.Time) time.Time
	named   bool // the refusal names its time (Retry-After, a reset)
	scope   string
}

// spend is another spender taking n units of the primary window now.
func (s *server) spend(now time.Time, n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx, _ := s.window(now, s.plan.Window)
	n = max(0, min(n, s.plan.Limit-s.used[idx]))
	s.used[idx] += n
	return n
}

// blinked records that the database is away from now for d.
func (s *server) blinked(now time.Time, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ref.blinks = append(s.ref.blinks, blink{now, now.Add(d)})
}

// killed tells the referee that process proc was killed at now: the facts
// only it received that could not have reached the others yet are lost
// with it (see referee.forget).
func (s *server) killed(now time.Time, proc int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ref.forget(now, proc)
}

// startBare makes a proxy in front of the server answer bare 429s for d.
func (s *server) startBare(now time.Time, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bareUntil = now.Add(d)
}

// arrive decides a request arriving at now.
func (s *server) arrive(now time.Time, req request) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.plan
	s.arrivals++
	req.arrived = now
	s.ref.arrived(now, req)
	if req.write {
		s.ref.judgeWrite(now, req, p.WriteSpacing)
	}
	idx, end := s.window(now, p.Window)
	primaryHeaders := func(h http.Header) *reading {
		used := s.used[idx]
		h.Set("X-Ratelimit-Limit", strconv.Itoa(p.Limit))
		h.Set("X-Ratelimit-Remaining", strconv.Itoa(p.Limit-used))
		h.Set("X-Ratelimit-Used", strconv.Itoa(used))
		h.Set("X-Ratelimit-Reset", strconv.FormatInt(s.serverNow(end).Unix(), 10))
		return &reading{window: idx, windowEnd: end, remaining: p.Limit - used}
	}
	h := http.Header{}
	h.Set("Date", s.serverNow(now).UTC().Format(http.TimeFormat))
	s.inFlight++

	// A proxy in front answers for the server.
	if now.Before(s.bareUntil) {
		if req.search {
			// A refusal of a search, as the endpoint limit's are: the
			// client pauses /search and learns from it, so the window
			// is neither clean nor judged while it lasts (memory seed
			// 403869: a whole limit of 9 became a provisional 14 over
			// a 10-minute window at the proxy's refusal, and was
			// judged 5 s later, "after 3 clean windows").
			sidx, _ := s.window(now, p.EndpointWindow)
			c := s.searchWindows[sidx]
			c[1]++
			s.searchWindows[sidx] = c
		}
		h.Set("Content-Type", "text/html")
		return answer{status: http.StatusTooManyRequests, header: h, body: "<html><body>Too many requests</body></html>",
			kind: refusedBare, scope: scopeOf(req),
			until: func(d time.Time) time.Time { return d.Add(GitHubBareWait) }}
	}
	// Secondary limits, per owner: a penalty under way, too many in
	// flight, writes too close.
	trip := ""
	switch {
	case now.Before(s.penaltyUntil):
		trip = "penalty"
	case p.MaxConcurrent > 0 && s.inFlight > p.MaxConcurrent:
		trip = "concurrency"
	case req.write && p.WriteSpacing > 0 && !s.lastWrite.IsZero() && now.Sub(s.lastWrite) < p.WriteSpacing:
		trip = "write spacing"
	}
	if trip != "" {
		if trip != "penalty" {
			s.penaltyUntil = now.Add(p.Penalty)
		}
		var rd *reading
		if p.SecondaryHeaders {
			rd = primaryHeaders(h)
		}
		h.Set("Content-Type", "application/json")
		a := answer{status: http.StatusForbidden, header: h, kind: refusedSecondary, scope: scopeHost, primary: rd,
			body: `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`}
		penalty := s.penaltyUntil
		if p.SecondaryRetryAfter {
			a.named = true
			a.until = func(d time.Time) time.Time { return d.Add(retryAfter(h, penalty.Sub(d))) }
		} else {
			a.until = func(d time.Time) time.Time { return d.Add(SecondaryWait) }
		}
		return a
	}
	// The unannounced limit of /search.
	sidx, send := s.window(now, p.EndpointWindow)
	if req.search {
		c := s.searchWindows[sidx]
		c[0]++
		if s.searchUsed[sidx] >= p.EndpointLimit {
			c[1]++
			if s.searchSince == 0 {
				s.searchSince = sidx
			}
		}
		s.searchWindows[sidx] = c
	}
	if req.search && s.searchUsed[sidx] >= p.EndpointLimit {
		a := answer{status: http.StatusTooManyRequests, header: h, kind: refusedEndpoint, scope: scopeSearch}
		switch p.EndpointRefusal {
		case RefuseRetryAfter, RefuseHeaders:
			if p.EndpointRefusal == RefuseHeaders {
				h.Set("X-Ratelimit-Limit", strconv.Itoa(p.EndpointLimit))
				h.Set("X-Ratelimit-Remaining", "0")
				h.Set("X-Ratelimit-Used", strconv.Itoa(s.searchUsed[sidx]))
				h.Set("X-Ratelimit-Reset", strconv.FormatInt(s.serverNow(send).Unix(), 10))
			}
			h.Set("Content-Type", "application/json")
			a.body = `{"message":"Too many requests to this endpoint"}`
			a.named = true
			a.until = func(d time.Time) time.Time { return d.Add(retryAfter(h, send.Sub(d))) }
		case RefuseBare:
			h.Set("Content-Type", "text/html")
			a.body = "<html><body>Too many requests</body></html>"
			a.until = func(d time.Time) time.Time { return d.Add(GitHubBareWait) }
		case RefusePlain:
			h.Set("Content-Type", "text/plain")
			a.body = "Retry later\n"
			a.until = func(d time.Time) time.Time { return d.Add(GitHubBareWait) }
		}
		return a
	}
	// The primary limit.
	s.ref.spends(now, req)
	if s.used[idx] >= p.Limit {
		rd := primaryHeaders(h)
		h.Set("Content-Type", "application/json")
		return answer{status: http.StatusForbidden, header: h, kind: refusedPrimary, scope: scopeHost, primary: rd, named: true,
			body:  `{"message":"API rate limit exceeded for user ID 1.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}`,
			until: func(time.Time) time.Time { return end }}
	}
	// Admitted: processed now, answered after the latency.
	s.used[idx]++
	if req.search {
		s.searchUsed[sidx]++
	}
	if req.write {
		s.lastWrite = now
		s.processed[req.job]++
		if s.processed[req.job] > 1 {
			s.ref.violate(now, InvOnce, fmt.Sprintf("job %d (a write) was processed %d times", req.job, s.processed[req.job]))
		}
	}
	rd := primaryHeaders(h)
	if draw(p.Seed, req.job, req.attempt, 1) < p.FaultRate {
		h.Set("Content-Type", "text/html")
		a := answer{status: http.StatusBadGateway, header: h, body: "<html>502 Bad Gateway</html>", primary: rd}
		if p.Bare5xx {
			a.header, a.primary = http.Header{"Date": h["Date"], "Content-Type": {"text/html"}}, nil
		}
		return a
	}
	h.Set("Content-Type", "application/json")
	status := http.StatusOK
	if req.write {
		status = http.StatusCreated
	}
	return answer{status: status, header: h, body: fmt.Sprintf(`{"job":%d}`, req.job), primary: rd}
}

// leave records that the answer to req left the server at now (reached
// its client: the simulation has no network delay of its own).
func (s *server) leave(now time.Time, req request, a answer, delivered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	if delivered {
		s.ref.delivered(now, req, a)
	}
}

// retryAfter sets Retry-After to d in whole seconds (rounded up, at least
// 1) and returns that duration.
func retryAfter(h http.Header, d time.Duration) time.Duration {
	n := max(1, int64(math.Ceil(d.Seconds())))
	h.Set("Retry-After", strconv.FormatInt(n, 10))
	return time.Duration(n) * time.Second
}

// draw returns a number in [0, 1) fixed by the seed, a job, its attempt
// and a purpose: what the server does to an attempt does not depend on
// the order goroutines reach it.
func draw(seed uint64, job, attempt, purpose int) float64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%d/%d", seed, job, attempt, purpose)
	return float64(h.Sum64()>>11) / (1 << 53)
}

// request is what the server knows of a request.
type request struct {
	arrived            time.Time
	proc, job, attempt int
	write, search      bool
	method, path       string
}

func (r request) String() string {
	return fmt.Sprintf("p%d job %d attempt %d %s %s", r.proc, r.job, r.attempt, r.method, r.path)
}

// roundTripper is one process's connection to the server: it serves
// each request in the calling goroutine, sleeping the latency on the
// (fake) clock; a context that ends meanwhile loses the answer.
type roundTripper struct {
	srv  *server
	proc int

	mu       sync.Mutex
	attempts map[int]int
}

func (rt *roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	job, _ := strconv.Atoi(r.Header.Get("X-Sim-Job"))
	rt.mu.Lock()
	rt.attempts[job]++
	attempt := rt.attempts[job]
	rt.mu.Unlock()
	req := request{proc: rt.proc, job: job, attempt: attempt, method: r.Method, path: r.URL.Path,
		write: r.Method == http.MethodPost, search: strings.HasPrefix(r.URL.Path, "/search/")}
	s := rt.srv
	now := time.Now()
	req.arrived = now
	a := s.arrive(now, req)
	p := s.plan
	lat := p.MinLatency + time.Duration(draw(p.Seed, job, attempt, 2)*float64(p.MaxLatency-p.MinLatency))
	timer := time.NewTimer(lat)
	select {
	case <-timer.C:
	case <-r.Context().Done():
		timer.Stop()
		s.leave(time.Now(), req, a, false)
		s.trace.add(time.Now(), "%v: cut short, its answer (%d) lost", req, a.status)
		return nil, r.Context().Err()
	}
	now = time.Now()
	s.leave(now, req, a, true) // sets a refusal's Retry-After, counted from now
	s.trace.add(now, "%v → %d%s", req, a.status, a.describe())
	resp := &http.Response{
		Status:     fmt.Sprintf("%d %s", a.status, http.StatusText(a.status)),
		StatusCode: a.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: a.header, Body: io.NopCloser(strings.NewReader(a.body)),
		ContentLength: int64(len(a.body)), Request: r,
	}
	return resp, nil
}

func (a answer) describe() string {
	var b strings.Builder
	if a.kind != refusedNone {
		fmt.Fprintf(&b, " (%s refusal", a.kind)
		if ra := a.header.Get("Retry-After"); ra != "" {
			fmt.Fprintf(&b, ", retry-after %ss", ra)
		}
		b.WriteString(")")
	}
	if a.primary != nil {
		fmt.Fprintf(&b, " remaining %d", a.primary.remaining)
	}
	return b.String()
}

// searchStarted and searchEnded keep when a search job of the fleet was
// under way.
func (s *server) searchStarted(job int, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.searchJobs[job] = [2]time.Time{at}
}

func (s *server) searchEnded(job int, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, ok := s.searchJobs[job]; ok {
		j[1] = at
		s.searchJobs[job] = j
	}
}

// searchDemand is how many search jobs of the fleet were under way at
// some time of endpoint window w: as many as it could have sent in it.
func (s *server) searchDemand(w int64) int {
	p := s.plan
	end := time.Unix(0, (w+1)*int64(p.EndpointWindow)).Add(-p.ServerSkew)
	start := end.Add(-p.EndpointWindow)
	n := 0
	for _, j := range s.searchJobs {
		if j[0].Before(end) && (j[1].IsZero() || j[1].After(start)) {
			n++
		}
	}
	return n
}

// cleanSearchWindows returns how many endpoint windows in a row, ending
// with the last complete one, had requests of the fleet to /search and no
// refusal, counting only windows after its first refusal; and the last
// complete window. A window counts only if it put the limit to the test:
// the fleet had at least the limit's worth of searches under way in it,
// and it sent as many while the state's limit capped its searches, or its
// learnt limit held it back. A fleet that wants fewer, or that something
// else held back (a concurrency cap of 1, a primary bucket spent by
// reads), cannot learn the limit from the window, and loses nothing by
// not knowing it. So does a fleet whose limit caps nothing (none learnt,
// or provisional: see quota.Bucket.Provisional) that sent exactly the
// limit, never refused: nothing it decided met the limit, and nothing
// told it the limit is not higher (memory seed 5560: a primary bucket
// shared with reads let through about the endpoint's limit of searches a
// window, and a provisional limit, its window a floor from one refusal,
// was judged after 3 windows of exactly 7 searches, the limit; 6246
// likewise, 1 for 3).
//
// The limit is judged at the first step after the windows: none is
// judged once a refusal in the window under way has taught the state
// (memory seed 1283: a step 30 s after the clean windows, in the drain,
// came after a refusal that had lowered the limit to its partial count).
func (s *server) cleanSearchWindows(now time.Time) (int, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, _ := s.window(now, s.plan.EndpointWindow)
	if s.searchSince == 0 {
		return 0, cur - 1
	}
	if s.searchWindows[cur][1] > 0 {
		return 0, cur - 1 // judged before the refusal, or not at all
	}
	n := 0
	for w := cur - 1; w > s.searchSince; w-- {
		c := s.searchWindows[w]
		tested := c[0] >= s.plan.EndpointLimit && !s.searchUncapped[w] || s.searchHeld[w]
		if c[0] == 0 || c[1] > 0 || !tested || s.searchDemand(w) < s.plan.EndpointLimit {
			break
		}
		n++
	}
	return n, cur - 1
}
