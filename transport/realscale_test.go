package transport

import (
	"testing"
	"testing/synctest"
	"time"
)

// The secondary-limit scenarios at the time scale GitHub uses: a 60 s
// penalty, and the client's own default secondary wait (a minute). A cap
// that regains a slot per minute counted from its lowering comes back to
// the refused level exactly when such a pause ends, and the first burst
// after every pause is refused again.
var (
	batchRealNoRetryAfter = concurrencyBatch{jobs: 600, workers: 48, maxInFlight: 6, latency: 40 * time.Millisecond,
		penalty: time.Minute}
	batchRealRetryAfter = concurrencyBatch{jobs: 600, workers: 48, maxInFlight: 6, latency: 40 * time.Millisecond,
		penalty: time.Minute, retryAfter: true}
)

// TestSecondaryAtRealScale: one refusal episode, and done within 1.1 ×
// (ideal + one penalty), with or without retry-after.
func TestSecondaryAtRealScale(t *testing.T) {
	for _, c := range []struct {
		name  string
		batch concurrencyBatch
	}{{"no retry-after", batchRealNoRetryAfter}, {"retry-after 60", batchRealRetryAfter}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := c.batch.run(t, true)
				if r.done != c.batch.jobs {
					t.Fatalf("done %d of %d; first error %v", r.done, c.batch.jobs, r.firstErr)
				}
				limit := time.Duration(1.1 * float64(c.batch.ideal()+c.batch.penalty))
				if r.episodes > 1 {
					t.Errorf("%d refusal episodes (%d refusals), want 1", r.episodes, r.refusals)
				}
				if r.makespan > limit {
					t.Errorf("makespan %v, want at most %v = 1.1 × (ideal %v + penalty %v)", r.makespan, limit, c.batch.ideal(), c.batch.penalty)
				}
				t.Logf("makespan %v (ideal %v), %d refusals in %d episodes", r.makespan, c.batch.ideal(), r.refusals, r.episodes)
			})
		})
	}
}
