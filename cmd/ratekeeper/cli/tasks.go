package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/poll"
	"github.com/ratekeeper/ratekeeper/tasks"
)

func init() { register(newTasksCmd) }

// tasksDB is the --db flag shared by the tasks subcommands.
type tasksDB struct {
	dsn    string
	outage time.Duration // --db-outage-timeout
}

// open opens the task database, mapping failures to exit status 1.
func (d *tasksDB) open(ctx context.Context, opts tasks.Options) (*tasks.Queue, error) {
	opts.DBOutageTimeout = outageTimeout(d.outage)
	q, err := tasks.Open(ctx, d.dsn, opts)
	if err != nil {
		return nil, &ExitError{Code: 1, Err: err}
	}
	return q, nil
}

// tasksDamagedAdvice is what to do about a damaged --db, for the tasks
// commands.
const tasksDamagedAdvice = "its tasks cannot be trusted, so nothing was done. Restore it from a backup, or move it aside and submit the tasks again to a new database"

func newTasksCmd() *cobra.Command {
	db := &tasksDB{}
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "Durable tasks: submit, inspect, cancel and work them",
		Long: `Durable tasks live in a database (--db): a SQLite file by default, or a
PostgreSQL URL (postgres://…) shared by workers on many machines. A task that
meets a rate limit is rescheduled (a durable sleep): it goes back to pending
until quota returns, frees its worker, survives restarts, and counts
reschedules apart from retries. See 'ratekeeper tasks history ID'.

Built-in types: http (input {"url", "method", "headers", "body"}; result
{"status", "headers", "sha256", "body" or "body_file"}) and poll (input
{"url"}; one adaptive poll per run, see 'ratekeeper poll --durable'). Types a
Go program registers with tasks.Handle run in that program's workers; a task
waits, pending, until a worker that handles its type runs ('tasks list' says
so). Priorities go from 1 (first) to 4 (last), 2 by default; a task
rescheduled for a rate limit is raised one step.`,
	}
	cmd.PersistentFlags().StringVar(&db.dsn, "db", "./ratekeeper.db", "task database: a SQLite file path or a postgres:// URL")
	addOutageFlag(cmd.PersistentFlags(), &db.outage)
	cmd.AddCommand(
		newTasksSubmitCmd(db), newTasksGetCmd(db), newTasksHistoryCmd(db), newTasksListCmd(db),
		newTasksCancelCmd(db), newTasksWorkerCmd(db), newTasksMigrateCmd(db),
	)
	return adviseOnDamage(cmd, tasksDamagedAdvice)
}

// submitFlags are the flags of 'tasks submit'.
type submitFlags struct {
	typ, input, at, uniqueKey            string
	maxRetries, maxReschedules, priority int
	timeout                              time.Duration
	jsonl                                bool
}

