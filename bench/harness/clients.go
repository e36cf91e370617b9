package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gofri/go-github-ratelimit/v2/github_ratelimit"
	"github.com/gofri/go-github-ratelimit/v2/github_ratelimit/github_primary_ratelimit"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/sleep"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/transport"
)

// Env is what a client is built from for one run.
type Env struct {
	// Base is the API's base URL; Tokens the workload's tokens.
	Base   string
	Tokens []string
	// Wire sends requests to the simulator and records them; every
	// client's stack must end with it.
	Wire    http.RoundTripper
	Workers int
}

// Lane is a group of workers sharing one client (one token, for clients
// that take one); all lanes of a run take jobs from one queue.
type Lane struct {
	Workers int
	// Fetch GETs url to the end, as a user of the client would, and
	// returns nil when the job is done.
	Fetch func(ctx context.Context, url string) error
}

// Client is one way of sending a workload.
type Client struct {
	Name string
	// Setup says how the client is configured, for BENCHMARKS.md.
	Setup string
	Lanes func(Env) ([]Lane, error)
}

// MaxAttempts bounds the sends of one job by the hand-written loops
// around net/http and go-github-ratelimit.
const MaxAttempts = 10

// Clients returns every client the benchmark compares.
func Clients() []Client {
	var cs []Client
	for _, policy := range []string{"greedy", "spread", "adaptive"} {
		cs = append(cs, Client{
			Name:  "ratekeeper " + policy,
			Setup: "ratekeeper.NewTransport with every token in Options.Tokens and Policy " + policy + ", defaults otherwise; one pool of all workers.",
			Lanes: ratekeeperLanes(policy),
		})
	}
	cs = append(cs,
		Client{
			Name: "net/http",
			Setup: "http.Client, one per token, the workers split evenly between tokens and sharing one queue; no pacing. " +
				"A hand-written loop retries a 403/429 after Retry-After, or else after x-ratelimit-reset when remaining is 0, " +
				fmt.Sprintf("at most %d sends per job.", MaxAttempts),
			Lanes: perToken(plainFetcher),
		},
		Client{
			Name: "go-retryablehttp",
			Setup: "retryablehttp.NewClient() with its default config (4 retries, backoff 1 s to 30 s, Retry-After on 429/503), " +
				"one per token as for net/http, logger off; a job whose final answer is not 2xx fails.",
			Lanes: perToken(retryableFetcher),
		},
		Client{
			Name: "go-github-ratelimit",
			Setup: "github_ratelimit.New around the transport (its documented round tripper; secondary limits: sleep and retry), " +
				"one per token as for net/http. Its primary-limit error carries the reset; the loop around it sleeps until then and retries, " +
				fmt.Sprintf("at most %d sends per job.", MaxAttempts),
			Lanes: perToken(gofriFetcher),
		},
	)
	return cs
}

func ratekeeperLanes(policy string) func(Env) ([]Lane, error) {
	return func(e Env) ([]Lane, error) {
		t, err := ratekeeper.NewTransport(ratekeeper.Options{
			Providers: []string{"github=" + e.Base},
			Tokens:    map[string][]string{"github": e.Tokens},
			Policy:    policy,
			Base:      e.Wire,
			Tune: func(o *transport.Options) {
				// Only the simulated provider: no other provider
				// loads tokens from this machine's environment.
				reg := provider.NewRegistry()
				if err := reg.Add(o.Providers.Lookup("github")); err == nil {
					o.Providers = reg
				}
			},
		})
		if err != nil {
			return nil, err
		}
		c := &http.Client{Transport: t}
		return []Lane{{Workers: e.Workers, Fetch: func(ctx context.Context, url string) error {
			resp, err := get(ctx, c, url)
			if err != nil {
				return err
			}
			return finish(resp)
		}}}, nil
	}
}

// fetcher builds one client over a RoundTripper that adds one token,
// and returns how it fetches a job.
type fetcher func(authed http.RoundTripper) func(ctx context.Context, url string) error

