package tasks

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/transport"
)

// BenchmarkQuotaBackEarly measures how long a task asleep for its quota's
// reset, 15 s away, takes to complete once that quota comes back 1 s into
// its sleep (a reading of a new window in the shared state, as another
// process's answer writes it), on SQLite, with the wake and without it
// (River alone: the task sleeps to the reset). One op is one such task;
// the time is reported as s/return, from the return to the completion.
//
//	go test ./tasks -run '^$' -bench QuotaBackEarly -benchtime 1x -count 3
func BenchmarkQuotaBackEarly(b *testing.B) {
	for _, mode := range []struct {
		name   string
		noWake bool
	}{{"wake", false}, {"river-alone", true}} {
		b.Run(mode.name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				total += quotaBackEarly(b, mode.noWake)
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/return")
		})
	}
}

func quotaBackEarly(b *testing.B, noWake bool) time.Duration {
	b.StopTimer()
	defer b.StartTimer()
	reset := time.Now().Add(15 * time.Second)
	api := newQuotaAPI(b, 1, reset)
	st := transport.NewMemoryState()
	q := wakeSetup(b, sqliteDSN(b), api, st, nil, noWake)
	id := sleepingForQuota(b, q, api)
	time.Sleep(time.Second)

	api.set(99, reset.Add(time.Hour))
	bs, _ := st.Buckets(ctxT(b))
	back := time.Now()
	for bid := range bs {
		if bid.Resource == "core" {
			r := headers.Reading{Status: 200, Limit: 100, Remaining: 99, Reset: reset.Add(time.Hour), Resource: "core"}
			if err := st.Settle(ctxT(b), &transport.SettleParams{Slot: transport.Slot{Bucket: bid},
				Answer: quota.Answer{Reading: &r, Counted: true}, Now: back}); err != nil {
				b.Fatal(err)
			}
		}
	}
	task := mustAwait(b, q, id)
	took := time.Since(back)
	if task.State != StateCompleted || task.RescheduleCount != 1 {
		b.Fatalf("task = %+v, want completed after one sleep", task)
	}
	return took
}