func newTasksSubmitCmd(db *tasksDB) *cobra.Command {
	var o submitFlags
	cmd := &cobra.Command{
		Use:   "submit -t TYPE -i JSON [--jsonl] [--priority 1..4] [--max-retries N] [--max-reschedules N] [--timeout 300s] [--at RFC3339]",
		Short: "Add a task (or one per line) and print its id",
		Long: `Adds a task of type TYPE with input JSON (-i; "-" reads stdin, "@FILE" a file)
and prints its id. With --jsonl the input holds one JSON input per line (blank
lines ignored): one task each, added in one transaction, their ids printed one
a line in the same order. With --unique-key, submitting again while a task
with the same type and key exists (and has not failed or been cancelled)
prints that task's id and adds nothing.

--priority orders the work: 1 runs first, 4 last (default 2).

Everything is checked before anything is written: a malformed type name,
input that is not JSON (for http and poll, not a valid request), or a
negative limit exits with status 2. A type other than the built-in http and
poll is accepted with a note on stderr: it runs when a worker that handles
it (a Go program's, registered with tasks.Handle) works the database.`,
		Example: `  ratekeeper tasks submit -t http -i '{"url":"https://api.github.com/rate_limit"}'
  ratekeeper tasks submit -t http -i @req.json --priority 1 --max-reschedules 100 --timeout 60s
  ratekeeper tasks submit -t http --jsonl -i @requests.jsonl
  ratekeeper tasks submit -t poll -i '{"url":"https://api.github.com/repos/golang/go/events"}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSubmit(cmd, db, &o) },
	}
	f := cmd.Flags()
	f.StringVarP(&o.typ, "type", "t", "", "task type (required), e.g. http")
	f.StringVarP(&o.input, "input", "i", "{}", `task input: JSON, "-" for stdin, or "@FILE"`)
	f.BoolVar(&o.jsonl, "jsonl", false, "the input holds one task's input per line")
	f.IntVar(&o.maxRetries, "max-retries", tasks.DefaultMaxRetries, "retries after failed attempts before the task fails (0: none)")
	f.IntVar(&o.maxReschedules, "max-reschedules", -1, "reschedules before the task fails (-1: unlimited, 0: none)")
	f.DurationVar(&o.timeout, "timeout", tasks.DefaultTimeout, "limit of one attempt (0: none)")
	f.StringVar(&o.at, "at", "", "run no earlier than this time (RFC 3339)")
	f.StringVar(&o.uniqueKey, "unique-key", "", "make the submission idempotent: one live task per type and key")
	f.IntVar(&o.priority, "priority", tasks.DefaultPriority, "1 (runs first) to 4 (runs last)")
	return cmd
}

func runSubmit(cmd *cobra.Command, db *tasksDB, o *submitFlags) error {
	subs, err := o.submissions(cmd.InOrStdin())
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	q, err := db.open(cmd.Context(), tasks.Options{})
	if err != nil {
		return err
	}
	defer q.Close()
	res, err := q.SubmitMany(cmd.Context(), subs)
	if err != nil {
		return submitError(err)
	}
	added := 0
	var out strings.Builder
	for _, r := range res {
		if r.Duplicate {
			fmt.Fprintf(cmd.ErrOrStderr(), "task %d already exists with unique key %q; nothing added\n", r.ID, o.uniqueKey)
		} else {
			added++
		}
		fmt.Fprintln(&out, r.ID)
	}
	if added > 0 && !builtinType(o.typ) {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: %s is not a built-in type (%s): %s until a worker that handles it works %s\n",
			o.typ, strings.Join(builtinTypes(), ", "), taskWaits(res), q)
	}
	_, err = io.WriteString(cmd.OutOrStdout(), out.String())
	return err
}

func taskWaits(res []tasks.Submitted) string {
	if len(res) == 1 {
		return fmt.Sprintf("task %d waits", res[0].ID)
	}
	return fmt.Sprintf("its %d tasks wait", len(res))
}

// submissions reads and checks what to submit, before anything is
// written.
func (o *submitFlags) submissions(stdin io.Reader) ([]tasks.Submission, error) {
	if o.typ == "" {
		return nil, errors.New("-t/--type is required (see 'ratekeeper tasks submit --help')")
	}
	raw, err := readInput(stdin, o.input)
	if err != nil {
		return nil, fmt.Errorf("-i: %v", err)
	}
	opts, err := submitOptions(o.maxRetries, o.maxReschedules, o.timeout, o.at, o.uniqueKey)
	if err != nil {
		return nil, err
	}
	if o.priority < tasks.HighestPriority || o.priority > tasks.LowestPriority {
		return nil, fmt.Errorf("--priority %d: want %d (first) to %d (last)", o.priority, tasks.HighestPriority, tasks.LowestPriority)
	}
	opts.Priority = o.priority
	inputs, lineNos := []json.RawMessage{raw}, []int{0}
	if o.jsonl {
		if o.uniqueKey != "" {
			return nil, errors.New("--unique-key names one task; with --jsonl each line is a task: submit them one by one, or leave the key out")
		}
		inputs, lineNos = nil, nil
		n := 0
		for line := range strings.Lines(string(raw)) {
			n++
			if strings.TrimSpace(line) != "" {
				inputs, lineNos = append(inputs, json.RawMessage(line)), append(lineNos, n)
			}
		}
		if len(inputs) == 0 {
			return nil, errors.New("-i: no input lines (--jsonl wants one JSON input per line)")
		}
	}
	subs := make([]tasks.Submission, len(inputs))
	for i, in := range inputs {
		subs[i] = tasks.Submission{Type: o.typ, Input: in, Options: opts}
		err := tasks.Validate(subs[i])
		if err == nil && o.typ == poll.TaskType {
			err = poll.CheckTaskInput(in)
		}
		if err != nil && o.jsonl {
			return nil, fmt.Errorf("input line %d: %w; nothing was submitted", lineNos[i], err)
		}
		if err != nil {
			return nil, err
		}
	}
	return subs, nil
}

// builtinTypes are the task types 'tasks worker' runs: the tasks package's
// own and poll.
func builtinTypes() []string {
	return []string{tasks.HTTPType, poll.TaskType}
}

func builtinType(typ string) bool { return slices.Contains(builtinTypes(), typ) }

// readInput reads the -i value: JSON text, "-" for stdin or "@FILE".
func readInput(stdin io.Reader, v string) (json.RawMessage, error) {
	switch {
	case v == "-":
		b, err := io.ReadAll(stdin)
		return b, err
	case strings.HasPrefix(v, "@"):
		b, err := os.ReadFile(v[1:])
		return b, err
	}
	return json.RawMessage(v), nil
}

// submitOptions maps the command line's limits (where 0 means none) onto
// tasks.SubmitOptions (where 0 means the default).
func submitOptions(maxRetries, maxReschedules int, timeout time.Duration, at, uniqueKey string) (tasks.SubmitOptions, error) {
	var o tasks.SubmitOptions
	switch {
	case maxRetries < 0:
		return o, fmt.Errorf("--max-retries %d: want 0 or more", maxRetries)
	case maxRetries == 0:
		o.MaxRetries = tasks.NoRetries
	default:
		o.MaxRetries = maxRetries
	}
	switch {
	case maxReschedules < -1:
		return o, fmt.Errorf("--max-reschedules %d: want 0 or more, or -1 for unlimited", maxReschedules)
	case maxReschedules == -1:
		o.MaxReschedules = 0
	case maxReschedules == 0:
		o.MaxReschedules = tasks.NoReschedules
	default:
		o.MaxReschedules = maxReschedules
	}
	switch {
	case timeout < 0:
		return o, fmt.Errorf("--timeout %s: want a positive duration such as 300s, or 0 for none", timeout)
	case timeout == 0:
		o.Timeout = tasks.NoTimeout
	case timeout < time.Millisecond:
		return o, fmt.Errorf("--timeout %s: want at least 1ms, or 0 for none", timeout)
	default:
		o.Timeout = timeout
	}
	if at != "" {
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return o, fmt.Errorf("--at %q: want an RFC 3339 time such as 2026-01-01T00:00:00Z", at)
		}
		o.At = t
	}
	o.UniqueKey = uniqueKey
	return o, nil
}

func submitError(err error) error {
	if errors.Is(err, tasks.ErrInvalid) || errors.Is(err, tasks.ErrUnknownType) {
		return &ExitError{Code: 2, Err: err}
	}
	return &ExitError{Code: 1, Err: err}
}

// taskID parses a task id argument.
func taskID(arg string) (int64, error) {
	id, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || id <= 0 {
		return 0, exitf(2, "task id %q: want a positive number as printed by 'ratekeeper tasks submit'", arg)
	}
	return id, nil
}

// onTask is what get, history and cancel share: the ID argument parsed
// (exit status 2 when it is not one), the database opened for this one
// call, and a failed look-up (no such task included) mapped to exit status
// 1 with the error as is.
func onTask[T any](cmd *cobra.Command, db *tasksDB, arg string, look func(*tasks.Queue, context.Context, int64) (T, error)) (T, error) {
	var none T
	id, err := taskID(arg)
	if err != nil {
		return none, err
	}
	q, err := db.open(cmd.Context(), tasks.Options{})
	if err != nil {
		return none, err
	}
	defer q.Close()
	v, err := look(q, cmd.Context(), id)
	if err != nil {
		return none, &ExitError{Code: 1, Err: err}
	}
	return v, nil
}

// encodeLines writes one JSON object a line.
func encodeLines[T any](w io.Writer, vs []T) error {
	enc := json.NewEncoder(w)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return nil
}

func newTasksGetCmd(db *tasksDB) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get ID [--json]",
		Short: "Show a task: state, counts, limits, last error, result",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := onTask(cmd, db, args[0], (*tasks.Queue).Get)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(t)
			}
			return printTask(cmd.OutOrStdout(), t)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func printTask(w io.Writer, t *tasks.Task) error {
	maxResched := strconv.Itoa(t.MaxReschedules)
	switch t.MaxReschedules {
	case 0:
		maxResched = "unlimited"
	case tasks.NoReschedules:
		maxResched = "0"
	}
	timeout := t.Timeout.String()
	if t.Timeout == tasks.NoTimeout {
		timeout = "none"
	}
	fmt.Fprintf(w, "task %d (%s): %s, priority %d\n", t.ID, t.Type, t.State, t.Priority)
	if t.Waiting != "" {
		fmt.Fprintf(w, "  waiting: %s\n", t.Waiting)
	}
	fmt.Fprintf(w, "  attempt: %d, retry_count: %d, max_retries: %d\n", t.Attempt, t.RetryCount, t.MaxRetries)
	fmt.Fprintf(w, "  reschedule_count: %d, max_reschedules: %s\n", t.RescheduleCount, maxResched)
	if !t.State.Final() {
		fmt.Fprintf(w, "  available_at: %s\n", stamp(t.AvailableAt))
	}
	fmt.Fprintf(w, "  timeout: %s\n", timeout)
	fmt.Fprintf(w, "  created_at: %s, updated_at: %s\n", stamp(t.CreatedAt), stamp(t.UpdatedAt))
	if t.FinishedAt != nil {
		fmt.Fprintf(w, "  finished_at: %s\n", stamp(*t.FinishedAt))
	}
	if t.Worker != "" && t.WorkerGone != "" {
		fmt.Fprintf(w, "  worker: %s, gone: %s\n", t.Worker, t.WorkerGone)
	} else if t.Worker != "" {
		fmt.Fprintf(w, "  worker: %s\n", t.Worker)
	}
	if t.UniqueKey != "" {
		fmt.Fprintf(w, "  unique_key: %s\n", t.UniqueKey)
	}
	if t.LastError != "" {
		fmt.Fprintf(w, "  last_error: %s\n", t.LastError)
	}
	fmt.Fprintf(w, "  input: %s\n", t.Input)
	if t.Result != nil {
		fmt.Fprintf(w, "  result: %s\n", t.Result)
	}
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func newTasksHistoryCmd(db *tasksDB) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "history ID [--json]",
		Short: "Show every state change of a task, oldest first",
		Long: `Shows every state change of a task: created, claimed by worker W, rescheduled
+60s (count 2), retried after error E, completed, failed, cancelled. With
--json, one JSON object per line.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			events, err := onTask(cmd, db, args[0], (*tasks.Queue).History)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return encodeLines(out, events)
			}
			for _, e := range events {
				fmt.Fprintf(out, "%s  %s\n", stamp(e.At), e)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per event")
	return cmd
}

func newTasksListCmd(db *tasksDB) *cobra.Command {
	var (
		state, typ string
		limit      int
		after      int64
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "list [--state S] [--type T] [--limit N] [--after ID] [--json]",
		Short: "List tasks by increasing id",
		Long: `Lists tasks by increasing id. States: pending, running, completed, failed,
cancelled. Page with --after (the last id shown) and --limit. PRI is the
priority (1 runs first). NOTE says why a pending task that is due has not
started (no running worker handles its type), that a running task's worker is
gone (its process ended, or its heartbeat stopped: the next worker to start
takes the task back), or else the task's last error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := tasks.Filter{Type: typ, Limit: limit, AfterID: after}
			if state != "" {
				s, err := tasks.ParseState(state)
				if err != nil {
					return exitf(2, "--state: %v", err)
				}
				f.State = s
			}
			if limit < 1 || limit > 10_000 {
				return exitf(2, "--limit %d: want 1 to 10000", limit)
			}
			q, err := db.open(cmd.Context(), tasks.Options{})
			if err != nil {
				return err
			}
			defer q.Close()
			list, err := q.List(cmd.Context(), f)
			if err != nil {
				return &ExitError{Code: 1, Err: err}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return encodeLines(out, list)
			}
			if len(list) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no tasks match")
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTYPE\tSTATE\tPRI\tATTEMPT\tRETRIES\tRESCHEDULES\tAVAILABLE_AT\tNOTE")
			for _, t := range list {
				avail := "-"
				if !t.State.Final() {
					avail = stamp(t.AvailableAt)
				}
				note := t.Waiting
				if t.WorkerGone != "" {
					note = fmt.Sprintf("worker %s is gone (%s): the next worker to start takes it back", t.Worker, t.WorkerGone)
				}
				if note == "" && t.LastError != "" {
					note = "last error: " + t.LastError
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d/%d\t%d\t%s\t%s\n", t.ID, t.Type, t.State, t.Priority, t.Attempt,
					t.RetryCount, t.MaxRetries, t.RescheduleCount, avail, oneLine(note, 80))
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "only tasks in this state: pending, running, completed, failed, cancelled")
	f.StringVar(&typ, "type", "", "only tasks of this type")
	f.IntVar(&limit, "limit", 100, "most tasks to list (1 to 10000)")
	f.Int64Var(&after, "after", 0, "only tasks with a larger id")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per task")
	return cmd
}

// oneLine shortens s to one line of at most n runes.
func oneLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

func newTasksCancelCmd(db *tasksDB) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a task",
		Long: `Cancels a task. A pending task is cancelled at once, and so is a running one
whose worker is gone (see 'tasks list'); another running one when its attempt
stops (its handler is told at once on PostgreSQL, within a second on SQLite).
Exit status 1 if the task does not exist or already finished.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := onTask(cmd, db, args[0], (*tasks.Queue).Cancel)
			if err != nil {
				return err
			}
			if t.State == tasks.StateRunning {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "task %d: cancel requested; it stops when its running attempt does\n", t.ID)
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "task %d cancelled\n", t.ID)
			return err
		},
	}
}

func newTasksMigrateCmd(db *tasksDB) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create or update the task tables (other tasks commands do it too)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := tasks.Migrate(cmd.Context(), db.dsn)
			if err != nil {
				return &ExitError{Code: 1, Err: err}
			}
			out := cmd.OutOrStdout()
			for _, part := range []struct {
				name     string
				versions []int
			}{{"river", res.River}, {"ratekeeper tasks", res.Tasks}} {
				if len(part.versions) == 0 {
					fmt.Fprintf(out, "%s: up to date\n", part.name)
					continue
				}
				fmt.Fprintf(out, "%s: applied %s\n", part.name, versionList(part.versions))
			}
			return nil
		},
	}
}

func versionList(vs []int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.Itoa(v)
	}
	return "version " + strings.Join(s, ", ")
}
