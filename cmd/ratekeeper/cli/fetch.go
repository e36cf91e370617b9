package cli

import (
	"cmp"
	"context"
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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/fetch"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/sqlite"
	"github.com/ratekeeper/ratekeeper/tasks"
	"github.com/ratekeeper/ratekeeper/transport"
)

func init() { register(newFetchCmd) }

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
	priority      int
	retryFailed   bool
	since         string
	paginate      bool
	metrics       metricsFlags
}

func newFetchCmd() *cobra.Command {
	var o fetchOptions
	cmd := &cobra.Command{
		Use:   "fetch [-i FILE | URL…] [-o results.jsonl] [--db DSN] [--concurrency N] [--policy P] [--provider NAME=BASEURL…] [--paginate] [--readme] [--since previous.jsonl]",
		Short: "Fetch a batch of URLs or requests through the rate-keeping client, resumably",
		Long: `fetch sends each request as a durable http task in --db and writes one
JSON line per request: url, status, etag, from_cache, attempts, reschedules,
credential (masked), sha256, size, body (small UTF-8 bodies) or body_file,
error (when the request failed), task_id, and in a re-sync not_modified; id
and method for a JSON line's request (below).

Requests come from the arguments or from -i FILE ("-i -" reads stdin), one a
line; blank lines and # comments are ignored. A line is a URL (a GET), or,
when it starts with {, a request in JSON (JSON Lines):
  {"url": "https://…", "method": "POST", "headers": {"Name": "value"}, "body": …, "id": "k1"}
method defaults to GET; a body that is a JSON string is sent as that text,
any other JSON value as application/json; id (a string or a number) is
echoed in the output and is the request's key, else the key is the method,
URL and a digest of the body. A request that is not idempotent (POST, PATCH)
and has no Idempotency-Key header is sent at most once: if an attempt may
have reached the server (it was running at a crash or a shutdown, even if
still waiting for quota; its connection broke), it is not sent again and
its line says "unknown_outcome": true (--retry-failed sends it again, on
your word). A GraphQL query (POST …/graphql that
is not a mutation) is a read and may be sent again. Every line is checked
before anything is submitted; a bad one is named with its number, and
nothing is submitted.

--paginate follows each request's pages, as gh api --paginate does: the Link
header's rel="next" (GitHub, GitLab, Gitea), else GitLab's X-Next-Page; for a
GraphQL query that declares $endCursor, the answer's first pageInfo
{hasNextPage endCursor}, the next page being the same query with
variables.endCursor set. Each page is a line of its own with "page" (from 1)
and "next" (the next page's url or cursor, absent on the last); pages of
different requests are fetched side by side. A next page on another host is
not followed (the line says so as its error): no credential goes there.
Killed mid-listing, the same command goes on at the page it reached.

With --readme the lines are repository pages (github.com/o/r,
gitlab.com/g/p, huggingface.co/o/m, codeberg.org/o/r, or a configured
self-hosted web root) and fetch gets each one's README through the provider's
API; the output's url is the repository as given.

Resumable: kill it at any moment and run the same command again. URLs already
in the -o file are skipped, tasks of the killed run are found again (their
unique key is the request), finished ones are written without being fetched
again, and each URL is in the file exactly once. --retry-failed fetches again
the URLs whose outcome was a failure (an error, or a final status other than
2xx); each gets a new line after its old one, and a URL's last line is its
outcome. The tasks a killed run of the same -o file was running are taken
back at once: its lock on the file proves that run is gone. Without -o
results go to stdout, each URL once per run, and a killed run's tasks come
back after --timeout plus a grace period (River's rescuer).

Re-syncs: --since FILE takes a previous run's output. Each URL whose answer
there had an etag and a body (inline or body_file) is sent conditional on it:
unchanged, the server answers 304 (free on GitHub) and the URL's line repeats
the previous answer — same status, etag, sha256, body or body_file — with
"not_modified": true; changed, the line is the new answer. On GitHub the
validator goes as the tag GitHub gives the token sent now, computed from the
previous body, so tokens rotated since (App installations) cost nothing. A
body that is gone or no longer matches its sha256 is fetched afresh. Write the
re-sync to another -o; the summary says how many were unchanged.

Only an answer of the server (any status) or a network failure that
outlasted --retries is written as a URL's outcome. --db is checked first
(SQLite's quick_check) and a damaged database is refused.

A request that would wait longer than --max-wait for quota is rescheduled in
the database until quota returns (a durable sleep, counted in "reschedules")
and its worker takes other work; --timeout bounds one attempt and must exceed
--max-wait. --priority (1 first, 4 last, default 2) places the batch's tasks
among other work in the same database.

Progress goes to stderr: bars when it is a terminal, otherwise a line every
--progress-every. The exit status is 1 when some URLs finally failed (an error,
or a final status other than 2xx) or when a fault on this machine stopped the
run (a damaged --db, a full disk: the URLs it hit are not written, and the same
command resumes once it is fixed), 2 for bad input (nothing is submitted), and
128 + the signal when stopped by one (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP):
running requests get a few seconds to finish and the same command resumes.`,
		Example: `  ratekeeper fetch -i urls.txt -o results.jsonl
  ratekeeper fetch -i requests.jsonl -o results.jsonl --paginate
  ratekeeper fetch --readme -i repos.txt -o readmes.jsonl --concurrency 20
  cat urls.txt | ratekeeper fetch -i - --db postgres://rk@db/ratekeeper > results.jsonl
  ratekeeper fetch -i urls.txt --since yesterday.jsonl -o today.jsonl`,
		RunE: func(cmd *cobra.Command, args []string) error { return runFetch(cmd, &o, args) },
	}
	o.client.add(cmd)
	o.client.durable(cmd)
	if f := cmd.Flags().Lookup("db"); f != nil {
		f.Usage = "database of the tasks and the shared quota state: a SQLite file, or postgres://… for a fleet"
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.input, "input", "i", "", `file of URLs, one a line ("-" for stdin)`)
	fl.StringVarP(&o.output, "output", "o", "", "results file (JSON lines), appended and resumed; default stdout")
	fl.BoolVar(&o.readme, "readme", false, "input lines are repository web URLs; fetch each one's README")
	fl.IntVar(&o.concurrency, "concurrency", fetch.DefaultConcurrency, "requests in flight at once in this process")
	fl.DurationVar(&o.timeout, "timeout", fetch.DefaultTimeout, "limit of one attempt (quota wait, request and its retries); must exceed --max-wait")
	fl.IntVar(&o.retries, "retries", tasks.DefaultMaxRetries, "failed attempts retried (with backoff) before a URL fails; 0 for none")
	fl.StringVar(&o.bodyDir, "body-dir", "", "directory for bodies too big to go inline (default ratekeeper-bodies beside -o, or here)")
	fl.Int64Var(&o.inlineLimit, "inline-limit", 64<<10, "largest UTF-8 body written inline, in bytes")
	fl.StringVar(&o.progress, "progress", "auto", "progress on stderr: auto, bars, lines or off")
	fl.DurationVar(&o.progressEvery, "progress-every", 10*time.Second, "interval of progress lines")
	fl.IntVar(&o.priority, "priority", tasks.DefaultPriority, "priority of the batch's tasks: 1 (runs first) to 4 (runs last)")
	fl.BoolVar(&o.retryFailed, "retry-failed", false, "fetch again the URLs whose outcome was a failure")
	fl.StringVar(&o.since, "since", "", "a previous run's output: revalidate its answers, paying only for what changed")
	fl.BoolVar(&o.paginate, "paginate", false, "follow each request's next pages (Link rel=next, X-Next-Page, GraphQL pageInfo); a line per page")
	o.metrics.add(cmd)
	return adviseOnDamage(cmd, fetchDamagedAdvice)
}

