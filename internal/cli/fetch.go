package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/batch"
	"github.com/ratekeeper/ratekeeper/tasks"
)

func init() { register(newFetchCmd) }

// fetchDefaultMaxWait replaces the client's default max wait in fetch: a
// task waits in memory at most this long for quota, then sleeps durably
// (rescheduled in the database) and frees its worker.
const fetchDefaultMaxWait = 30 * time.Second

type fetchOptions struct {
	client        clientFlags
	input         string
	output        string
	readme        bool
	concurrency   int
	timeout       time.Duration
	retries       int
	bodyDir       string
	inlineLimit   int64
	progress      string
	progressEvery time.Duration
}

func newFetchCmd() *cobra.Command {
	var o fetchOptions
	cmd := &cobra.Command{
		Use:   "fetch [-i FILE | URL…] [-o results.jsonl] [--db DSN] [--concurrency N] [--policy P] [--provider NAME=BASEURL…] [--readme]",
		Short: "Fetch a batch of URLs through the rate-keeping client, resumably",
		Long: `fetch sends one GET per URL as a durable http task in --db and writes one
JSON line per URL: url, status, etag, from_cache, attempts, reschedules,
credential (masked), sha256, size, body (small UTF-8 bodies) or body_file,
error (when the URL failed) and task_id.

URLs come from the arguments or from -i FILE ("-i -" reads stdin), one a line;
blank lines and # comments are ignored. Every line is checked before anything
is submitted. With --readme the lines are repository pages (github.com/o/r,
gitlab.com/g/p, huggingface.co/o/m, codeberg.org/o/r, or a configured
self-hosted web root) and fetch gets each one's README through the provider's
API; the output's url is the repository as given.

Resumable: kill it at any moment and run the same command again. URLs already
in the -o file are skipped, tasks of the killed run are found again (their
unique key is the request), finished ones are written without being fetched
again, and each URL is in the file exactly once. Tasks the killed process was
running come back after --timeout plus a grace period, once this run leads
the queue (up to about 15 s after the kill). Without -o results go to stdout,
each URL once per run.

A request that would wait longer than --max-wait for quota is rescheduled in
the database until quota returns (a durable sleep, counted in "reschedules")
and its worker takes other work; --timeout bounds one attempt and must exceed
--max-wait.

Progress goes to stderr: bars when it is a terminal, otherwise a line every
--progress-every. The exit status is 1 when some URLs finally failed (an error,
or a final status other than 2xx), 2 for bad input, 130 when interrupted.`,
		Example: `  ratekeeper fetch -i urls.txt -o results.jsonl
  ratekeeper fetch --readme -i repos.txt -o readmes.jsonl --concurrency 20
  cat urls.txt | ratekeeper fetch -i - --db postgres://rk@db/ratekeeper > results.jsonl`,
		RunE: func(cmd *cobra.Command, args []string) error { return runFetch(cmd, &o, args) },
	}
	o.client.add(cmd)
	if f := cmd.Flags().Lookup("max-wait"); f != nil {
		o.client.maxWait = fetchDefaultMaxWait
		f.DefValue = fetchDefaultMaxWait.String()
		f.Usage = "longest wait for quota in memory; a longer one reschedules the URL's task until quota returns (a durable sleep)"
	}
	if f := cmd.Flags().Lookup("db"); f != nil {
		f.Usage = "database of the tasks and the shared quota state: a SQLite file, or postgres://… for a fleet"
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.input, "input", "i", "", `file of URLs, one a line ("-" for stdin)`)
	fl.StringVarP(&o.output, "output", "o", "", "results file (JSON lines), appended and resumed; default stdout")
	fl.BoolVar(&o.readme, "readme", false, "input lines are repository web URLs; fetch each one's README")
	fl.IntVar(&o.concurrency, "concurrency", batch.DefaultConcurrency, "requests in flight at once in this process")
	fl.DurationVar(&o.timeout, "timeout", batch.DefaultTimeout, "limit of one attempt (quota wait, request and its retries); must exceed --max-wait")
	fl.IntVar(&o.retries, "retries", tasks.DefaultMaxRetries, "failed attempts retried (with backoff) before a URL fails; 0 for none")
	fl.StringVar(&o.bodyDir, "body-dir", "", "directory for bodies too big to go inline (default ratekeeper-bodies beside -o, or here)")
	fl.Int64Var(&o.inlineLimit, "inline-limit", 64<<10, "largest UTF-8 body written inline, in bytes")
	fl.StringVar(&o.progress, "progress", "auto", "progress on stderr: auto, bars, lines or off")
	fl.DurationVar(&o.progressEvery, "progress-every", 10*time.Second, "interval of progress lines")
	return cmd
}

