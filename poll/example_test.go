package poll_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/poll"
	"github.com/ratekeeper/ratekeeper/sim"
)

// The interval policy is a pure function: what a poll saw and when, in,
// the wait until the next poll and the rule that set it, out.
func ExamplePolicy_Next() {
	p := poll.DefaultPolicy()
	p.Location = time.UTC
	at := time.Date(2025, 6, 3, 10, 0, 0, 0, time.UTC) // a Tuesday, in business hours

	var s poll.State
	var d poll.Decision
	for _, o := range []poll.Outcome{poll.First, poll.Unchanged, poll.Changed, poll.Unchanged, poll.Unchanged} {
		s, d = p.Next(s, poll.Observation{Outcome: o, NotModified: o == poll.Unchanged}, at)
		fmt.Printf("%s %s: next in %s (%s)\n", at.Format("15:04:05"), o, d.Interval, d.Rule)
		at = d.Next
	}
	night := time.Date(2025, 6, 3, 23, 0, 0, 0, time.UTC)
	_, d = p.Next(s, poll.Observation{Outcome: poll.Unchanged, NotModified: true}, night)
	fmt.Printf("23:00:00 unchanged: next in %s (%s)\n", d.Interval, d.Rule)
	// Output:
	// 10:00:00 first: next in 3m0s (business-hours)
	// 10:03:00 unchanged: next in 3m0s (business-hours)
	// 10:06:00 changed: next in 1m0s (after-change)
	// 10:07:00 unchanged: next in 1m30s (after-change)
	// 10:08:30 unchanged: next in 2m15s (after-change)
	// 23:00:00 unchanged: next in 15m0s (quiet-hours)
}

// A poller over ratekeeper's client: polls are paced with the rest of the
// client's requests, and a repeated poll is a conditional request (free
// on GitHub). Here the sink stops at the first answer, which EmitInitial
// emits.
func ExampleNew() {
	srv, _ := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: 100, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-example-1", Owner: "octocat"}}}}})
	api := httptest.NewServer(srv) // a simulated GitHub on loopback
	defer api.Close()
	client := ratekeeper.NewClient(ratekeeper.Options{
		Providers: []string{"github=" + api.URL},
		Tokens:    map[string][]string{"github": {"tok-example-1"}},
	})

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	p, err := poll.New(poll.Options{
		URLs:        []string{api.URL + "/repos/golang/go"},
		Client:      client,
		EmitInitial: true,
		Sink: poll.SinkFunc(func(_ context.Context, c poll.Change) error {
			fmt.Printf("initial: %t, etag: %t, body: %t\n", c.Initial, c.ETag != "", len(c.Body) > 0)
			stop()
			return nil
		}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := p.Run(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// initial: true, etag: true, body: true
}