// perToken builds one client and lane per token, splitting the workers
// evenly.
func perToken(build fetcher) func(Env) ([]Lane, error) {
	return func(e Env) ([]Lane, error) {
		var lanes []Lane
		for i, tok := range e.Tokens {
			lanes = append(lanes, Lane{Workers: share(e.Workers, len(e.Tokens), i), Fetch: build(withToken{next: e.Wire, token: tok})})
		}
		return lanes, nil
	}
}

// share is the i-th of n parts of total, the first ones one larger when
// it does not divide evenly.
func share(total, n, i int) int {
	s := total / n
	if i < total%n {
		s++
	}
	return s
}

// withToken authenticates every request as GitHub expects.
type withToken struct {
	next  http.RoundTripper
	token string
}

func (w withToken) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "token "+w.token)
	return w.next.RoundTrip(r)
}

func get(ctx context.Context, c *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	return c.Do(req)
}

// finish reads a response to the end and says whether the job is done.
func finish(resp *http.Response) error {
	_, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// plainFetcher is what people write around net/http: send, and on a
// rate-limit refusal wait what the server said, then send again.
func plainFetcher(authed http.RoundTripper) func(ctx context.Context, url string) error {
	c := &http.Client{Transport: authed}
	return func(ctx context.Context, url string) error { return plainFetch(ctx, c, url) }
}

func plainFetch(ctx context.Context, c *http.Client, url string) error {
	for attempt := 1; ; attempt++ {
		resp, err := get(ctx, c, url)
		if err != nil {
			return err
		}
		if wait, ok := refusalWait(resp, time.Now()); ok && attempt < MaxAttempts {
			_ = finish(resp)
			if err := sleep.For(ctx, wait); err != nil {
				return err
			}
			continue
		}
		return finish(resp)
	}
}

// refusalWait reads a 403 or 429 the way GitHub's documentation says:
// Retry-After if present, else the reset when remaining is 0. ok is false
// for any other answer.
func refusalWait(resp *http.Response, now time.Time) (time.Duration, bool) {
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusTooManyRequests {
		return 0, false
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if resp.Header.Get("X-Ratelimit-Remaining") == "0" {
		if reset, err := strconv.ParseInt(resp.Header.Get("X-Ratelimit-Reset"), 10, 64); err == nil {
			return max(time.Unix(reset, 0).Sub(now), 0), true
		}
	}
	return 0, false
}

// retryableFetcher uses go-retryablehttp's default client; it only
// swaps the HTTP client underneath (for the token and the recording) and
// turns off its logger.
func retryableFetcher(authed http.RoundTripper) func(ctx context.Context, url string) error {
	rc := retryablehttp.NewClient()
	rc.HTTPClient = &http.Client{Transport: authed}
	rc.Logger = nil
	return func(ctx context.Context, url string) error { return retryableFetch(ctx, rc, url) }
}

func retryableFetch(ctx context.Context, rc *retryablehttp.Client, url string) error {
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	resp, err := rc.Do(req)
	if err != nil {
		return err
	}
	return finish(resp)
}

// gofriFetcher stacks go-github-ratelimit's round tripper (primary and
// secondary limiters) on the authenticated transport; the loop around it
// waits out the primary limit its error reports.
func gofriFetcher(authed http.RoundTripper) func(ctx context.Context, url string) error {
	c := &http.Client{Transport: github_ratelimit.New(authed)}
	return func(ctx context.Context, url string) error { return gofriFetch(ctx, c, url) }
}

func gofriFetch(ctx context.Context, c *http.Client, url string) error {
	for attempt := 1; ; {
		resp, err := get(ctx, c, url)
		var limited *github_primary_ratelimit.RateLimitReachedError
		if errors.As(err, &limited) && limited.ResetTime != nil && attempt < MaxAttempts {
			wait := time.Until(*limited.ResetTime)
			if wait > 0 {
				attempt++
			} else {
				// The reset has come but the limiter's own timer has not
				// cleared it yet: the request was held back, not sent.
				wait = gofriPoll
			}
			if err := sleep.For(ctx, wait); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		return finish(resp)
	}
}

// gofriPoll is how soon the loop around go-github-ratelimit asks again
// when the limiter still holds requests back after the reset.
const gofriPoll = 20 * time.Millisecond
