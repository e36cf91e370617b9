package storetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/store"
)

// Processes sharing one database: the suite re-executes the test binary
// as worker processes (see Main).

const (
	envWorker = "RATEKEEPER_STORETEST_WORKER" // "increment" or "hold"
	envDSN    = "RATEKEEPER_STORETEST_DSN"
	envKey    = "RATEKEEPER_STORETEST_KEY"
	envCount  = "RATEKEEPER_STORETEST_COUNT"
	envLimit  = "RATEKEEPER_STORETEST_BLOB_LIMIT" // "put-blobs": the store's BlobLimit
	// insideMarker is what a "hold" worker prints once it is inside fn.
	insideMarker = "inside update"
)

// Main is for the TestMain of a package that runs the suite: in a worker
// process started by the suite it does the worker's job and exits;
// otherwise it runs the tests.
func Main(m *testing.M) {
	if job := os.Getenv(envWorker); job != "" {
		if err := work(job); err != nil {
			fmt.Fprintf(os.Stderr, "storetest worker %s: %v\n", job, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// work does one worker process's job.
func work(job string) error {
	ctx := context.Background()
	limit, _ := strconv.ParseInt(os.Getenv(envLimit), 10, 64) // unset: the default
	s, err := store.Open(ctx, os.Getenv(envDSN), store.Options{BlobLimit: limit})
	if err != nil {
		return err
	}
	defer s.Close()
	key := os.Getenv(envKey)
	switch job {
	case "put-blobs":
		n, err := strconv.Atoi(os.Getenv(envCount))
		if err != nil {
			return fmt.Errorf("%s: %w", envCount, err)
		}
		return putBlobs(ctx, s, key, n)
	case "increment":
		n, err := strconv.Atoi(os.Getenv(envCount))
		if err != nil {
			return fmt.Errorf("%s: %w", envCount, err)
		}
		for range n {
			if err := s.Update(ctx, key, increment); err != nil {
				return err
			}
		}
		return nil
	case "increment-many":
		n, err := strconv.Atoi(os.Getenv(envCount))
		if err != nil {
			return fmt.Errorf("%s: %w", envCount, err)
		}
		keys := strings.Split(key, ",")
		for range n {
			if err := s.UpdateMany(ctx, keys, incrementAll); err != nil {
				return err
			}
		}
		return nil
	case "hold":
		// Read, modify, and then never get to write: the parent kills
		// this process with SIGKILL while fn is running.
		return s.Update(ctx, key, func(rec *store.Record) error {
			rec.Value = []byte("half-done write that must never land")
			fmt.Println(insideMarker)
			select {}
		})
	}
	return fmt.Errorf("unknown job %q", job)
}

// startWorker starts the test binary as a worker process.
func startWorker(t *testing.T, job, dsn, key string, count int) (*exec.Cmd, *bytes.Buffer, *bufio.Reader) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorker+"="+job, envDSN+"="+dsn, envKey+"="+key, envCount+"="+strconv.Itoa(count))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, &stderr, bufio.NewReader(stdout)
}

func testProcesses(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	s := openDSN(t, dsn, store.Options{}) // creates the schema, and joins in
	const workers, each = 3, 40
	type worker struct {
		cmd    *exec.Cmd
		stderr *bytes.Buffer
		stdout *bufio.Reader
	}
	var ws []worker
	for range workers {
		cmd, stderr, stdout := startWorker(t, "increment", dsn, "counter", each)
		ws = append(ws, worker{cmd, stderr, stdout})
	}
	for range each {
		mustUpdate(t, s, "counter", increment)
	}
	for i, w := range ws {
		w.stdout.WriteTo(&bytes.Buffer{}) // drain, so Wait can finish
		if err := w.cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v\n%s", i, err, w.stderr)
		}
	}
	total := (workers + 1) * each
	wantRecord(t, s, "counter", strconv.Itoa(total), int64(total))
}

func testKilledInsideUpdate(t *testing.T, b Backend) {
	dsn := b.NewDSN(t)
	s := openDSN(t, dsn, store.Options{})
	for range 41 {
		mustUpdate(t, s, "counter", increment)
	}

	cmd, stderr, stdout := startWorker(t, "hold", dsn, "counter", 0)
	line, err := stdout.ReadString('\n')
	if strings.TrimSpace(line) != insideMarker {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("worker did not get inside its update (read %q, %v):\n%s", line, err, stderr)
	}

	// The worker now holds the key's lock. An update queued behind it must
	// go through once the worker dies; the timeout only bounds a failure.
	waiter := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		waiter <- s.Update(ctx, "counter", increment)
	}()
	wantRecord(t, s, "counter", "41", 41) // readers are not blocked by the lock

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("worker ended with %v, not by SIGKILL:\n%s", err, stderr)
	}
	if err := <-waiter; err != nil {
		t.Fatalf("an update waiting on the killed worker's lock failed: %v", err)
	}
	wantRecord(t, s, "counter", "42", 42)
}

// BenchmarkUpdate measures single-key read-modify-writes on s and reports
// their latency percentiles as p50-µs and p99-µs.
