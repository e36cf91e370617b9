package fetch

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/ratekeeper/ratekeeper/tasks"
	"github.com/ratekeeper/ratekeeper/transport"
)

// Snapshot is the state of a batch at one moment: what progress displays
// show.
type Snapshot struct {
	At time.Time
	// Total counts the distinct URLs of the batch; Done those with a record
	// in the output (written by this run or an earlier one), Failed the
	// failures among them.
	Total, Done, Failed int
	// Running counts the batch's tasks claimed by a worker; Elsewhere those
	// of them claimed by another worker (another process, or one that was
	// killed: River's rescuer returns those to pending).
	Running, Elsewhere int
	// Ready counts pending tasks that may run now; Sleeping those waiting
	// for a later time (a reschedule until quota returns, or the backoff
	// after a failed attempt), the first of which wakes at NextAt.
	Ready, Sleeping int
	NextAt          time.Time
	// Rate is URLs finished per second during this run; ETA the time left
	// at that rate (0 when unknown).
	Rate float64
	ETA  time.Duration
	// Credentials are the rate-keeping client's credentials and buckets.
	Credentials []transport.CredentialStatus
}

// Reporter shows a batch's progress. Run calls Update after each look at
// the tasks and Finish once at the end, from one goroutine.
type Reporter interface {
	Update(s Snapshot)
	Finish(s Snapshot)
}

// FormatSummary renders the one-line state of a batch, e.g.
// "120/1,200 URLs done (3 failed), 8 running, 1,072 ready, 23.5 URLs/s, ETA 46s".
func FormatSummary(s Snapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s %s done", humanize.Comma(int64(s.Done)), humanize.Comma(int64(s.Total)), plural(s.Total, "URL", "URLs"))
	if s.Failed > 0 {
		fmt.Fprintf(&b, " (%s failed)", humanize.Comma(int64(s.Failed)))
	}
	if s.Running > 0 {
		fmt.Fprintf(&b, ", %s running", humanize.Comma(int64(s.Running)))
		if s.Elsewhere > 0 {
			fmt.Fprintf(&b, " (%s by other or killed workers)", humanize.Comma(int64(s.Elsewhere)))
		}
	}
	if s.Ready > 0 {
		fmt.Fprintf(&b, ", %s ready", humanize.Comma(int64(s.Ready)))
	}
	if s.Sleeping > 0 {
		fmt.Fprintf(&b, ", %s sleeping", humanize.Comma(int64(s.Sleeping)))
		if !s.NextAt.IsZero() {
			fmt.Fprintf(&b, " (next in %s)", tasks.HumanDuration(s.NextAt.Sub(s.At).Round(time.Second)))
		}
	}
	if s.Rate > 0 {
		fmt.Fprintf(&b, ", %.1f URLs/s", s.Rate)
	}
	if s.ETA >= time.Second && s.Done < s.Total {
		fmt.Fprintf(&b, ", ETA %s", tasks.HumanDuration(s.ETA.Round(time.Second)))
	}
	return b.String()
}

// FormatCredential renders one credential's state, e.g.
// "github #1 to…-1: available, core 4,880/5,000 (resets in 52m)".
func FormatCredential(c transport.CredentialStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s", c.Provider, c.Credential, c.State)
	if c.Reason != "" {
		fmt.Fprintf(&b, " (%s)", c.Reason)
	}
	for _, r := range c.Resources {
		if r.Remaining == nil || r.Limit == nil {
			continue
		}
		fmt.Fprintf(&b, ", %s %s/%s", r.Resource, humanize.Comma(*r.Remaining), humanize.Comma(*r.Limit))
		if r.Assumed {
			b.WriteString(" assumed")
		}
		if r.ResetsIn != nil && *r.ResetsIn > 0 {
			fmt.Fprintf(&b, " (resets in %s)", tasks.HumanDuration(time.Duration(*r.ResetsIn*float64(time.Second)).Round(time.Second)))
		}
	}
	return b.String()
}

// Lines is the Reporter for logs and pipes: every Every (and at the end)
// it writes the summary and one line per credential, each prefixed
// "fetch: ".
type Lines struct {
	W     io.Writer
	Every time.Duration
	last  time.Time
	shown string // the last block written
}