func runFetch(cmd *cobra.Command, o *fetchOptions, args []string) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := o.check(args); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	entries, source, err := o.readEntries(cmd.InOrStdin(), args)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}

	reporter, logTo := o.reporter(stdout, stderr)
	started := false
	defer func() {
		if !started && reporter != nil {
			reporter.Finish(batch.Snapshot{})
		}
	}()
	tr, err := o.client.transport(logTo)
	if err != nil {
		return err
	}
	defer tr.Close()
	targets, err := batch.Plan(entries, source, o.readme, tr.Registry())
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	out, err := o.openOutput(stdout)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	defer out.Close()
	if j, ok := out.(*batch.Journal); ok && j.Truncated > 0 {
		fmt.Fprintf(logTo, "ratekeeper: %s ended with a torn line (%d bytes, left by an interrupted run); cut it off, its URL will be written again\n", o.output, j.Truncated)
	}

	var providers []string
	for _, t := range targets {
		if t.Provider != "" && !slices.Contains(providers, t.Provider) {
			providers = append(providers, t.Provider)
		}
	}
	retries := o.retries
	if retries == 0 {
		retries = tasks.NoRetries
	}
	started = true
	sum, err := batch.Run(cmd.Context(), targets, batch.Options{
		DSN:             o.client.db,
		Client:          &http.Client{Transport: tr},
		Output:          out,
		Concurrency:     o.concurrency,
		Timeout:         o.timeout,
		MaxRetries:      retries,
		BodyDir:         o.bodyDirectory(),
		InlineBodyLimit: o.inlineLimit,
		Status:          tr.Status,
		Providers:       providers,
		Progress:        reporter,
		Logger:          slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if o.progress != "off" {
		fmt.Fprintln(stderr, "ratekeeper fetch:", describeSummary(sum, out.Name()))
	}
	switch {
	case errors.Is(err, batch.ErrInterrupted):
		return exitf(130, "%v", err)
	case err != nil:
		return &ExitError{Code: 1, Err: err}
	case sum.Failed > 0:
		return exitf(1, "%s of %s URLs failed; see %s", humanize.Comma(int64(sum.Failed)), humanize.Comma(int64(sum.Total)), out.Name())
	}
	return nil
}

// check validates the flags that need no I/O.
func (o *fetchOptions) check(args []string) error {
	switch {
	case o.input != "" && len(args) > 0:
		return errors.New("give URLs as arguments or with -i FILE, not both")
	case o.input == "" && len(args) == 0:
		return errors.New("no URLs: give them as arguments, or one a line with -i FILE (-i - for stdin)")
	case o.client.db == "memory":
		return errors.New("--db memory: fetch keeps its tasks in a database so that it can resume; give a SQLite file or a postgres:// URL")
	case o.concurrency < 1:
		return fmt.Errorf("--concurrency %d: want 1 or more", o.concurrency)
	case o.retries < 0:
		return fmt.Errorf("--retries %d: want 0 or more", o.retries)
	case o.inlineLimit < 0:
		return fmt.Errorf("--inline-limit %d: want 0 or more bytes", o.inlineLimit)
	case o.timeout <= 0:
		return fmt.Errorf("--timeout %v: want a positive duration such as 2m", o.timeout)
	case o.client.maxWait > 0 && o.timeout <= o.client.maxWait:
		return fmt.Errorf("--timeout %v must exceed --max-wait %v: an attempt waits up to --max-wait for quota before it is rescheduled, then needs time for the request", o.timeout, o.client.maxWait)
	case o.progressEvery <= 0:
		return fmt.Errorf("--progress-every %v: want a positive duration such as 10s", o.progressEvery)
	}
	switch o.progress {
	case "auto", "bars", "lines", "off":
	default:
		return fmt.Errorf("--progress %q: want auto, bars, lines or off", o.progress)
	}
	return nil
}

// readEntries reads the URLs from the arguments, stdin or the -i file.
func (o *fetchOptions) readEntries(stdin io.Reader, args []string) ([]batch.Entry, string, error) {
	if o.input == "" {
		return batch.ArgEntries(args), "arguments", nil
	}
	source, r := o.input, stdin
	if o.input == "-" {
		source = "stdin"
	} else {
		f, err := os.Open(o.input)
		if err != nil {
			return nil, "", fmt.Errorf("-i: %w", err)
		}
		defer f.Close()
		r = f
	}
	entries, err := batch.ReadEntries(r)
	if err != nil {
		return nil, "", fmt.Errorf("-i %s: %w", source, err)
	}
	if len(entries) == 0 {
		return nil, "", fmt.Errorf("-i %s: no URLs (only blank lines and comments)", source)
	}
	return entries, source, nil
}

// reporter picks the progress display, and where log lines go so that they
// do not break it.
func (o *fetchOptions) reporter(stdout, stderr io.Writer) (batch.Reporter, io.Writer) {
	mode := o.progress
	if mode == "auto" {
		mode = "lines"
		// Bars only when they own the terminal: results on stdout to the
		// same terminal would be drawn over.
		if isTerminal(stderr) && (o.output != "" && o.output != "-" || !isTerminal(stdout)) {
			mode = "bars"
		}
	}
	switch mode {
	case "bars":
		b := batch.NewBars(stderr)
		return b, b.Writer()
	case "lines":
		return &batch.Lines{W: stderr, Every: o.progressEvery}, stderr
	}
	return nil, stderr
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func (o *fetchOptions) openOutput(stdout io.Writer) (batch.Output, error) {
	if o.output == "" || o.output == "-" {
		return batch.NewStream(stdout, "stdout"), nil
	}
	return batch.OpenJournal(o.output)
}

func (o *fetchOptions) bodyDirectory() string {
	switch {
	case o.bodyDir != "":
		return o.bodyDir
	case o.output != "" && o.output != "-":
		return filepath.Join(filepath.Dir(o.output), "ratekeeper-bodies")
	}
	return "ratekeeper-bodies"
}

// describeSummary says what a run did, for the last line on stderr.
func describeSummary(s batch.Summary, output string) string {
	c := func(n int) string { return humanize.Comma(int64(n)) }
	msg := fmt.Sprintf("%s URLs, %s done (%s failed)", c(s.Total), c(s.AlreadyWritten+s.Written), c(s.Failed))
	if s.AlreadyWritten > 0 {
		msg += fmt.Sprintf("; %s were already in %s", c(s.AlreadyWritten), output)
	}
	return msg + fmt.Sprintf("; this run wrote %s, added %s tasks and found %s from earlier runs", c(s.Written), c(s.Submitted), c(s.Reused))
}
