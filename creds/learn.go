package creds

import "time"

// Learner works out which credentials of one pool spend one server-side
// bucket (tokens of one user do, on GitHub and most APIs) from the
// counters their own answers carry, so that nothing is spent to learn it:
// no "who am I" request, no window lost to it.
//
// It relies on the server counting requests in each bucket, one by one or
// by a known number of units each (GitHub's x-ratelimit-used, GitLab's
// RateLimit-Observed, or limit − remaining where only those are stated;
// a GraphQL query counts its points, Usage.Units), and on seeing the
// answers in the order the server counted them. So while a pool is learning, its requests
// go one at a time (the transport makes sure of that) and each takes the
// credential Next names:
//
//  1. Each credential whose bucket is not known is tried once (a probe).
//     Its counted answer is compared with the latest counted answer of
//     every known group of credentials. A group in another window (reset
//     apart by more than a tolerance, on the server's clock where the
//     answers carry a Date), or whose count is already at or above the
//     probe's, counts apart. If all do, the credential is a
//     bucket of its own; otherwise the group whose count is closest below
//     is a candidate, to confirm — or, unless the probe counted exactly
//     one more than that group, only to refute: its confirmation then
//     tries the probe again rather than merge on one coincidence.
//  2. A candidate is confirmed by the next request of its group, sent after
//     the probe's answer: in one bucket it counts one more than the probe
//     did; in two it counts what its own counter says, at most the probe's
//     count when nobody else spends the buckets. Counting apart, the
//     probe's credential is compared with the other groups. Counting more
//     than one more, somebody else spent in between: nothing is proven,
//     and after a few tries the credential is handed to the "who am I"
//     request (NeedsWhoAmI). A count at or below another's, in one window,
//     proves two buckets whatever else spends them; one bucket is only
//     concluded from an exact sequence, which other clients' requests on
//     the same tokens could fake only by coincidence.
//
// A credential whose answers carry no counters also needs the "who am I"
// request. When other processes learn over the same buckets, their
// requests are ordered with this learner's by a turn shared between them
// (the transport's), and Forget drops what their requests may have moved.
// Nothing here reads a clock or sends anything: the caller feeds
// answers and time in. A Learner is not safe for concurrent use.
type Learner struct {
	groups     []*learnGroup
	unresolved []*Credential
	cand       *learnCandidate
	whoAmI     []*Credential
	tries      map[*Credential]int
	apart      map[pair]bool
}

type learnGroup struct {
	members []*Credential
	last    Usage // the latest counted answer of any member while learning
	// mute is set for a group whose answers never counted (a few tries):
	// it is not asked again, and probes are not compared with it.
	mute bool
	// inferred marks a group whose bucket this learner concluded was its
	// first member's own (see place): true only against the groups there
	// were then, so a later credential never told apart from it may
	// share it (see retry).
	inferred bool
}

// pair is a credential and a group shown to count apart.
type pair struct {
	c *Credential
	g *learnGroup
}

type learnCandidate struct {
	cred  *Credential
	group *learnGroup
	probe Usage
	// exact: the probe counted exactly its own units more than the
	// group's last answer, as one counter would with nobody else
	// spending. Only then
	// can the confirmation merge them; a probe further above can only be
	// refuted by it, or tried again.
	exact bool
}

// maxLearnTries is how many inconclusive answers a credential gets before
// it is handed to the "who am I" request.
const maxLearnTries = 3

// NewLearner returns a learner for the credentials given: those whose
// bucket is known (a validated owner, an App installation, anonymous, or
// one learnt before) start as groups, the others as to be learnt.
func NewLearner(creds []*Credential) *Learner {
	l := &Learner{tries: map[*Credential]int{}, apart: map[pair]bool{}}
	for _, c := range creds {
		if c.BucketKnown() {
			l.join(c)
		} else {
			l.unresolved = append(l.unresolved, c)
		}
	}
	return l
}

