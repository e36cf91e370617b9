package cli

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

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

// The first Ctrl-C ends the command's context and says that it is
// stopping; a second ends the process at once, with 128 + the signal.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	var errOut lockedBuffer
	exited := make(chan int, 1)
	ctx, stop := signalContext(&errOut, func(code int) { exited <- code })
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the context did not end at the first SIGINT")
	}
	if got := interruptedCode(ctx); got != 130 {
		t.Errorf("interruptedCode after SIGINT = %d, want 130", got)
	}
	if out := errOut.String(); !strings.Contains(out, "Ctrl-C again to stop at once") {
		t.Errorf("stderr after the first SIGINT: %q; want it to say a second stops at once", out)
	}
	select {
	case code := <-exited:
		t.Fatalf("exited (%d) at the first signal", code)
	default:
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != 130 {
			t.Errorf("exit status %d at the second SIGINT, want 130", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a second SIGINT did not stop the process")
	}
}
