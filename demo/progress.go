package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/cwriter"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/transport"
)

// Snapshot is the state of a run at one moment: the batch's progress and
// every token's bucket as the client knows it.
type Snapshot struct {
	Elapsed time.Duration
	// Window is the length of the simulated API's windows.
	Window                    time.Duration
	Total, Done, Failed       int
	Revalidated, Fresh, Waits int
	Tokens                    []TokenLine
}

// TokenLine is one token as the client sees it.
type TokenLine struct {
	Index  int    // position, from 1
	Masked string // e.g. "#1 …0001"
	Owner  string // the owner's login once checked; "" before, or when rejected
	// State is the credential's state: unknown, available, exhausted or
	// invalid; Reason says why it is invalid.
	State  string
	Reason string
	// Remaining and Limit of the token's core bucket, -1 when unknown;
	// ResetsIn is the time to its reset.
	Remaining, Limit int64
	ResetsIn         time.Duration
	// Answered counts the batch's answers sent with this token.
	Answered int
	// SharedWith lists the other tokens of the same owner.
	SharedWith []int
}

// statusView builds snapshots from the transport's status, which it reads
// from memory without sending anything.
type statusView struct {
	t     *transport.Transport
	sc    Scenario
	r     *recorder
	jobs  int
	start time.Time
}

// coreResource is the bucket every GET of the batch spends from.
const coreResource = "core"

func (v *statusView) snapshot(now time.Time) Snapshot {
	done, failed, revalidated, fresh, waits := v.r.progressCounts()
	s := Snapshot{Elapsed: now.Sub(v.start), Window: v.sc.Window, Total: v.jobs, Done: done, Failed: failed, Revalidated: revalidated, Fresh: fresh, Waits: waits}
	answered := v.r.answeredBy()
	pool, err := v.t.Pool(APIName)
	if err != nil {
		return s
	}
	status, err := v.t.Status(context.Background(), now, APIName)
	if err != nil {
		return s
	}
	cs := pool.Credentials()
	for i, st := range status {
		line := TokenLine{Index: i + 1, Masked: st.Credential, State: st.State, Reason: st.Reason, Remaining: -1, Limit: -1}
		if i < len(cs) && st.State != creds.Invalid.String() {
			line.Owner = cs[i].Owner().Name
		}
		for _, rs := range st.Resources {
			if rs.Resource != coreResource {
				continue
			}
			if rs.Remaining != nil {
				line.Remaining = *rs.Remaining
			}
			if rs.Limit != nil {
				line.Limit = *rs.Limit
			}
			if rs.ResetsIn != nil {
				line.ResetsIn = time.Duration(*rs.ResetsIn * float64(time.Second))
			}
		}
		line.Answered = answered[st.Credential]
		s.Tokens = append(s.Tokens, line)
	}
	for i := range s.Tokens {
		for j := range s.Tokens {
			if i != j && s.Tokens[i].Owner != "" && s.Tokens[i].Owner == s.Tokens[j].Owner {
				s.Tokens[i].SharedWith = append(s.Tokens[i].SharedWith, s.Tokens[j].Index)
			}
		}
	}
	return s
}

// ownerOf returns the owner's login of a masked credential, or the masked
// credential itself when its owner is unknown.
func (v *statusView) ownerOf(masked string) string {
	pool, err := v.t.Pool(APIName)
	if err != nil {
		return masked
	}
	for _, c := range pool.Credentials() {
		if c.Masked() == masked {
			if o := c.Owner(); o.Key() != "" {
				return o.Key()
			}
		}
	}
	return masked
}

// ETA estimates the time left from the average pace so far; ok is false
// before the first job is done.
func ETA(elapsed time.Duration, done, total int) (left time.Duration, ok bool) {
	if done <= 0 {
		return 0, false
	}
	if done >= total {
		return 0, true
	}
	return time.Duration(float64(elapsed) * float64(total-done) / float64(done)), true
}

