package cli

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/ratekeeper/ratekeeper/fetch"
)

func TestWithoutPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"ratekeeper: github core quota returns at 12:00":           "github core quota returns at 12:00",
		"ratekeeper: ratekeeper: x":                                "x",
		`batch: Get "u": ratekeeper: reserving quota: store: boom`: `batch: Get "u": reserving quota: store: boom`,
		"poll u: rate limited (ratekeeper: quota returns)":         "poll u: rate limited (quota returns)",
		"--db x.db: damaged":                                       "--db x.db: damaged",
	} {
		if got := withoutPrefix(in); got != want {
			t.Errorf("withoutPrefix(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDescribeSummarySaysOneThing(t *testing.T) {
	got := describeSummary(fetch.Summary{Total: 1, Written: 1, Submitted: 1, Reclaimed: 1}, "out.jsonl")
	want := "1 URL, 1 done (0 failed); this run wrote 1, added 1 task and found 0 from earlier runs, taking back at once 1 task a killed run had left running"
	if got != want {
		t.Errorf("describeSummary = %q\nwant %q", got, want)
	}
	got = describeSummary(fetch.Summary{Total: 1200, AlreadyWritten: 200, Written: 1000, Submitted: 1000}, "out.jsonl")
	want = "1,200 URLs, 1,200 done (0 failed); 200 already in out.jsonl; this run wrote 1,000, added 1,000 tasks and found 0 from earlier runs"
	if got != want {
		t.Errorf("describeSummary = %q\nwant %q", got, want)
	}
}

func TestInterruptedCode(t *testing.T) {
	for sig, want := range map[syscall.Signal]int{syscall.SIGINT: 130, syscall.SIGTERM: 143, syscall.SIGHUP: 129} {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(stopSignal{sig})
		if got := interruptedCode(ctx); got != want {
			t.Errorf("%v: interruptedCode = %d, want %d", sig, got, want)
		}
		if !errors.Is(context.Cause(ctx), context.Canceled) {
			t.Errorf("%v: the cause %v is not a cancellation", sig, context.Cause(ctx))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := interruptedCode(ctx); got != 130 {
		t.Errorf("no signal: %d, want 130", got)
	}
}
