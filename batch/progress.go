package batch

import (
	"slices"
	"time"
)

// Progress is a batch's state at one moment.
type Progress struct {
	// Added counts the requests added; Done those answered (whatever the
	// status), Failed those that ended without an answer (Result.Err).
	Added, Done, Failed int
	// Sending counts the requests taken by a worker (sent, or in
	// OnResult); Ready those that can go as soon as a worker is free.
	Sending, Ready int
	// Waiting lists what the requests waiting for quota wait for, the
	// soonest first.
	Waiting []Wait
	// ETA is when the batch should be through, at the pace of its
	// results so far and not before its last wait ends; zero before the
	// first result.
	ETA time.Time
}

// Wait is a group of requests waiting for the same quota.
type Wait struct {
	Provider, Resource string
	// Scope is the endpoint group of a limit the server does not
	// announce, when the requests have one (see transport.WaitError).
	Scope string
	// OnAnswer: the wait is on requests in flight; an answer may end it
	// before Until.
	OnAnswer bool
	Requests int
	// Until is when the last of them may go.
	Until time.Time
}

// Progress reports where the batch stands.
func (b *Batch) Progress() Progress {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := Progress{Added: b.added, Done: b.done, Failed: b.failed, Sending: b.active, Ready: b.ready.len()}
	type group struct {
		provider, resource, scope string
		onAnswer                  bool
	}
	at := map[group]int{}
	var last time.Time
	for _, q := range []timeQueue{b.parked, b.onAnswer} {
		for _, it := range q {
			g := group{it.why.Provider, it.why.Resource, it.why.Scope, it.why.OnAnswer()}
			i, ok := at[g]
			if !ok {
				i = len(p.Waiting)
				at[g] = i
				p.Waiting = append(p.Waiting, Wait{Provider: g.provider, Resource: g.resource, Scope: g.scope, OnAnswer: g.onAnswer})
			}
			w := &p.Waiting[i]
			w.Requests++
			if it.until.After(w.Until) {
				w.Until = it.until
			}
			if it.until.After(last) {
				last = it.until
			}
		}
	}
	slices.SortFunc(p.Waiting, func(a, b Wait) int { return a.Until.Compare(b.Until) })
	if n := b.done + b.failed; n > 0 {
		per := b.finishedAt.Sub(b.started) / time.Duration(n)
		left := b.added - n
		p.ETA = b.finishedAt.Add(per * time.Duration(left))
		p.ETA = maxTime(p.ETA, last)
	}
	return p
}

func maxTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}