// Learning reports whether some credential's bucket is still to be learnt
// from answers: until then the pool's requests go one at a time.
func (l *Learner) Learning() bool {
	l.sync()
	return len(l.unresolved) > 0 || l.cand != nil
}

// sync moves credentials whose bucket became known otherwise (a "who am
// I" answer, another process's finding) from the unresolved to the groups.
func (l *Learner) sync() {
	for i := 0; i < len(l.unresolved); {
		c := l.unresolved[i]
		if !c.BucketKnown() {
			i++
			continue
		}
		l.unresolved = append(l.unresolved[:i:i], l.unresolved[i+1:]...)
		l.join(c)
	}
	if l.cand != nil && l.cand.cred.BucketKnown() {
		l.join(l.cand.cred)
		l.cand = nil
	}
}

// join adds c, whose bucket is known, to the group of its bucket.
func (l *Learner) join(c *Credential) {
	key := c.BucketOwner()
	for _, g := range l.groups {
		if len(g.members) > 0 && g.members[0].BucketOwner() == key {
			g.members = append(g.members, c)
			return
		}
	}
	l.groups = append(l.groups, &learnGroup{members: []*Credential{c}})
}

// Next returns the credential the next request should go with while
// learning (the candidate's group, to confirm it, or the next credential
// to probe), or nil when any will do.
func (l *Learner) Next() *Credential {
	l.sync()
	if l.cand != nil {
		return l.cand.group.members[0]
	}
	if len(l.unresolved) == 0 {
		return nil
	}
	// A probe is compared with each group's latest answer, which must be
	// one counted while learning: refresh the groups that have none.
	for _, g := range l.groups {
		if g.last.Reset.IsZero() && !g.mute && len(g.members) > 0 {
			return g.members[0]
		}
	}
	return l.unresolved[0]
}

// Unresolved returns the credentials whose bucket is still to be learnt,
// the candidate's included.
func (l *Learner) Unresolved() []*Credential {
	out := append([]*Credential(nil), l.unresolved...)
	if l.cand != nil {
		out = append(out, l.cand.cred)
	}
	return out
}

// MayShare returns the bucket owners (see Credential.BucketOwner) whose
// buckets c's latest answer may have been counted in, as the learner knows
// after observing it: c's own when its bucket is known, the candidate
// group's while it waits for its confirmation; nil when it cannot tell
// (any of them).
func (l *Learner) MayShare(c *Credential) []string {
	switch {
	case c.BucketKnown():
		return []string{c.BucketOwner()}
	case l.cand != nil && l.cand.cred == c && len(l.cand.group.members) > 0:
		return []string{l.cand.group.members[0].BucketOwner()}
	}
	return nil
}

// Forget drops the counters seen so far, when requests the learner did
// not see may have moved them (other processes sharing the buckets sent
// some in between): each group's latest answer is asked for again before
// it is compared with a probe, and a candidate waiting for its
// confirmation is probed again, without counting a try against it. What
// was proven — two credentials counting apart, a bucket learnt — stays.
func (l *Learner) Forget() {
	for _, g := range l.groups {
		g.last = Usage{}
	}
	if l.cand != nil {
		l.unresolved = append([]*Credential{l.cand.cred}, l.unresolved...)
		l.cand = nil
	}
	l.sync()
}

// NeedsWhoAmI returns, and forgets, the credentials the answers could not
// place: the caller asks the provider's "who am I" endpoint about them.
func (l *Learner) NeedsWhoAmI() []*Credential {
	out := l.whoAmI
	l.whoAmI = nil
	return out
}

// Drop forgets c (it was rejected, or its owner became known otherwise).
func (l *Learner) Drop(c *Credential) {
	l.unresolved = without(l.unresolved, c)
	if l.cand != nil && l.cand.cred == c {
		l.cand = nil
	}
	for _, g := range l.groups {
		g.members = without(g.members, c)
	}
}

func without(cs []*Credential, c *Credential) []*Credential {
	for i, x := range cs {
		if x == c {
			return append(cs[:i:i], cs[i+1:]...)
		}
	}
	return cs
}

