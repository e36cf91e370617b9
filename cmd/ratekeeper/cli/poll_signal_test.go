//go:build unix

package cli

import (
	"bytes"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestPollStopsCleanlyOnSIGTERM(t *testing.T) {
	srv, url := startPollSim(t, manyPerHour)
	// stderr is written by the command and by the signal's notice: a
	// buffer safe for both, as os.Stderr is.
	var out bytes.Buffer
	var errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- Execute(pollArgs("--provider", "github="+url, url+"/repos/o/r"), strings.NewReader(""), &out, &errOut)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := srv.Stats().BucketFor("github", "alice", "core")
		if b.NotModified >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no polls")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The command is polling, so its signal context catches the signal.
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after SIGTERM: %s", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still polling 10 s after SIGTERM")
	}
}
