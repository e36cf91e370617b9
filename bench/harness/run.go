package harness

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// Result is one client's run of one workload.
type Result struct {
	Workload string `json:"workload"`
	Client   string `json:"client"`

	// Jobs in the workload: Done, Failed (the client gave up on them) and
	// Unfinished (still running at the deadline).
	Jobs       int `json:"jobs"`
	Done       int `json:"done"`
	Failed     int `json:"failed"`
	Unfinished int `json:"unfinished"`
	// FirstError is the first failure, for the reader.
	FirstError string `json:"first_error,omitempty"`

	// Makespan runs from the first job to the last one's end (the
	// deadline when some were unfinished); Ideal is the workload's for a
	// start Offset into a second (see Workload.Ideal).
	Makespan time.Duration `json:"makespan_ns"`
	Ideal    time.Duration `json:"ideal_ns"`
	Offset   time.Duration `json:"offset_ns"`

	// The simulator's counters: every request that reached it, those it
	// served (Accepted) and charged, refusals for rate limits
	// (violations), and the most requests of one owner in flight.
	Requests            int64 `json:"requests"`
	Accepted            int64 `json:"accepted"`
	Charged             int64 `json:"charged"`
	PrimaryViolations   int64 `json:"primary_violations"`
	SecondaryViolations int64 `json:"secondary_violations"`
	MaxInFlight         int64 `json:"max_in_flight"`

	// Available is the quota a quota-bound workload offered during the
	// makespan (0 otherwise).
	Available int64 `json:"available"`

	// Accepts and Refusals are when (seconds after the start) the wire saw
	// each answer below 400, and each 403/429.
	Accepts  []float64 `json:"accepts"`
	Refusals []float64 `json:"refusals"`
}

// Ratio is Makespan ÷ Ideal.
func (r Result) Ratio() float64 {
	if r.Ideal <= 0 {
		return 0
	}
	return r.Makespan.Seconds() / r.Ideal.Seconds()
}

// Violations are the requests the simulator refused for rate limits.
func (r Result) Violations() int64 { return r.PrimaryViolations + r.SecondaryViolations }

// Wasted are requests that did nothing: refused or rejected by the
// server, or sent again after an error.
func (r Result) Wasted() int64 { return r.Requests - r.Accepted }

// Overhead are accepted requests that were not the workload's jobs: a
// client's own checks (ratekeeper's GET /user per token).
func (r Result) Overhead() int64 { return r.Accepted - int64(r.Done) }

// Utilisation is the share of the quota offered during the run that went
// into the workload's own requests (0 when the quota does not bound it).
func (r Result) Utilisation() float64 {
	if r.Available <= 0 {
		return 0
	}
	return float64(r.Done) / float64(r.Available)
}

// Options change how Run runs.
type Options struct {
	// InProcess serves the simulator through its own RoundTripper instead
	// of a loopback socket, so a run fits in a testing/synctest bubble.
	InProcess bool
}

// Run runs client c on workload w against a fresh simulator and reports
// what happened. Only a broken setup is an error; a client that fails
// jobs or runs past the deadline gets a Result that says so.
func Run(ctx context.Context, w Workload, c Client, opts Options) (Result, error) {
	srv, err := sim.New(sim.Config{Seed: 1, APIs: []sim.APIConfig{w.API}})
	if err != nil {
		return Result{}, fmt.Errorf("workload %s: %w", w.Name, err)
	}
	// Every client gets a connection per worker, as a tuned client would.
	root, wire, stop, err := srv.Reach(opts.InProcess, w.Workers)
	if err != nil {
		return Result{}, err
	}
	defer stop()
	base := root + apiPrefix
	rec := &recorder{next: wire}
	lanes, err := c.Lanes(Env{Base: base, Tokens: w.Tokens, Wire: rec, Workers: w.Workers})
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", c.Name, err)
	}

	runCtx, cancel := context.WithTimeout(ctx, w.Deadline)
	defer cancel()
	res := Result{Workload: w.Name, Client: c.Name, Jobs: len(w.Paths)}
	queue := make(chan string)
	var mu sync.Mutex
	var last time.Time
	var wg sync.WaitGroup
	start := time.Now()
	rec.start(start)
	res.Offset = start.Sub(start.Truncate(time.Second))
	res.Ideal = w.Ideal(res.Offset)
	for _, lane := range lanes {
		for range lane.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for path := range queue {
					err := lane.Fetch(runCtx, base+path)
					now := time.Now()
					mu.Lock()
					switch {
					case err == nil:
						res.Done++
					case runCtx.Err() != nil:
						res.Unfinished++
					default:
						res.Failed++
						if res.FirstError == "" {
							res.FirstError = err.Error()
						}
					}
					if now.After(last) {
						last = now
					}
					mu.Unlock()
				}
			}()
		}
	}
feed:
	for i, p := range w.Paths {
		select {
		case queue <- p:
		case <-runCtx.Done():
			res.Unfinished += len(w.Paths) - i
			break feed
		}
	}
	close(queue)
	wg.Wait()
	res.Makespan = last.Sub(start)
	if res.Unfinished > 0 {
		res.Makespan = w.Deadline
	}
	st := srv.Stats()
	res.Requests, res.Accepted, res.Charged = st.Total.Requests, st.Total.Accepted, st.Total.Charged
	res.PrimaryViolations, res.SecondaryViolations = st.Total.PrimaryViolations, st.Total.SecondaryViolations
	res.MaxInFlight = st.Total.MaxInFlight
	res.Available = w.Available(res.Makespan, res.Offset)
	res.Accepts, res.Refusals = rec.timeline()
	return res, nil
}

// recorder notes when each answer crossed the wire.
type recorder struct {
	next http.RoundTripper

	mu       sync.Mutex
	t0       time.Time
	accepts  []float64
	refusals []float64
}

func (r *recorder) start(t time.Time) {
	r.mu.Lock()
	r.t0 = t
	r.mu.Unlock()
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	now := time.Now()
	r.mu.Lock()
	at := now.Sub(r.t0).Seconds()
	switch {
	case resp.StatusCode < 400:
		r.accepts = append(r.accepts, at)
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusTooManyRequests:
		r.refusals = append(r.refusals, at)
	}
	r.mu.Unlock()
	return resp, nil
}

func (r *recorder) timeline() (accepts, refusals []float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	accepts = append([]float64(nil), r.accepts...)
	refusals = append([]float64(nil), r.refusals...)
	sort.Float64s(accepts)
	sort.Float64s(refusals)
	return accepts, refusals
}
