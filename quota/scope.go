package quota

import (
	"slices"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// This file is what the engine keeps of limits a server enforces without
// announcing them: a scope's bucket (see Option.Scope). A scope is the part
// of an API a refusal pauses — a throttle GitLab names in RateLimit-Name,
// an endpoint group the provider knows, a custom host's path — and its
// bucket takes part in decisions only once something is known of it: a
// refusal (the bucket is then "learnt") or a limit the user wrote down
// ("configured").
// Until then a scope costs nothing: no wait, no lease, nothing written.

// ScopeBackoff is the first pause after a scope's refusal that names no
// time (no Retry-After, no reset: gitlab.com's bare 429, GitLab Dedicated's
// plain "Retry later"); each fresh refusal in a row doubles it, with
// jitter that only ever lengthens it (see scopeBackoff), so a refused
// scope is never asked again sooner than a second after its refusal.
const ScopeBackoff = time.Second

// scopeBackoff is the pause after a fresh refusal that names no time,
// following strikes others in a row: base (the provider's first pause,
// Answer.BareWait, else ScopeBackoff)·2^strikes, lengthened by
// up to as much again by jitter (in [0, 1)), so that many clients refused
// together do not come back together, and none comes back sooner than the
// doubling promises. The caller caps it.
func scopeBackoff(base time.Duration, strikes int, jitter float64) time.Duration {
	if jitter < 0 || jitter >= 1 || jitter != jitter {
		jitter = 0
	}
	d := bareBase(base) << min(strikes, 20)
	return d + time.Duration(jitter*float64(d))
}

// commonWindows are the windows a learnt limit's unstated window is rounded
// up to when its refusals name no time: the periods servers' throttles
// use.
var commonWindows = [...]time.Duration{time.Second, 10 * time.Second, time.Minute, 10 * time.Minute, time.Hour}

// commonWindow rounds d up to a common window (an hour at most).
func commonWindow(d time.Duration) time.Duration {
	for _, w := range commonWindows {
		if d <= w {
			return w
		}
	}
	return commonWindows[len(commonWindows)-1]
}

// scopePolicy is the policy a scope's bucket is paced by: the request's,
// without its reserve, which is kept back in the announced buckets and
// would leave nothing of a learnt limit smaller than it.
func scopePolicy(p Policy) Policy {
	p.Reserve, p.ReservePercent = 0, 0
	return p
}

// seedScope gives a scope nothing is known of the limit the user wrote
// for it (d): full, its window starting now.
func (b *Bucket) seedScope(d Default, now time.Time) {
	if b.Known() || d.Limit <= 0 || d.Window <= 0 {
		return
	}
	b.Limit, b.Remaining, b.Window, b.Configured = d.Limit, d.Limit, d.Window, true
	b.Reset, b.Inferred = now.Add(d.Window), true
	b.Counted, b.CountedFrom = 0, now
}

// scopeActive reports whether a scope's bucket (already seeded) takes part
// in decisions at now: something is known of it.
func (b *Bucket) scopeActive(now time.Time) bool {
	return b.Known() || now.Before(b.BlockedUntil)
}

// scopeWait is how long the scope lets a request of n units wait, and
// whether an answer may end it sooner; zero for a scope nothing is known
// of. It changes nothing.
func scopeWait(s *Bucket, a *Ask, now time.Time) (time.Duration, bool) {
	if s == nil {
		return 0, false
	}
	v := *s // seeded and rolled on the copy: the shared Leases are only read
	v.seedScope(a.Scope, now)
	if !v.scopeActive(now) {
		return 0, false
	}
	v.roll(now)
	var w time.Duration
	var onAnswer bool
	switch {
	case !v.Provisional:
		w, onAnswer = v.waitUnits(scopePolicy(a.Policy), a.units(), now)
	case now.Before(v.BlockedUntil):
		// A provisional limit caps nothing (the window is counted to
		// learn it), but a pause holds.
		w = v.BlockedUntil.Sub(now)
	}
	if (!v.EpisodeAt.IsZero() || v.Probing || v.pastProvisional(now)) && w == 0 && v.Leases.Live(now) >= probeInFlight {
		// An episode of refusals is under way, or a learnt window has
		// just begun, or one process's window went past its own
		// provisional limit: one probe at a time asks whether the
		// server has renewed the scope, or allows more, so that each
		// refused probe (a window learnt too short, a limit reached)
		// is one refusal, not a burst.
		return v.Leases.firstLapse(now), true
	}
	return w, onAnswer
}

// pastProvisional reports whether the window's count and the requests in
// flight reached a provisional limit while the count is all one
// process's (CountedBy). A provisional limit is one process's count of a
// window, a lower bound: in a fleet the fleet's count goes on past it to
// find the server's limit, and it caps nothing. Counted by one process
// alone, it is likely the limit itself, and every request in flight past
// it would be refused together: they go one at a time instead, so that
// the refusal that teaches the limit costs one request. (Before, a
// process alone on a scope learnt from a bare 429 sent all its waiting
// work into the next window: 10–13 of a 40-limit scope were refused
// there.) A fleet's count, of several holders, goes on at full speed:
// going one at a time past one process's share kept a fleet of 8 from
// reaching the server's limit within one of its windows, and its limit
// from being learnt.
func (s *Bucket) pastProvisional(now time.Time) bool {
	return s.Provisional && s.Limit > 0 && s.CountedBy != "" && s.CountedBy != "*" &&
		s.Counted+s.Leases.Live(now) >= s.Limit
}

// takeScope commits a reservation in the scope's bucket, when it takes
// part.
func takeScope(s *Bucket, a *Ask, l Lease, now time.Time) {
	if s == nil {
		return
	}
	s.seedScope(a.Scope, now)
	switch {
	case !s.scopeActive(now):
	case s.Provisional:
		// Held while in flight (one probe at a time when it must be),
		// not paced by a limit that caps nothing.
		s.prune(now)
		s.roll(now)
		s.Leases = append(s.Leases, l)
	default:
		s.take(scopePolicy(a.Policy), l, now)
	}
}

// refusalOfScope decides whether a primary-limit refusal r of a request
// that spends from bucket b and has a scope was the scope's, not b's: a
// refusal b's announced state cannot explain. It names another throttle
// than b's, or states a limit other than b's; or, stating nothing, it
// comes while b says quota is left beyond the requests in flight (the
// refused one's lease is still held in b). A refusal that states counts
// (a remaining count, a limit) for a bucket nothing is known of is the
// bucket's: it is the first word of the bucket, and the narrowest scope
// the server identifies — giving it to the request's scope would let a
// request of another scope go to the bucket it says is empty. A bucket
// whose limit is only assumed (a provider's default, taken after answers
// that stated nothing: a proxy's 502) is known of no better: its limit is
// a guess, not one the refusal could contradict. A bucket whose counts
// are assumed at its window's roll still has the limit the server stated:
// a refusal stating another is not the bucket's (memory seed 8494: an
// endpoint's refusal, 2 remaining 0, taken for the bucket's just after
// its roll, refilled it at the endpoint's reset, 6 s before its own).
func refusalOfScope(b *Bucket, r *headers.Reading, now time.Time) bool {
	guessed := b.Defaulted || b.Assumed && b.Limit == UnknownCount
	switch {
	case r.Resource != "" && b.Name != "":
		return r.Resource != b.Name
	case (!b.Known() || guessed) && (r.Remaining != UnknownCount || r.Limit != UnknownCount):
		return false
	case r.Limit != UnknownCount:
		return b.Limit == UnknownCount || r.Limit != b.Limit
	case r.Remaining != UnknownCount:
		return false // b is known: its own count
	}
	c := *b
	c.roll(now)
	budget, known := c.Budget(0, now)
	return !known || budget > 0
}

// observeScope applies an answer to the scope of its request: an answer
// the server charged that is no refusal counts against a known scope (in
// Counted, the fleet's count, as well as in Remaining) — a server error
// too, which the server may have processed and counted, as the request's
// bucket counts it: a limit learnt from a count without them is short by
// as many — and the first success after an episode of refusals ends it; a
// refusal of the scope (refused) pauses and teaches it. A scope nothing is
// known of counts nothing: a success there changes nothing, so a store
// writes nothing. uncounted says the request's lease is one of Uncounted
// (see countedLate).
func (s *Bucket) observeScope(ans *Answer, refused bool, holder string, uncounted bool, now time.Time) {
	r := ans.Reading
	switch {
	case refused:
		s.observeScopeRefusal(ans, now)
	case r.Limited == headers.NotLimited && ans.Counted && s.Known():
		s.prune(now)
		s.roll(now)
		if r.Status < 500 {
			switch sent := sentAt(ans, now); {
			case sent.Before(s.BlockedUntil):
			case !s.EpisodeAt.IsZero():
				s.endEpisode(ans, now)
			case s.Strikes > 0:
				s.Strikes = 0 // the end of a pause that taught nothing
			}
			s.Probing = false
		}
		if uncounted && s.CountedFrom.After(s.RefusedAt) && now.Before(s.BlockedUntil) {
			// Of the refused window's time, not of the count under way.
			if !now.Before(s.UncountedFrom) {
				s.countedLate()
			}
			return
		}
		if uncounted && s.CountedFrom.After(s.RefusedAt) {
			// Sent before the refusal, answered after its pause: the
			// server may have admitted it in either window. As a lost
			// one (uncountedLost), it raises the limit found whole by
			// one, which is whole no longer (a refusal corrects it if
			// too high); it counts in the count under way too. Memory
			// seed 620606: a search sent 0.2 s before the refusal that
			// found 2 whole, answered 0.6 s after the pause, had been
			// the server's third of 3.
			if s.countsTheLimit() && s.Limit > 0 {
				s.Limit, s.Whole = s.Limit+1, false
			}
		}
		if s.beforeCount(now) {
			return
		}
		if s.Remaining > 0 {
			s.Remaining--
		}
		// The latest answer counted: one written late (a store that
		// blinked) came earlier than those counted before it.
		s.Counted, s.LastCounted = s.Counted+1, maxTime(s.LastCounted, now)
		switch {
		case s.Counted == 1 && holder != "":
			s.CountedBy = holder
		case s.CountedBy != holder:
			s.CountedBy = "*"
		}
		if !s.EpisodeAt.IsZero() && s.countsTheLimit() && s.Counted > s.Limit {
			// A request in flight when the refusal came, admitted
			// in the refused window: the server allowed it too.
			s.Limit = s.Counted
		}
	}
}

// lateSlack is how long before the count under way began an answer may
// have come and still be counted in it (see beforeCount): the count's
// start and an answer's time are different processes' clocks, each moved
// to the database's within an estimate.
const lateSlack = time.Second

// beforeCount reports whether an answer that came at now, written only
// now, came before the count under way began, by more than lateSlack: a
// process held up, or a store that blinked, held it back while the count
// moved on to a later window. It spent a window counted before, and says
// nothing of this one's: a success counted in it made the count 8 where
// the server allows 7, a refusal judging it found 1 whole of 7 (memory
// seed 673974, a database blink of 4 s: a search answered 4 s before
// the count began, and a refusal answered 3.9 s before).
func (s *Bucket) beforeCount(now time.Time) bool {
	return !s.CountedFrom.IsZero() && now.Before(s.CountedFrom.Add(-lateSlack))
}

// countedLate applies the success of a request in flight when a refusal
// found the count of its window whole (one of Uncounted), answered within
// that count's window — after it began (UncountedFrom) and before the
// pause the refusal named ended — and written once the count had moved on
// to a later window (a process held up, a store that blinked): the server
// admitted it in the window the refusal found whole, which that count
// missed, so the limit learnt from it rises by one; it spends nothing of
// the window counted now. Memory seed 673974: a search answered 13 ms
// before the refusal, written after the fleet had counted 3 of the next
// window, left 6 found whole of the server's 7, and was counted 4th of
// the next. (A success of the same window, written before the count
// moves on, raises the limit as it counts: observeScope.)
func (s *Bucket) countedLate() {
	if s.countsTheLimit() && s.Limit > 0 {
		s.Limit++
	}
}

// countsTheLimit reports whether the scope's limit is learnt from the
// fleet's count of a whole window: neither stated, written, nor
// provisional.
func (s *Bucket) countsTheLimit() bool {
	return s.Learnt && !s.LimitStated && !s.Configured && !s.Provisional
}

// maxUncounted bounds Uncounted: a scope's requests in flight at a
// refusal are few (its fleet's concurrency).
const maxUncounted = 32

// inFlightIDs are the IDs of the scope's leases (the refused request's
// is released already), at most maxUncounted.
func (s *Bucket) inFlightIDs() []uint64 {
	var ids []uint64
	for _, l := range s.Leases {
		if len(ids) == maxUncounted {
			break
		}
		ids = append(ids, l.ID)
	}
	return ids
}

// answered forgets lease id in Uncounted: its answer came, and counted
// it if the server did.
func (s *Bucket) answered(id uint64) {
	if len(s.Uncounted) > 0 {
		s.Uncounted = slices.DeleteFunc(s.Uncounted, func(u uint64) bool { return u == id })
	}
}

// uncountedLost applies the end without an answer of lease id, when it is
// one of Uncounted: its request, in flight when a refusal found the
// scope's count whole, may have been admitted in that window and never
// counted, so a limit still learnt from the count rises by one for it and
// is whole no longer (a refusal corrects it if too high: see
// observeScopeRefusal). Memory seed 367789: a process killed with a
// search in flight, which the server admitted, left 5 found whole of the
// server's 6, held for LimitHoldWindows.
func (s *Bucket) uncountedLost(id uint64) {
	if !slices.Contains(s.Uncounted, id) {
		return
	}
	s.answered(id)
	if s.countsTheLimit() && s.Limit > 0 {
		s.Limit, s.Whole = s.Limit+1, false
	}
}

// endEpisode closes an episode of refusals at the first success of a
// request sent after its pause: the server has renewed the scope, and the
// scope's window starts now (a server whose windows are fixed has just
// opened one), counted from now — unless the count under way began after
// the server renewed the scope (its window rolled at the end the refusal
// named), when it is the count of this window and goes on: what the
// server charged before this success (a probe answered 502) stays
// counted. The server renewed the scope no sooner than a second before
// the earliest end the episode's refusals named (NamedEnd): an answer
// that left later names a later end. A provisional limit takes this process's
// count over the window before the episode began when larger (the window
// may have grown since the refusal), only to show the best guess: it
// caps nothing until a counted window teaches the fleet's.
func (s *Bucket) endEpisode(ans *Answer, now time.Time) {
	if s.Provisional && ans.Succeeded != nil && s.Window > 0 {
		if n := ans.Succeeded(s.EpisodeAt.Add(-s.Window)) - ans.Succeeded(s.EpisodeAt.Add(time.Nanosecond)); n > s.Limit {
			s.Limit = n
		}
	}
	renewed := s.BlockedUntil.Add(-time.Second) // a Retry-After counts whole seconds
	if !s.NamedEnd.IsZero() && s.NamedEnd.Before(s.BlockedUntil) {
		// The earliest end a refusal of the episode named: an answer
		// that left later names a later one, past the window's end.
		// (Not the latest start the refusals' slack allows, which
		// would shorten the lag: the ends come from processes whose
		// clocks the database knows only within an estimate, and a
		// lag too short takes a count for a whole window's.)
		renewed = s.NamedEnd.Add(-time.Second)
	}
	if s.Strikes > 0 {
		renewed = s.RefusedAt // a backoff: any time after the last refusal
	}
	s.Strikes, s.EpisodeAt = 0, time.Time{}
	if s.Window <= 0 {
		return
	}
	if !s.CountedFrom.IsZero() && !s.CountedFrom.Before(renewed) && now.Before(s.CountedFrom.Add(s.Window)) {
		// The count under way began after the server renewed the
		// scope: it is of the window this success is in, and keeps
		// what the server charged before it (a probe answered 502).
		s.Remaining, s.Reset, s.Assumed = max(s.Limit-s.Counted, 0), s.CountedFrom.Add(s.Window), false
		s.Lag = s.CountedFrom.Sub(renewed)
		return
	}
	s.Remaining, s.Reset, s.Assumed = s.Limit, now.Add(s.Window), false
	s.Counted, s.CountedFrom, s.Lag, s.Straddled = 0, now, max(now.Sub(renewed), 0), false
	s.CountedBy = ""
}

// sentAt is when the answer's request was sent: Answer.Sent, else now.
func sentAt(ans *Answer, now time.Time) time.Time {
	if ans.Sent.IsZero() {
		return now
	}
	return ans.Sent
}

// observeScopeRefusal pauses the scope until the time the refusal names —
// its Retry-After exactly, else its stated reset, else ScopeBackoff
// doubled with each fresh refusal in a row (see scopeBackoff) — and
// learns its limit and window.
//
// Refusals come in episodes, as an owner's do (see Owner.Observe): a
// request sent before the scope's current pause ended was in flight when
// the server began refusing, and its refusal can only lengthen the pause.
// A fresh refusal (of a request sent at or after it) learns:
//   - the limit: the refusal's RateLimit-Limit when stated (over the
//     learnt window: see statedPerWindow); else, at the episode's first
//     refusal, how many requests of the whole fleet succeeded in the
//     window it ends (Counted), when that window was counted whole, has
//     not grown, and cannot span two of the server's (see Bucket.Lag);
//     else it is provisional (see Bucket.Provisional):
//     this process's count over the window before (Answer.Succeeded), a
//     lower bound that caps nothing, until a counted window teaches the
//     fleet's. A refusal later in the episode leaves it, but a window
//     that grows makes it provisional;
//   - the window: stated (RateLimit-Policy w=); else, for a refusal
//     naming the end of the server's window (a Retry-After, a reset),
//     learnt from the ends named (see namedWindow); else, for a refusal
//     naming no time, the episode's first backoff rounded up to a common
//     window (1 s, 10 s, 1 min, 10 min, 1 h), and since a fixed window
//     cannot end while its refusals go on, never shorter than the
//     episode so far, rounded up the same way, nor than the window known.
//   - whether the limit is the server's own (Whole): the fleet's count
//     of a whole window is; a count that may not be (see Bucket.Lag)
//     does not lower it.
func (s *Bucket) observeScopeRefusal(ans *Answer, now time.Time) {
	r := ans.Reading
	s.prune(now)
	s.roll(now)
	fresh := !sentAt(ans, now).Before(s.BlockedUntil)
	var wait time.Duration
	named := true
	switch {
	case r.HasRetryAfter:
		wait = r.RetryAfter
	case r.HasReset() && r.Reset.After(now):
		wait = r.Reset.Sub(now)
	case fresh:
		wait, named = scopeBackoff(ans.BareWait, s.Strikes, ans.Jitter), false
	default:
		// A refusal of the episode naming no time: nothing goes sooner
		// than the first backoff after any refusal received.
		wait = bareBase(ans.BareWait)
	}
	until := now.Add(capPause(wait, ans.MaxPause))
	// How much earlier than until the end may be: a Retry-After counts
	// from when the server wrote it, up to a round trip before now, and
	// both it and a reset round to the second.
	slack := time.Second
	if r.HasRetryAfter {
		slack += max(now.Sub(sentAt(ans, now)), 0)
	}
	if !fresh {
		if until.After(s.BlockedUntil) {
			s.BlockedUntil = until
		}
		if named && until.Before(s.NamedEnd) {
			// A refusal of the same window whose answer left sooner:
			// the window's end is no later than it names.
			s.NamedEnd, s.NamedSlack = until, slack
		}
		return
	}
	if s.beforeCount(now) {
		// Of a window counted before the count under way: it pauses
		// the scope as it says, and teaches nothing.
		s.BlockedUntil = maxTime(s.BlockedUntil, until)
		return
	}
	if !named && s.Learnt && !s.NamedEnd.IsZero() && s.EpisodeAt.IsZero() {
		// A refusal naming no time of a scope whose server names
		// the end of its window when it refuses: likely not the
		// scope's own limit (a proxy in front, an abuse filter), so
		// it pauses the scope, doubling as it repeats, and teaches
		// nothing. Taken as the scope's, it made the limit found
		// whole (9 per 7 s) a provisional guess over 10 minutes, and
		// its episode's end put the count's start a minute off.
		s.Strikes++
		s.BlockedUntil = maxTime(s.BlockedUntil, until)
		return
	}
	if r.Resource != "" {
		s.Name = r.Resource
	}
	first := s.EpisodeAt.IsZero()
	if first {
		s.EpisodeAt, s.Uncounted, s.UncountedFrom = now, nil, time.Time{}
		if named {
			s.Strikes = 0 // a pause that taught nothing (above) is over
		}
	}
	if !named {
		s.Strikes++
	}
	counted := !s.CountedFrom.IsZero() && s.Window > 0 // a whole window of the fleet's
	window := r.Window
	switch {
	case window > 0:
	case named:
		window = s.namedWindow(until.Sub(now), until, slack)
	default:
		window = s.Window
		if first {
			window = max(window, commonWindow(until.Sub(now)))
		} else {
			// Our own backoff says nothing of the server's window;
			// the episode's length does.
			window = max(window, commonWindow(now.Sub(s.EpisodeAt)))
		}
	}
	if named {
		s.NamedEnd, s.NamedSlack = until, slack
	}
	// The count is of one of the server's windows when the window is
	// known, counted whole, and the refusal comes before the server can
	// have begun another since the count began (see Bucket.Lag). Lag
	// bounds the server's start at the episode's end; each window rolled
	// since at a length other than the server's moved the count's start
	// by the difference, so a count under a window this refusal corrects
	// is not known whole (memory seed 5560: learnt windows of 11 s for
	// the server's 10 s began 1.9 s after the server's two windows on,
	// and the count missed two of its requests: 5 of 7).
	whole := counted && window == s.Window && now.Before(s.CountedFrom.Add(window-s.Lag)) && !s.Straddled
	switch {
	case r.Limit > 0:
		s.Limit, s.LimitStated, s.Provisional, s.Whole = statedPerWindow(r, window), true, false, false
	case s.LimitStated:
	case !first:
		if window > s.Window && !s.Configured {
			// Counted over a window shorter than the server's.
			s.Provisional, s.Whole = true, false
		}
	case counted && s.Limit > 0 && s.Counted == 0:
		// Refused before anything succeeded in the window: it began
		// too early (a probe of a window learnt too short), which
		// says nothing of the limit.
	case s.Configured:
		// The user's limit is too high, or its window is not the
		// server's: the fleet's count errs low, the safe side.
		s.Limit = max(s.Counted, 1)
	case whole:
		s.Limit, s.Provisional, s.Whole = max(s.Counted, 1), false, true
		s.Uncounted, s.UncountedFrom = s.inFlightIDs(), s.CountedFrom
	case counted && window < s.Window && s.Learnt && !s.Provisional:
		// The window shrank: a limit counted over the longer one,
		// whole or not, is not the shorter's (memory seed 5560: 14
		// found whole over 20 s, two of the server's 10 s, was kept
		// whole when a refusal taught 10 s, and held there). Its
		// share of the shorter window, to the nearest request, is the
		// guess, or the count under way if more; a refusal corrects a
		// guess too high, a probe one too low — but a probe's count
		// raises a limit only when it came within the shortest
		// window the named ends allow (see countedWithinShortest),
		// which a fleet paced over the window rarely shows, so a
		// guess rounded down stayed low (memory seed 8273: 3 found
		// whole over 11 s, the server's 10 s, became 2 and held).
		// (The lower bound, a share of the windows the longer one may
		// span, made 13 over 7 s a 7 where the server allows 10 per
		// 6 s, which rose a request a window: memory seed 5413.)
		share := (s.Limit*int64(window) + int64(s.Window)/2) / int64(s.Window)
		s.Limit, s.Whole = max(min(s.Counted, s.Limit), share, 1), false
	case counted && window <= s.Window && s.Whole:
		// A window's count, found before, is not contradicted by the
		// count of a window that may have begun before the server's
		// did, or ended during it (see Bucket.Lag).
	case counted && window <= s.Window && s.Learnt && !s.Provisional:
		// The server's window may have begun before the count did, or
		// ended during it (see Bucket.Lag): the count, or the limit if
		// lower, errs low, the safe side; a clean window raises it.
		s.Limit, s.Whole = min(max(s.Counted, 1), s.Limit), false
	default:
		end := now // the window the refusal ends is the one before it
		if named {
			end = until
		}
		var n int64
		if ans.Succeeded != nil {
			n = ans.Succeeded(end.Add(-window))
		}
		if s.Learnt {
			n = max(n, s.Limit)
		}
		s.Limit, s.Provisional, s.Whole = max(n, 1), true, false
	}
	s.Learnt, s.Window, s.Remaining, s.Probe = true, window, 0, 0
	s.Reset, s.Inferred, s.Assumed = until, false, false
	s.RefusedAt = now
	if until.After(s.BlockedUntil) {
		s.BlockedUntil = until
	}
}

// namedSlack is NamedSlack, a second in rows written before it was kept.
func (s *Bucket) namedSlack() time.Duration {
	if s.NamedSlack > 0 {
		return s.NamedSlack
	}
	return time.Second
}

// namedWindow is the window a fresh refusal naming the end of the
// server's window (until, wait from now, and up to slack late) teaches,
// when the server states none: a fixed window is at least as long as the
// wait to its end, rounded up to whole seconds as a Retry-After counts
// them; and two refusals of different windows name ends a whole number of
// windows apart, each late by up to its slack (the second a Retry-After
// rounds up, and the round trip of its answer, since it counts from when
// the server wrote it), so a gap g between two ends puts the window, or a
// multiple of it, between g less the later end's slack and g plus the
// earlier's (memory seed 5560: an end named 1.1 s late, by a Retry-After
// of 1 s in an answer 0.6 s on its way, put the server's 10 s outside
// bounds of a second each way, and the window stayed 11 s). The bounds
// of the gaps seen (Gap, GapMax) are narrowed by each gap that agrees
// with them, and by a longer gap of k windows, whose bounds divided by k
// agree with them (ends 10.86 s and then 19.54 s
// apart: 10 s, where the first gap alone says 11 s); a shorter gap that
// does not agree shows the earlier ones were multiples, and replaces them.
// The window is the middle of the bounds, to the second. The evidence,
// not a guess: a wait rounded up to a common window (10 s for a server's
// 8 s) lets the fleet send its limit over a longer window than the
// server's, and it is never refused again to learn better.
func (s *Bucket) namedWindow(wait time.Duration, until time.Time, slack time.Duration) time.Duration {
	w := max(wait.Truncate(time.Second), time.Second)
	if w < wait {
		w += time.Second
	}
	if !s.NamedEnd.IsZero() {
		// Ends named in one window differ by less than the second a
		// Retry-After rounds to.
		if gap := until.Sub(s.NamedEnd); gap >= 1500*time.Millisecond {
			lo, hi := gap-slack, gap+s.namedSlack()
			switch {
			case s.GapMax <= 0 || hi <= s.Gap:
				s.Gap, s.GapMax = lo, hi
			case lo < s.GapMax:
				s.Gap, s.GapMax = max(s.Gap, lo), min(s.GapMax, hi)
			default:
				// A longer gap, of k windows: it bounds the
				// window to within a second each way divided by
				// k, which narrows bounds it agrees with.
				mid := (s.Gap + s.GapMax) / 2
				if k := int64((gap + mid/2) / mid); k >= 2 {
					klo, khi := lo/time.Duration(k), hi/time.Duration(k)
					if klo < s.GapMax && khi > s.Gap {
						s.Gap, s.GapMax = max(s.Gap, klo), min(s.GapMax, khi)
					}
				}
			}
		}
	}
	if s.GapMax > 0 {
		return max(w, ((s.Gap + s.GapMax) / 2).Round(time.Second))
	}
	return max(w, s.Window)
}

// statedPerWindow is a refusal's stated limit over window. GitLab states
// every throttle's limit per minute ("the request quota for the client
// each minute"), whatever the throttle's own period: 40 per 10 s reads
// 240, 300 per 10 minutes reads 30. Another dialect states it for the
// window it names (RateLimit-Policy w=), else for the refused one.
func statedPerWindow(r *headers.Reading, window time.Duration) int64 {
	per := r.Window
	if r.Dialect == headers.DialectGitLab {
		per = time.Minute
	}
	if per <= 0 || per == window {
		return r.Limit
	}
	return max(1, int64(float64(r.Limit)*float64(window)/float64(per)))
}

// countedWithinShortest reports whether the window's count came within the
// shortest window the gaps between named ends allow (Gap), less Lag: a
// window learnt longer than the server's holds more than the server's
// limit without a refusal (memory seed 5560: 8 counted over a window learnt
// as 11 s raised the server's 7 per 10 s to 8). Without such bounds, or
// when they agree with the window, any count of the window does.
func (b *Bucket) countedWithinShortest() bool {
	if b.GapMax <= 0 || b.Gap >= b.Window {
		return true
	}
	return b.LastCounted.Sub(b.CountedFrom) < b.Gap-b.Lag
}

// LimitHoldWindows is how many windows a learnt limit that is a whole
// window's count (Bucket.Whole) holds from the refusal that taught it
// before it rises again: the server's limit itself, found, is where to
// stay, as a lowered concurrency cap holds (CapHoldPauses). A rise of
// one is a refusal a window for a limit the server keeps, and beyond a
// tenth of a limit below 10.
const LimitHoldWindows = 10

// riseLearnt, as the window that just ended (at its Reset) rolls over,
// probes above a learnt limit that may be too low: when that window
// spent it whole with no refusal, the next admits a tenth more (at least
// one: Probe), as the learnt concurrency cap rises a step at a time, so
// that a server allowing more is found without a burst of refusals. The
// limit itself rises only when a window's count, whole and with no
// refusal, went beyond it: the server allowed that many. A limit that is
// a whole window's count at a refusal is the server's, and holds first
// (see LimitHoldWindows); a refusal ends the probe. A provisional limit
// caps nothing: what the fleet sent in a window may span two of the
// server's (see Bucket.Lag), so only a refusal teaches it. A limit the
// server stated, or one the user wrote (not learnt), stays.
func (b *Bucket) riseLearnt() {
	// An episode of refusals under way has just found the limit.
	if !b.Learnt || b.Configured || b.LimitStated || b.Provisional || b.Limit <= 0 || b.Window <= 0 || !b.EpisodeAt.IsZero() {
		b.Probe = 0
		return
	}
	if !b.RefusedAt.IsZero() && !b.RefusedAt.Before(b.Reset.Add(-b.Window)) {
		b.Probe = 0
		return // refused within the window
	}
	// probed: the window sent beyond the limit, and no refusal came.
	probed := b.Probe > 0 && b.Counted > b.Limit && !b.CountedFrom.IsZero()
	if probed && !b.Straddled && b.countedWithinShortest() {
		b.Limit, b.Whole, probed = b.Counted, false, false
	}
	if b.Remaining > 0 {
		return // not spent whole: no reason to ask for more
	}
	if b.Whole && b.Reset.Sub(b.RefusedAt) < LimitHoldWindows*b.Window {
		return
	}
	next := max(1, b.Limit/10)
	if probed {
		// Its count could not raise the limit: it may span two of the
		// server's windows, and will while Lag is what it is, which
		// only a refusal measures again. The probe doubles, up to the
		// limit, until the server refuses (memory seed 4876: an episode
		// ended 11 s after the server renewed the scope, a window of
		// 10 s, and a limit of 5 probed by 1 — the server's 6 — stayed
		// 5 for good, never refused).
		next = max(next, min(2*b.Probe, b.Limit))
	}
	b.Probe = next
}
