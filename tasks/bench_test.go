package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// The throughput benchmarks run b.N no-op tasks: submitted up front in one
// SubmitMany, then worked until all are completed. The target is
// measured with -benchtime 10000x:
//
//	go test ./tasks -run '^$' -bench NoopThroughput -benchtime 10000x
//
// and reports tasks/s. Fetch settings are the package defaults, so the
// numbers are what `ratekeeper tasks worker --concurrency N` gets; the
// default concurrency is 10.

func BenchmarkNoopThroughputSQLite(b *testing.B) {
	for _, c := range []int{10, 50} {
		b.Run(fmt.Sprintf("concurrency=%d", c), func(b *testing.B) { benchThroughput(b, sqliteDSN(b), c) })
	}
}

func BenchmarkNoopThroughputPostgres(b *testing.B) {
	for _, c := range []int{10, 50} {
		b.Run(fmt.Sprintf("concurrency=%d", c), func(b *testing.B) { benchThroughput(b, postgresDSN(b), c) })
	}
}

func benchOptions() Options {
	o := testOptions()
	o.FetchPollInterval, o.FetchCooldown, o.CancelPollInterval = 0, 0, 0 // package defaults
	return o
}

func benchThroughput(b *testing.B, dsn string, concurrency int) {
	var done atomic.Int64
	opts := benchOptions()
	opts.Handlers = map[string]HandlerFunc{"bench.noop": func(context.Context, *Task) (json.RawMessage, error) {
		done.Add(1)
		return nil, nil
	}}
	q := openQueue(b, dsn, opts)
	ctx := context.Background()
	subs := make([]Submission, b.N)
	for i := range subs {
		subs[i] = Submission{Type: "bench.noop", Input: json.RawMessage(`{}`)}
	}
	start := time.Now()
	res, err := q.SubmitMany(ctx, subs)
	if err != nil {
		b.Fatal(err)
	}
	submitRate := float64(b.N) / time.Since(start).Seconds()
	last := res[len(res)-1].ID

	b.ResetTimer()
	start = time.Now()
	stop := startWorker(b, q, WorkOptions{Concurrency: concurrency})
	for {
		t, err := q.Get(ctx, last)
		if err != nil {
			b.Fatal(err)
		}
		if t.State == StateCompleted && done.Load() == int64(b.N) && allCompleted(ctx, q) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
	b.ReportMetric(submitRate, "submits/s")
}

// BenchmarkRescheduleRoundTripSQLite measures one reschedule with delay 0:
// from the handler returning Reschedule(0) to the same task's handler
// running again. One op is one round trip.
//
//	go test ./tasks -run '^$' -bench RescheduleRoundTrip -benchtime 200x
func BenchmarkRescheduleRoundTripSQLite(b *testing.B) {
	benchRoundTrip(b, sqliteDSN(b))
}

func BenchmarkRescheduleRoundTripPostgres(b *testing.B) {
	benchRoundTrip(b, postgresDSN(b))
}

func benchRoundTrip(b *testing.B, dsn string) {
	var (
		runs     atomic.Int64
		lastExit atomic.Int64 // unix nanos when the handler returned Reschedule
		total    atomic.Int64 // summed round trips, nanoseconds
	)
	finished := make(chan struct{})
	opts := benchOptions()
	opts.Handlers = map[string]HandlerFunc{"bench.bounce": func(context.Context, *Task) (json.RawMessage, error) {
		now := time.Now().UnixNano()
		if n := runs.Add(1); n > 1 {
			total.Add(now - lastExit.Load())
		}
		if runs.Load() > int64(b.N) {
			close(finished)
			return nil, nil
		}
		lastExit.Store(time.Now().UnixNano())
		return nil, Reschedule(0)
	}}
	q := openQueue(b, dsn, opts)
	mustSubmit(b, q, "bench.bounce", `{}`, SubmitOptions{})
	b.ResetTimer()
	startWorker(b, q, WorkOptions{Concurrency: 1})
	select {
	case <-finished:
	case <-time.After(10 * time.Minute):
		b.Fatal("round trips did not finish")
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Load())/float64(b.N)/1e6, "ms/roundtrip")
}

// allCompleted reports whether no task is pending or running any more.
func allCompleted(ctx context.Context, q *Queue) bool {
	for _, s := range []State{StatePending, StateRunning} {
		if n, err := q.List(ctx, Filter{State: s, Limit: 1}); err != nil || len(n) > 0 {
			return false
		}
	}
	return true
}
