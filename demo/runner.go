package demo

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/transport"
)

// Result is what became of one job.
type Result struct {
	Job Job
	// Status is the HTTP status the caller received (0 when Err is set).
	// A 304 the cache turned back into the stored 200 reads 200, with
	// Cache "revalidated".
	Status int
	// Cache is the transport's cache marker: "miss", "revalidated" or "".
	Cache string
	// Credential is the masked credential that sent the request.
	Credential string
	Err        error
	Took       time.Duration
}

// Runner sends every job of a batch once through client, whose requests
// go to base + job.Path, and calls done after each, from any goroutine.
// It returns when every job is done or ctx ends. This is the one step a
// durable batch runner can take over.
type Runner func(ctx context.Context, client *http.Client, base string, jobs []Job, done func(Result)) error

// Pool returns a Runner with the given number of workers taking jobs in
// order from one queue: the plainest way to run a batch, and enough when
// the client paces itself.
func Pool(workers int) Runner {
	return func(ctx context.Context, client *http.Client, base string, jobs []Job, done func(Result)) error {
		queue := make(chan Job)
		var wg sync.WaitGroup
		for range max(workers, 1) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range queue {
					done(fetch(ctx, client, base, j))
				}
			}()
		}
	feed:
		for _, j := range jobs {
			select {
			case queue <- j:
			case <-ctx.Done():
				break feed
			}
		}
		close(queue)
		wg.Wait()
		return ctx.Err()
	}
}

// fetch sends one GET and reads its body to the end, as a crawler would.
func fetch(ctx context.Context, client *http.Client, base string, j Job) Result {
	start := time.Now()
	r := Result{Job: j}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+j.Path, nil)
	if err != nil {
		r.Err = err
		return r
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	resp, err := client.Do(req)
	if err != nil {
		r.Err, r.Took = err, time.Since(start)
		return r
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	r.Status, r.Err, r.Took = resp.StatusCode, err, time.Since(start)
	r.Cache = resp.Header.Get(transport.HeaderCache)
	r.Credential = resp.Header.Get(transport.HeaderCredential)
	return r
}
