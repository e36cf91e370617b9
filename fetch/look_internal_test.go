package fetch

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/taskbatch"
)

// Near its end a run looks at its tasks every tailLook while its requests
// are answered, and every poll interval otherwise, however long a look
// took; a big batch spaces its looks by what they take. Near the end is
// when every open task may be claimed by this process: 10 in flight claim
// 10 × taskbatch.ClaimAhead tasks.
func TestNextLook(t *testing.T) {
	now := time.Now()
	n := 10 * taskbatch.ClaimAhead
	r := &runner{opts: Options{PollInterval: 200 * time.Millisecond, Concurrency: 10}, open: make([]int64, n)}
	r.lastAnswer = now.Add(-100 * time.Millisecond)
	if got := r.nextLook(time.Second, now); got != tailLook {
		t.Errorf("%d tasks open, an answer 100 ms ago, a look of 1s: next look in %v, want %v", n, got, tailLook)
	}
	r.lastAnswer = now.Add(-time.Minute)
	if got := r.nextLook(time.Second, now); got != 200*time.Millisecond {
		t.Errorf("%d tasks open, no answer lately, a look of 1s: next look in %v, want the poll interval", n, got)
	}
	r.open = make([]int64, n+1)
	r.lastAnswer = now
	if got := r.nextLook(time.Second, now); got != 5*time.Second {
		t.Errorf("%d tasks open, a look of 1s: next look in %v, want 5s", n+1, got)
	}
	if got := r.nextLook(10*time.Millisecond, now); got != 200*time.Millisecond {
		t.Errorf("%d tasks open, a look of 10ms: next look in %v, want the poll interval", n+1, got)
	}
}