// Update implements Reporter.
func (l *Lines) Update(s Snapshot) {
	if !l.last.IsZero() && s.At.Sub(l.last) < l.Every {
		return
	}
	l.print(s)
}

// Finish implements Reporter: it writes the final state unless the last
// block already said it. A zero Snapshot writes nothing.
func (l *Lines) Finish(s Snapshot) {
	if s.Total > 0 {
		l.print(s)
	}
}

func (l *Lines) print(s Snapshot) {
	l.last = s.At
	var b strings.Builder
	b.WriteString("fetch: " + FormatSummary(s) + "\n")
	for _, c := range s.Credentials {
		b.WriteString("fetch:   " + FormatCredential(c) + "\n")
	}
	if b.String() == l.shown {
		return
	}
	l.shown = b.String()
	_, _ = io.WriteString(l.W, l.shown)
}

// Bars is the Reporter for terminals: an overall bar with the rate and ETA,
// and a line per credential, redrawn in place. Text written to Writer
// appears above the bars.
type Bars struct {
	p       *mpb.Progress
	overall *mpb.Bar
	status  atomic.Pointer[string]

	mu    sync.Mutex
	creds map[string]*credLine // by provider and masked credential
}

type credLine struct {
	bar  *mpb.Bar
	text atomic.Pointer[string]
}

// NewBars returns a Reporter drawing on w, a terminal. Call Finish to stop
// it, even when nothing was drawn.
func NewBars(w io.Writer) *Bars {
	b := &Bars{creds: map[string]*credLine{}}
	empty := ""
	b.status.Store(&empty)
	b.p = mpb.New(mpb.WithOutput(w), mpb.WithAutoRefresh(), mpb.WithWidth(40), mpb.WithRefreshRate(200*time.Millisecond))
	return b
}

// Writer returns a writer whose text appears above the bars.
func (b *Bars) Writer() io.Writer { return b.p }

// Update implements Reporter.
func (b *Bars) Update(s Snapshot) {
	status := barStatus(s)
	b.status.Store(&status)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.overall == nil {
		b.overall = b.p.AddBar(int64(s.Total),
			mpb.PrependDecorators(decor.Name("fetch "), decor.CountersNoUnit("%d/%d URLs")),
			mpb.AppendDecorators(decor.Percentage(decor.WC{W: 5}), decor.Any(func(decor.Statistics) string { return *b.status.Load() })),
		)
	}
	b.overall.SetCurrent(int64(s.Done))
	for _, c := range s.Credentials {
		key := c.Provider + " " + c.Credential
		line := b.creds[key]
		if line == nil {
			line = &credLine{}
			line.text.Store(new(string))
			line.bar = b.p.New(0, mpb.NopStyle(), mpb.PrependDecorators(decor.Any(func(decor.Statistics) string {
				return "  " + *line.text.Load()
			})))
			b.creds[key] = line
		}
		text := FormatCredential(c)
		line.text.Store(&text)
	}
}

// barStatus is the text after the overall bar.
func barStatus(s Snapshot) string {
	var parts []string
	if s.Failed > 0 {
		parts = append(parts, humanize.Comma(int64(s.Failed))+" failed")
	}
	if s.Sleeping > 0 {
		p := humanize.Comma(int64(s.Sleeping)) + " sleeping"
		if !s.NextAt.IsZero() {
			p += " (next in " + tasks.HumanDuration(s.NextAt.Sub(s.At).Round(time.Second)) + ")"
		}
		parts = append(parts, p)
	}
	if s.Rate > 0 {
		parts = append(parts, fmt.Sprintf("%.1f/s", s.Rate))
	}
	if s.ETA >= time.Second && s.Done < s.Total {
		parts = append(parts, "ETA "+tasks.HumanDuration(s.ETA.Round(time.Second)))
	}
	return " " + strings.Join(parts, " · ")
}

// Finish implements Reporter: it draws the last state and stops drawing. A
// zero Snapshot just stops.
func (b *Bars) Finish(s Snapshot) {
	if s.Total > 0 {
		b.Update(s)
	}
	b.mu.Lock()
	if b.overall != nil && s.Done < s.Total {
		b.overall.Abort(false)
	}
	for _, line := range b.creds {
		line.bar.SetTotal(0, true)
	}
	b.mu.Unlock()
	b.p.Wait()
}