// PlainLine is one line of progress for a log or a pipe: the batch, then
// each owner's bucket (tokens of one owner together) and rejected tokens.
//
//	[  4.0s] 231/1000 GETs (23%), ETA 13s · #1+#2 alice 0/100, resets in 6s · #3 bob 12/100 · #5 rejected
func PlainLine(s Snapshot) string {
	var b strings.Builder
	pct := 0
	if s.Total > 0 {
		pct = (s.Done + s.Failed) * 100 / s.Total
	}
	fmt.Fprintf(&b, "[%6.1fs] %d/%d GETs (%d%%)", s.Elapsed.Seconds(), s.Done+s.Failed, s.Total, pct)
	if s.Failed > 0 {
		fmt.Fprintf(&b, ", %d failed", s.Failed)
	}
	if left, ok := BatchETA(s); ok && s.Done+s.Failed < s.Total {
		fmt.Fprintf(&b, ", ETA %s", roundDuration(left))
	}
	shown := map[int]bool{}
	for _, t := range s.Tokens {
		if shown[t.Index] {
			continue
		}
		b.WriteString(" · ")
		ids := []string{fmt.Sprintf("#%d", t.Index)}
		for _, o := range t.SharedWith {
			shown[o] = true
			ids = append(ids, fmt.Sprintf("#%d", o))
		}
		b.WriteString(strings.Join(ids, "+"))
		switch {
		case t.State == creds.Invalid.String():
			b.WriteString(" rejected")
		case t.Owner == "":
			b.WriteString(" unchecked")
		default:
			b.WriteString(" " + t.Owner + " " + quotaText(t, ""))
		}
	}
	return b.String()
}

// quotaText is "37/100" or "0/100, resets in 6s"; left adds the word
// after the numbers: "0/100 left, resets in 6s".
func quotaText(t TokenLine, left string) string {
	if t.Remaining < 0 || t.Limit < 0 {
		return "quota not known yet"
	}
	s := fmt.Sprintf("%d/%d%s", t.Remaining, t.Limit, left)
	if t.Remaining == 0 {
		s += ", resets in " + roundDuration(t.ResetsIn)
	}
	return s
}

// TokenText is a token's line under the progress bar.
//
//	#1 …0001  alice  answered 212  core 37/100 left  ok  (one bucket with #2)
func TokenText(t TokenLine) string {
	if t.State == creds.Invalid.String() {
		reason := t.Reason
		if reason == "" {
			reason = "rejected by the server"
		}
		return fmt.Sprintf("%-10s rejected: %s; not used", t.Masked, reason)
	}
	if t.Owner == "" {
		return fmt.Sprintf("%-10s not checked yet", t.Masked)
	}
	state := "ok"
	switch {
	case t.Remaining == 0:
		state = "waiting for the reset"
	case t.Limit > 0 && t.Remaining*5 < t.Limit:
		state = "low"
	}
	s := fmt.Sprintf("%-10s %-6s answered %-4d core %s  %s", t.Masked, t.Owner, t.Answered, quotaText(t, " left"), state)
	if len(t.SharedWith) > 0 {
		var ids []string
		for _, o := range t.SharedWith {
			ids = append(ids, fmt.Sprintf("#%d", o))
		}
		s += "  (one bucket with " + strings.Join(ids, ", ") + ")"
	}
	return s
}

// roundDuration shows durations the way people read them: 6s, 1.2s, 350ms.
func roundDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// IsTerminal reports whether w is a terminal with a known width, where
// bars can redraw (a terminal of width 0 would show nothing).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || !(isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
		return false
	}
	width, _, err := cwriter.GetSize(int(f.Fd()))
	return err == nil && width > 0
}

// progress shows the batch while it runs.
type progress interface {
	jobDone(Result)
	// stop ends the display with the final snapshot.
	stop(last Snapshot)
}

