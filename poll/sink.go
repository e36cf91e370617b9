package poll

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// Sink receives the changes a poller sees. Emit is called for one change at
// a time, in the order they were seen. An error stops the poller, except an
// *ExecError, which is reported as an event and polling goes on.
type Sink interface {
	Emit(ctx context.Context, c Change) error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, c Change) error

// Emit calls f.
func (f SinkFunc) Emit(ctx context.Context, c Change) error { return f(ctx, c) }

// JSONLines returns a Sink that writes each change to w as one line of JSON
// (see Change.MarshalJSON).
func JSONLines(w io.Writer) Sink { return &jsonLines{w: w} }

type jsonLines struct {
	mu sync.Mutex
	w  io.Writer
}

func (j *jsonLines) Emit(_ context.Context, c Change) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err = j.w.Write(append(b, '\n'))
	return err
}

// ExecError is a command run by an Exec sink that failed.
type ExecError struct {
	Command string
	URL     string
	Err     error
}

func (e *ExecError) Error() string {
	return fmt.Sprintf("--exec %q for a change of %s: %v", e.Command, e.URL, e.Err)
}

func (e *ExecError) Unwrap() error { return e.Err }

// Exec returns a Sink that runs command through the shell (sh -c; cmd /C
// on Windows) once per change, one at a time, with the whole body of the
// answer on its standard input and these environment variables added:
//
//	RATEKEEPER_POLL_URL         the URL (credentials masked)
//	RATEKEEPER_POLL_ETAG        the answer's ETag
//	RATEKEEPER_POLL_CHANGED_AT  when the change was seen (RFC 3339)
//	RATEKEEPER_POLL_NEW_ITEMS   how many items are new, for a JSON array
//	RATEKEEPER_POLL_INITIAL     1 for the first answer, when emitted
//
// Its standard output and error go to stdout and stderr. A command that
// fails (exit status other than 0) is an *ExecError. When the poller's
// context ends the command is killed.
func Exec(command string, stdout, stderr io.Writer) Sink {
	return &execSink{command: command, stdout: stdout, stderr: stderr}
}

type execSink struct {
	mu             sync.Mutex
	command        string
	stdout, stderr io.Writer
}

func (e *execSink) Emit(ctx context.Context, c Change) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var cmd *exec.Cmd
	if runtime.GOOS == "windows" {
		cmd = exec.CommandContext(ctx, "cmd", "/C", e.command)
	} else {
		cmd = exec.CommandContext(ctx, "sh", "-c", e.command)
	}
	cmd.Stdin = bytes.NewReader(c.Body)
	cmd.Stdout, cmd.Stderr = e.stdout, e.stderr
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(),
		"RATEKEEPER_POLL_URL="+c.URL,
		"RATEKEEPER_POLL_ETAG="+c.ETag,
		"RATEKEEPER_POLL_CHANGED_AT="+c.ChangedAt.Format(time.RFC3339Nano),
	)
	if c.Items {
		cmd.Env = append(cmd.Env, "RATEKEEPER_POLL_NEW_ITEMS="+strconv.Itoa(len(c.NewItems)))
	}
	if c.Initial {
		cmd.Env = append(cmd.Env, "RATEKEEPER_POLL_INITIAL=1")
	}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &ExecError{Command: e.command, URL: c.URL, Err: err}
	}
	return nil
}

// isExecError reports whether err is a failed command rather than a
// broken sink.
func isExecError(err error) bool {
	var ee *ExecError
	return errors.As(err, &ee)
}