func runFetch(cmd *cobra.Command, o *fetchOptions, args []string) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	entries, source, err := o.entries(cmd.InOrStdin(), args)
	if err != nil {
		return err
	}

	reporter, logTo := o.reporter(stdout, stderr)
	started := false
	defer func() {
		if !started && reporter != nil {
			reporter.Finish(fetch.Snapshot{})
		}
	}()
	reg := prometheus.NewRegistry()
	tr, err := o.client.taskTransport(logTo, reg)
	if err != nil {
		return err
	}
	defer tr.Close()
	stopMetrics, err := o.metrics.serve(cmd.Context(), reg, func(ctx context.Context) error { return tr.Ready(ctx) }, logTo)
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	defer stopMetrics()
	targets, err := o.plan(entries, source, tr)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	out, err := o.openOutput(stdout)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	defer out.Close()
	if j, ok := out.(*fetch.Journal); ok && j.Truncated > 0 {
		fmt.Fprintf(logTo, "ratekeeper: %s ended with a torn line (%d bytes, left by an interrupted run); cut it off, its URL will be written again\n", o.output, j.Truncated)
	}

	started = true
	sum, err := fetch.Run(cmd.Context(), targets, o.runOptions(targets, tr, out, reporter, reg, logTo))
	if o.progress != "off" {
		fmt.Fprintln(stderr, "ratekeeper fetch:", describeSummary(sum, out.Name()))
	}
	return o.outcome(cmd.Context(), sum, err, out.Name())
}