// Observe takes the answer of a request sent with c while learning: u
// carries its counters (Used < 0 when the answer stated none) and counted
// whether the server charged it. It returns the credentials whose bucket it
// settled (merged into another's with ShareBucketWith, or confirmed as
// their own with KeepOwnBucket), for the caller to remember.
func (l *Learner) Observe(c *Credential, u Usage, counted bool) []*Credential {
	g := l.groupOf(c)
	if !counted || u.Used < 0 || u.Limit <= 0 || u.Reset.IsZero() {
		// A 304 or a refusal moves no counter: try again, a few
		// times. An answer without counters tells nothing, and the
		// next will not either.
		l.tries[c]++
		if l.tries[c] < maxLearnTries && u.Used >= 0 && u.Limit > 0 && !u.Reset.IsZero() {
			return nil
		}
		switch {
		case g != nil:
			g.mute = true
		case indexOf(l.unresolved, c) >= 0:
			l.unresolved = without(l.unresolved, c)
			l.whoAmI = append(l.whoAmI, c)
		}
		return nil
	}
	if g != nil {
		return l.observeGroup(g, u)
	}
	if indexOf(l.unresolved, c) < 0 || l.cand != nil {
		// Not to be learnt, or sent out of turn (Next names the
		// candidate's group while one waits).
		return nil
	}
	l.unresolved = without(l.unresolved, c)
	return l.place(c, u)
}

// place compares a probe's answer u with the groups. In one bucket the
// probe counts after every answer the group had: the group whose count is
// closest below is the candidate (exact when exactly one below). A group in
// another window, or whose count is already at or above the probe's, is
// another bucket.
func (l *Learner) place(c *Credential, u Usage) []*Credential {
	comparable, unsure := false, false
	var best *learnGroup
	for _, g := range l.groups {
		if g.mute || g.last.Reset.IsZero() || g.last.Resource != u.Resource || g.last.Limit != u.Limit {
			continue
		}
		comparable = true
		switch {
		case l.apart[pair{c, g}]:
		case !sameWindow(g.last, u):
			if !apartWindows(g.last, u) {
				// The window may have rolled between the two
				// answers: ask the group again, then the probe.
				g.last = Usage{}
				unsure = true
			}
		case u.Used > g.last.Used && (best == nil || g.last.Used > best.last.Used):
			best = g
		}
	}
	if best != nil {
		l.cand = &learnCandidate{cred: c, group: best, probe: u, exact: u.Used == best.last.Used+u.counts()}
		return nil
	}
	if unsure || !comparable && l.hasVoice() {
		// Nothing to compare with yet: the groups' latest answers were
		// of another resource, or of a window that may have ended.
		l.retry(c)
		return nil
	}
	l.groups = append(l.groups, &learnGroup{members: []*Credential{c}, last: u, inferred: true})
	c.KeepOwnBucket()
	return []*Credential{c}
}

// hasVoice reports whether some group can still answer.
func (l *Learner) hasVoice() bool {
	for _, g := range l.groups {
		if !g.mute && len(g.members) > 0 {
			return true
		}
	}
	return false
}

// retry puts c back to be probed again, or hands it to "who am I" after
// a few inconclusive tries. The members of every group whose bucket was
// only inferred to be their own, and that c was never told apart from,
// go with it: "who am I" may put c in its owner's bucket, and a token of
// that owner left in a bucket of its own would be paced as a second
// quota the server does not have.
func (l *Learner) retry(c *Credential) {
	l.tries[c]++
	if l.tries[c] < maxLearnTries {
		l.unresolved = append(l.unresolved, c)
		return
	}
	l.whoAmI = append(l.whoAmI, c)
	for _, g := range l.groups {
		if g.inferred && !l.apart[pair{c, g}] {
			g.inferred = false
			l.whoAmI = append(l.whoAmI, g.members...)
		}
	}
}

