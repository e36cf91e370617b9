// Package sleep owns the one wait of real time that a context cuts short,
// for the poller's waits for the next poll, the benchmark's clients and a
// transport.WaitError that no transport made. (The transport waits on its
// own injected clock instead, in WaitError.Await too.)
package sleep

import (
	"context"
	"time"
)

// For waits d, or until ctx ends, and returns ctx's error if it ended
// first (or had ended: a d of zero or less waits nothing and returns
// ctx.Err()).
func For(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