// entries checks the flags and reads the input lines; every problem is an
// input error (exit status 2), found before anything is submitted.
func (o *fetchOptions) entries(stdin io.Reader, args []string) ([]fetch.Entry, string, error) {
	if err := o.check(args); err != nil {
		return nil, "", &ExitError{Code: 2, Err: err}
	}
	entries, source, err := o.readEntries(stdin, args)
	if err != nil {
		return nil, "", &ExitError{Code: 2, Err: err}
	}
	if o.since != "" && sameFile(o.since, o.output) {
		return nil, "", exitf(2, "--since %s is the output too: write the re-sync to another -o (its URLs are already written there)", o.since)
	}
	return entries, source, nil
}

// plan makes the targets of the entries, conditional on the answers of
// --since when given.
func (o *fetchOptions) plan(entries []fetch.Entry, source string, tr *transport.Transport) ([]fetch.Target, error) {
	targets, err := fetch.Plan(entries, source, o.readme, tr.Registry())
	if err != nil {
		return nil, err
	}
	if o.since != "" {
		prev, err := fetch.ReadPreviousFile(o.since)
		if err != nil {
			return nil, err
		}
		fetch.Resync(targets, prev)
	}
	return targets, nil
}

// runOptions are the options of the run: the flags, and the providers
// the targets go to, whose credentials the progress display shows.
func (o *fetchOptions) runOptions(targets []fetch.Target, tr *transport.Transport, out fetch.Output, reporter fetch.Reporter, reg *prometheus.Registry, logTo io.Writer) fetch.Options {
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
	return fetch.Options{
		DSN:             o.client.db,
		DBOutageTimeout: outageTimeout(o.client.dbOutage),
		Client:          &http.Client{Transport: tr},
		Output:          out,
		Concurrency:     o.concurrency,
		MaxWait:         o.client.maxWait,
		Timeout:         o.timeout,
		MaxRetries:      retries,
		BodyDir:         o.bodyDirectory(),
		InlineBodyLimit: o.inlineLimit,
		Status:          tr.Status,
		Providers:       providers,
		Progress:        reporter,
		Priority:        o.priority,
		RetryFailed:     o.retryFailed,
		Paginate:        o.paginate,
		Registerer:      reg,
		WireMarked:      true,
		Logger:          slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// outcome is the command's result for a finished run: its exit status
// (see the command's help) with what to do, or nil when every URL
// succeeded.
func (o *fetchOptions) outcome(ctx context.Context, sum fetch.Summary, err error, output string) error {
	switch {
	case errors.Is(err, fetch.ErrInterrupted):
		return exitf(interruptedCode(ctx), "%v", err)
	case errors.Is(err, tasks.ErrInvalid):
		// Options the flags' checks let through: nothing was submitted.
		return &ExitError{Code: 2, Err: err}
	case err != nil:
		return &ExitError{Code: 1, Err: describeLocalFault(err, o.client.db)}
	case sum.Failed > 0:
		return exitf(1, "%s of %s failed; see %s", humanize.Comma(int64(sum.Failed)), countOf(sum.Total, "URL"), output)
	}
	return nil
}

// fetchDamagedAdvice is what to do about a damaged --db, for fetch: the
// output file, not the database, says which URLs are done.
const fetchDamagedAdvice = "its tasks and quota state cannot be trusted, so nothing was run. Move it aside (or restore it from a backup) and run the same command again: a new database is made, and URLs already in -o are not fetched again"

// describeLocalFault adds what to do to an error that stopped a run.
func describeLocalFault(err error, db string) error {
	if sqlite.IsDamaged(err) {
		return fmt.Errorf("%w\n--db %s is damaged: move it aside (or restore it from a backup) and run the same command again; URLs already in the output are not fetched again", err, db)
	}
	return err
}

// check validates the flags that need no I/O.
func (o *fetchOptions) check(args []string) error {
	switch {
	case o.input != "" && len(args) > 0:
		return errors.New("give URLs as arguments or with -i FILE, not both")
	case o.input == "" && len(args) == 0:
		return errors.New("no URLs: give them as arguments, or one a line with -i FILE (-i - for stdin)")
	case o.paginate && o.since != "":
		return errors.New("--paginate and --since together: a re-sync revalidates single answers, not listings; give one of them")
	case o.paginate && o.readme:
		return errors.New("--paginate and --readme together: a README has no pages; give one of them")
	case store.KindOf(o.client.db) == store.Memory:
		return fmt.Errorf("--db %s: fetch keeps its tasks in a database so that it can resume; give a SQLite file or a postgres:// URL", cmp.Or(o.client.db, `""`))
	case o.concurrency < 1 || o.concurrency > tasks.ConcurrencyLimit:
		return fmt.Errorf("--concurrency %d: want 1 to %s (requests in flight at once in this process)", o.concurrency, humanize.Comma(tasks.ConcurrencyLimit))
	case o.retries < 0 || o.retries > tasks.RetriesLimit:
		return fmt.Errorf("--retries %d: want 0 to %s", o.retries, humanize.Comma(tasks.RetriesLimit))
	case o.inlineLimit < 0:
		return fmt.Errorf("--inline-limit %d: want 0 or more bytes", o.inlineLimit)
	case o.timeout < time.Millisecond:
		return fmt.Errorf("--timeout %v: want a duration of 1ms or more, such as 2m", o.timeout)
	case o.client.maxWait > 0 && o.timeout <= o.client.maxWait:
		return fmt.Errorf("--timeout %v must exceed --max-wait %v: an attempt waits up to --max-wait for quota before it is rescheduled, then needs time for the request", o.timeout, o.client.maxWait)
	case o.progressEvery <= 0:
		return fmt.Errorf("--progress-every %v: want a positive duration such as 10s", o.progressEvery)
	case o.priority < tasks.HighestPriority || o.priority > tasks.LowestPriority:
		return fmt.Errorf("--priority %d: want %d (first) to %d (last)", o.priority, tasks.HighestPriority, tasks.LowestPriority)
	}
	if err := o.metrics.check(); err != nil {
		return err
	}
	switch o.progress {
	case "auto", "bars", "lines", "off":
	default:
		return fmt.Errorf("--progress %q: want auto, bars, lines or off", o.progress)
	}
	return nil
}

// readEntries reads the URLs from the arguments, stdin or the -i file.
func (o *fetchOptions) readEntries(stdin io.Reader, args []string) ([]fetch.Entry, string, error) {
	if o.input == "" {
		return fetch.ArgEntries(args), "arguments", nil
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
	entries, err := fetch.ReadEntries(r)
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
func (o *fetchOptions) reporter(stdout, stderr io.Writer) (fetch.Reporter, io.Writer) {
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
		b := fetch.NewBars(stderr)
		return b, b.Writer()
	case "lines":
		return &fetch.Lines{W: stderr, Every: o.progressEvery}, stderr
	}
	return nil, stderr
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func (o *fetchOptions) openOutput(stdout io.Writer) (fetch.Output, error) {
	if o.output == "" || o.output == "-" {
		return fetch.NewStream(stdout, "stdout"), nil
	}
	return fetch.OpenJournal(o.output)
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
func describeSummary(s fetch.Summary, output string) string {
	c := func(n int) string { return humanize.Comma(int64(n)) }
	msg := fmt.Sprintf("%s, %s done (%s failed)", countOf(s.Total, "URL"), c(s.AlreadyWritten+s.Written), c(s.Failed))
	if s.AlreadyWritten > 0 {
		msg += fmt.Sprintf("; %s already in %s", c(s.AlreadyWritten), output)
	}
	msg += fmt.Sprintf("; this run wrote %s, added %s and found %s from earlier runs", c(s.Written), countOf(s.Submitted, "task"), c(s.Reused))
	if s.Reclaimed > 0 {
		msg += fmt.Sprintf(", taking back at once %s a killed run had left running", countOf(s.Reclaimed, "task"))
	}
	if s.Unchanged > 0 {
		msg += fmt.Sprintf("; %s unchanged since the previous run, answered 304: %s not downloaded again (and not charged, on GitHub)",
			c(s.Unchanged), humanize.IBytes(uint64(s.UnchangedBytes)))
	}
	return msg
}

// sameFile reports whether paths a and b name one existing file.
func sameFile(a, b string) bool {
	if b == "" || b == "-" {
		return false
	}
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// countOf says n things: "1 URL", "1,200 URLs".
func countOf(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return humanize.Comma(int64(n)) + " " + thing + "s"
}