func startProgress(ctx context.Context, w io.Writer, opts Options, v *statusView) progress {
	mode := opts.Progress
	if mode == ProgressAuto {
		mode = ProgressLines
		if IsTerminal(w) {
			mode = ProgressBars
		}
	}
	switch mode {
	case ProgressBars:
		return startBars(ctx, w, v)
	case ProgressLines:
		return startLines(w, opts.Interval, v)
	}
	return noProgress{}
}

type noProgress struct{}

func (noProgress) jobDone(Result) {}
func (noProgress) stop(Snapshot)  {}

// lines prints PlainLine every interval.
type lines struct {
	w     io.Writer
	ticks periodic
}

func startLines(w io.Writer, interval time.Duration, v *statusView) *lines {
	l := &lines{w: w}
	l.ticks.start(interval, func(now time.Time) { fmt.Fprintln(w, PlainLine(v.snapshot(now))) })
	return l
}

func (l *lines) jobDone(Result) {}

func (l *lines) stop(last Snapshot) {
	l.ticks.halt()
	fmt.Fprintln(l.w, PlainLine(last))
}

// periodic calls a function every interval, in a goroutine of its own,
// until halted.
type periodic struct {
	quit chan struct{}
	wg   sync.WaitGroup
}

func (p *periodic) start(interval time.Duration, do func(now time.Time)) {
	p.quit = make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case now := <-tick.C:
				do(now)
			case <-p.quit:
				return
			}
		}
	}()
}

// halt stops the calls and returns once none runs.
func (p *periodic) halt() {
	close(p.quit)
	p.wg.Wait()
}

// bars draws an overall bar with its ETA and one line per token, redrawn
// from a snapshot taken a few times a second.
type bars struct {
	p       *mpb.Progress
	overall *mpb.Bar
	tokens  []*mpb.Bar
	latest  atomic.Pointer[Snapshot]
	ticks   periodic
}

// barRefresh is how often the bars are redrawn and the status read.
const barRefresh = 200 * time.Millisecond

func startBars(ctx context.Context, w io.Writer, v *statusView) *bars {
	b := &bars{}
	first := v.snapshot(time.Now())
	b.latest.Store(&first)
	b.p = mpb.NewWithContext(ctx, mpb.WithOutput(w), mpb.WithWidth(40), mpb.WithRefreshRate(barRefresh), mpb.WithAutoRefresh())
	b.overall = b.p.New(int64(first.Total),
		mpb.BarStyle().Lbound("[").Filler("=").Tip(">").Padding(" ").Rbound("]"),
		mpb.PrependDecorators(
			decor.Name("batch ", decor.WCSyncSpaceR),
			decor.CountersNoUnit("%d/%d GETs", decor.WCSyncSpaceR),
		),
		mpb.AppendDecorators(
			decor.Percentage(decor.WCSyncSpace),
			decor.Any(func(st decor.Statistics) string {
				s := b.latest.Load()
				eta := "ETA ?"
				if st.Completed {
					eta = "done"
				} else if left, ok := BatchETA(*s); ok {
					eta = "ETA " + roundDuration(left)
				}
				return fmt.Sprintf(" %-9s  %d fresh · %d revalidated (304) · %d waits", eta, s.Fresh, s.Revalidated, s.Waits)
			}),
		),
	)
	for i := range first.Tokens {
		bar := b.p.New(0, mpb.NopStyle(), mpb.PrependDecorators(decor.Any(func(decor.Statistics) string {
			s := b.latest.Load()
			if i >= len(s.Tokens) {
				return ""
			}
			return "  " + TokenText(s.Tokens[i])
		})))
		b.tokens = append(b.tokens, bar)
	}
	b.ticks.start(barRefresh, func(now time.Time) {
		s := v.snapshot(now)
		b.latest.Store(&s)
	})
	return b
}

func (b *bars) jobDone(Result) { b.overall.Increment() }

func (b *bars) stop(last Snapshot) {
	b.ticks.halt()
	b.latest.Store(&last)
	b.overall.SetTotal(-1, true)
	for _, t := range b.tokens {
		t.SetTotal(-1, true)
	}
	b.p.Wait()
}
