// Package cli holds ratekeeper's cobra commands. Commands are thin: they
// parse flags, build the library objects that do the work and print.
//
// Layer 6 of docs/architecture.md: it owns the commands' flags and output,
// one file each, and must not hold logic a library user would need.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ratekeeper/ratekeeper/internal/buildinfo"
)

// commands holds the constructors of the subcommands. Each command lives in
// its own file and registers itself from init, so adding a command never
// touches this file.
var commands []func() *cobra.Command

func register(newCmd func() *cobra.Command) { commands = append(commands, newCmd) }

// ExitError carries the process exit status a command wants, with the
// one-line reason printed on stderr. A nil Err exits silently.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// exitf returns an ExitError with a formatted reason.
func exitf(code int, format string, args ...any) error {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

// EnvPrefix is prepended to a flag's upper-cased name (dashes become
// underscores) to form the environment variable that sets it:
// --max-wait is RATEKEEPER_MAX_WAIT.
const EnvPrefix = "RATEKEEPER_"

// EnvName returns the environment variable that sets the flag name.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// NewRoot builds the ratekeeper command tree.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "ratekeeper",
		Short: "Do lots of work against rate-limited APIs, fast, without being throttled",
		Long: `ratekeeper reads every dialect of rate-limit headers, paces requests across
credentials, turns long waits into durable sleeps and never loses work.

Every flag can also be set with an environment variable: RATEKEEPER_ followed by
the flag's name in upper case with dashes as underscores (--max-wait is
RATEKEEPER_MAX_WAIT). A flag given on the command line wins.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd); err != nil {
				return err
			}
			return checkDB(cmd)
		},
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	// --version is declared here so that cobra takes no -v for it: -v is
	// the commands' --verbose.
	root.Version = buildinfo.Read().String()
	root.SetVersionTemplate("{{.Version}}")
	root.Flags().Bool("version", false, "print the version, commit, build date and Go version (as 'ratekeeper version')")
	for _, newCmd := range commands {
		root.AddCommand(newCmd())
	}
	return root
}

// applyEnv sets every flag not given on the command line from its
// RATEKEEPER_* environment variable, if that is set.
func applyEnv(cmd *cobra.Command) error {
	var firstErr error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || firstErr != nil {
			return
		}
		name := EnvName(f.Name)
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if err := cmd.Flags().Set(f.Name, v); err != nil {
			firstErr = &ExitError{Code: 2, Err: fmt.Errorf("%s=%q: invalid value for --%s: %v", name, v, f.Name, err)}
		}
	})
	return firstErr
}

// Execute runs the command line args and returns the process exit status:
// 0 on success, 2 for usage errors and unreadable input, 1 for other errors,
// or whatever an ExitError asks for. SIGINT, SIGTERM and SIGHUP (a closed
// terminal or SSH session) end the command's context: each command stops
// cleanly (a command that stops short of its work exits 128 + the signal's
// number, as a shell reports it: see interruptedCode).
func Execute(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signalContext(stderr, os.Exit)
	defer stop()
	endTracing, err := startTracing(ctx, stderr)
	if err != nil {
		printError(stderr, err)
		return 2
	}
	defer endTracing()
	root := NewRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &ExitError{Code: 2, Err: fmt.Errorf("%v (see '%s --help')", err, c.CommandPath())}
	})
	err = root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			printError(stderr, ee.Err)
		}
		if ee.Code == 1 && ctx.Err() != nil {
			return interruptedCode(ctx) // a failure a signal caused
		}
		return ee.Code
	}
	printError(stderr, err)
	if ctx.Err() != nil {
		// A signal stopped the command short of its work, whichever
		// error that became (get's request, poll's wait…): say so the
		// way fetch does, as a shell would.
		return interruptedCode(ctx)
	}
	if strings.HasPrefix(err.Error(), "unknown command") || strings.Contains(err.Error(), "accepts ") || strings.Contains(err.Error(), "arg(s)") {
		return 2
	}
	return 1
}

// printError prints err as the command's last word, prefixed by the
// program's name once.
func printError(w io.Writer, err error) {
	fmt.Fprintln(w, "ratekeeper:", withoutPrefix(err.Error()))
}

// withoutPrefix drops the program's name from inside msg: errors of the
// library start with "ratekeeper: " themselves, which after the CLI's own
// prefix, or wrapped in other errors, would read "ratekeeper: ratekeeper:
// …" or "…: ratekeeper: …".
func withoutPrefix(msg string) string {
	for strings.HasPrefix(msg, "ratekeeper: ") {
		msg = strings.TrimPrefix(msg, "ratekeeper: ")
	}
	msg = strings.ReplaceAll(msg, ": ratekeeper: ", ": ")
	return strings.ReplaceAll(msg, "(ratekeeper: ", "(")
}

// stopSignal is the cause of a command context ended by a signal. It is a
// cancellation (errors.Is context.Canceled), as a plain cancel would be.
type stopSignal struct{ sig syscall.Signal }

func (s stopSignal) Error() string { return "stopped by signal: " + s.sig.String() }
func (s stopSignal) Unwrap() error { return context.Canceled }

// signalContext returns a context that ends, with a stopSignal as its
// cause, at the first SIGINT, SIGTERM or SIGHUP, and says so on stderr: a
// command stopping lets what is under way finish (a request at the server,
// a task's last write), which can take a few seconds, and a terminal that
// shows nothing meanwhile looks hung. A second signal ends the process at
// once through exit, with the same status, as a crash would end it: every
// command keeps what it finished through a crash (what was under way is
// done again by the next run). The notices are written to stderr from the
// signal's own goroutine, which os.Stderr allows; so must any stderr given
// to Execute. stop releases the signals.
func signalContext(stderr io.Writer, exit func(code int)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	released := make(chan struct{})
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		select {
		case sig := <-ch:
			s, _ := sig.(syscall.Signal)
			fmt.Fprintln(stderr, "ratekeeper: stopping: nothing new is sent, what is at the server finishes; press Ctrl-C again to stop at once")
			cancel(stopSignal{s})
		case <-released:
			return
		}
		select {
		case sig := <-ch:
			s, _ := sig.(syscall.Signal)
			fmt.Fprintln(stderr, "ratekeeper: stopped at once; run the same command again to go on")
			exit(128 + int(s))
		case <-released:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(released)
		cancel(nil)
	}
}

// interruptedCode is the exit status of a command that stopped short of
// its work because ctx ended: 128 + the number of the signal that ended
// it (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP), 130 when no signal
// is known.
func interruptedCode(ctx context.Context) int {
	var s stopSignal
	if errors.As(context.Cause(ctx), &s) && s.sig > 0 {
		return 128 + int(s.sig)
	}
	return 128 + int(syscall.SIGINT)
}
