package fetch

import (
	"testing"
	"time"
)

// Near its end a run looks at its tasks every tailLook while its requests
// are answered, and every poll interval otherwise, however long a look
// took; a big batch spaces its looks by what they take.
func TestNextLook(t *testing.T) {
	now := time.Now()
	r := &runner{opts: Options{PollInterval: 200 * time.Millisecond, Concurrency: 10}, open: make([]int64, 10)}
	r.lastAnswer = now.Add(-100 * time.Millisecond)
	if got := r.nextLook(time.Second, now); got != tailLook {
		t.Errorf("10 tasks open, an answer 100 ms ago, a look of 1s: next look in %v, want %v", got, tailLook)
	}
	r.lastAnswer = now.Add(-time.Minute)
	if got := r.nextLook(time.Second, now); got != 200*time.Millisecond {
		t.Errorf("10 tasks open, no answer lately, a look of 1s: next look in %v, want the poll interval", got)
	}
	r.open = make([]int64, 11)
	r.lastAnswer = now
	if got := r.nextLook(time.Second, now); got != 5*time.Second {
		t.Errorf("11 tasks open, a look of 1s: next look in %v, want 5s", got)
	}
	if got := r.nextLook(10*time.Millisecond, now); got != 200*time.Millisecond {
		t.Errorf("11 tasks open, a look of 10ms: next look in %v, want the poll interval", got)
	}
}
