// Package cli holds ratekeeper's cobra commands. Commands are thin: they
// parse flags, build the library objects that do the work and print.
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
			return applyEnv(cmd)
		},
	}
	root.CompletionOptions.HiddenDefaultCmd = true
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
// or whatever an ExitError asks for.
func Execute(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &ExitError{Code: 2, Err: fmt.Errorf("%v (see '%s --help')", err, c.CommandPath())}
	})
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintln(stderr, "ratekeeper:", ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintln(stderr, "ratekeeper:", err)
	if strings.HasPrefix(err.Error(), "unknown command") || strings.Contains(err.Error(), "accepts ") || strings.Contains(err.Error(), "arg(s)") {
		return 2
	}
	return 1
}
