package sleep

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := For(context.Background(), 3*time.Second); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != 3*time.Second {
			t.Errorf("slept %v, want 3s", got)
		}
	})
}

func TestForEndsWithTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		if err := For(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v, want the context's deadline", err)
		}
		if got := time.Since(start); got != time.Second {
			t.Errorf("slept %v, want 1s", got)
		}
	})
}

func TestForNothing(t *testing.T) {
	if err := For(context.Background(), -time.Second); err != nil {
		t.Errorf("a negative wait: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := For(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("a zero wait on an ended context: %v, want Canceled", err)
	}
}