// observeGroup takes the answer of a group member: it confirms or refutes
// a candidate of that group, and keeps the group's latest answer.
func (l *Learner) observeGroup(g *learnGroup, u Usage) []*Credential {
	var settled []*Credential
	if cand := l.cand; cand != nil && cand.group == g {
		l.cand = nil
		switch {
		case !sameWindow(cand.probe, u):
			// A new window: the counts cannot be compared.
			l.retry(cand.cred)
		case u.Used == cand.probe.Used+u.counts() && !cand.exact:
			// The probe counted more than one above the group, so
			// this may be a coincidence (another client spent the
			// group's quota in between): probe again against this
			// fresh answer rather than merge two users on it.
			g.last = u
			l.retry(cand.cred)
			return nil
		case u.Used == cand.probe.Used+u.counts():
			// Counted right after the probe, which counted right
			// after the group's last answer, as one counter would:
			// one bucket.
			cand.cred.ShareBucketWith(g.members[0])
			g.members = append(g.members, cand.cred)
			settled = append(settled, cand.cred)
		case u.Used > cand.probe.Used:
			// Somebody else's requests counted in between: nothing
			// proven. Try again, then ask.
			g.last = u
			l.retry(cand.cred)
			return nil
		default:
			// Counted at or below what the probe counted, although
			// sent after it: a counter of its own. Compare the
			// probe with the other groups, if any.
			l.apart[pair{cand.cred, g}] = true
			g.last = u
			return l.place(cand.cred, cand.probe)
		}
	}
	g.last = u
	return settled
}

func (l *Learner) groupOf(c *Credential) *learnGroup {
	for _, g := range l.groups {
		if indexOf(g.members, c) >= 0 {
			return g
		}
	}
	return nil
}

func indexOf(cs []*Credential, c *Credential) int {
	for i, x := range cs {
		if x == c {
			return i
		}
	}
	return -1
}

// sameWindow reports whether two answers describe one window of one
// resource's quota: same resource and limit, and resets within a second
// (resets computed from delta seconds move with latency and rounding).
func sameWindow(a, b Usage) bool {
	if a.Resource != b.Resource || a.Limit != b.Limit || a.Reset.IsZero() || b.Reset.IsZero() {
		return false
	}
	ra, rb, _ := resets(a, b)
	d := ra.Sub(rb)
	return d <= resetTolerance && d >= -resetTolerance
}

// resets returns the resets of a and b on one clock, and whether it is the
// server's: where both answers had a Date, the server's. On our clock
// each reset is moved by the estimate of the server's clock made when it
// came, and the estimate tightens between two answers by up to a second
// (a Date is stamped anywhere in its second): a window's reset read from
// an early answer and the next window's from a later one could then be
// less than resetTolerance apart on a 2-second window, and the counts of
// two windows compared as one — a new window's low count "proving" two
// buckets where there is one.
func resets(a, b Usage) (time.Time, time.Time, bool) {
	if a.ServerReset.IsZero() || b.ServerReset.IsZero() || a.ServerAt.IsZero() || b.ServerAt.IsZero() {
		return a.Reset, b.Reset, false
	}
	return a.ServerReset, b.ServerReset, true
}

// apartWindows reports whether two answers in different windows cannot be
// of one bucket: a bucket's reset only moves forward, and only once the
// window it names has ended. a is the earlier answer (by arrival).
func apartWindows(a, b Usage) bool {
	if b.At.Before(a.At) {
		a, b = b, a
	}
	ra, rb, server := resets(a, b)
	// The latest b can have been counted: its arrival on our clock; on
	// the server's, the end of its Date's second.
	counted := b.At
	if server {
		counted = b.ServerAt.Add(time.Second)
	}
	switch {
	case rb.Before(ra.Add(-resetTolerance)):
		return true // backwards
	case rb.After(ra.Add(resetTolerance)):
		return counted.Before(ra.Add(-resetTolerance)) // forwards before a's window ended
	}
	return false
}

// resetTolerance is how far two answers' resets may differ and still name
// one window: a reset stated in whole seconds from now moves by up to a
// second with latency and rounding.
const resetTolerance = 1100 * time.Millisecond
