package transport

import (
	"context"
	"errors"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/internal/holder"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
)

// LearningTurns is implemented by a State shared with other processes
// that can order a pool's learning turn among all of them (see
// creds.Learner): the turn is a lease in the shared state, held by one
// process at a time. While a process learns which of its credentials share
// a bucket, each of its requests for the provider first takes the turn, so
// no other process's learning request moves a counter between a probe and
// its confirmation. Without it, a shared state cannot tell buckets apart
// from counters, and each token's owner is asked instead.
type LearningTurns interface {
	// TakeLearningTurn gives p.Holder the turn p.Key until p.Until if it
	// is free, lapsed at p.Now, or held by p.Gone (a holder proven gone).
	// It says whether it did, the turn's sequence number (one more at every
	// taking) and, when it did not, who holds it.
	TakeLearningTurn(ctx context.Context, p *TurnParams) (TurnTaken, error)
	// GiveLearningTurn frees the turn key if holder holds it.
	GiveLearningTurn(ctx context.Context, key, holder string) error
}

// TurnParams are a request for a learning turn.
type TurnParams struct {
	Key    string // the turn: one per provider's state key
	Holder string // who takes it (Options.Holder)
	// Gone is a holder of the turn found gone (see Transport.holderGone):
	// its turn is taken over at once.
	Gone       string
	Now, Until time.Time
}

// TurnTaken is what TakeLearningTurn found.
type TurnTaken struct {
	Taken  bool
	Seq    uint64 // the turn's sequence number after the call
	Holder string // the holder, when not taken
}

// learningTurnKey names a provider's learning turn in the shared state:
// every process spending the provider's buckets orders its learning
// requests by it, whatever its pool.
func learningTurnKey(stateKey string) string { return stateKey }

// sharedTurn takes the provider's learning turn in the shared state, as
// well as this process's (held already): it waits for another process
// holding it, asking again every round trip, within what is left of the
// max wait. Meanwhile it looks every turnLook at what the holder has
// learnt (catchUp): once every credential is placed, it returns without
// the turn, the learning done. It returns whether another process held
// the turn since this one last gave it back (then what this process's
// learner last saw of the counters is stale).
func (x *exchange) sharedTurn(lg *learning) (bool, error) {
	t := x.t
	tp := TurnParams{Key: learningTurnKey(x.l.key), Holder: t.holder}
	for {
		now := t.opts.Now()
		tp.Now, tp.Until = now, now.Add(x.maxWait()+t.opts.Lease)
		got, err := t.turns.TakeLearningTurn(context.WithoutCancel(x.ctx), &tp)
		if err != nil {
			return false, reserveFailed(x.l.p, x.class, err)
		}
		if got.Taken {
			lg.sharedHeld = true
			stale := got.Seq != lg.seq+1
			lg.seq = got.Seq
			return stale, nil
		}
		if got.Holder != tp.Gone && t.turnHolderGone(x.ctx, got.Holder, now) {
			tp.Gone = got.Holder
			continue
		}
		rtt := x.l.roundTrip()
		if x.waited+rtt > x.maxWait() {
			return false, &WaitError{Provider: x.l.p.Name, Resource: x.class.Resource, Until: now.Add(rtt), Wait: rtt, MaxWait: x.maxWait()}
		}
		// Before this process has an answer of its own, a round trip is
		// a guess (defaultRoundTrip), far longer than the holder's
		// learning may take: what the holder settles reaches the
		// credential store at once, so look there more often, reading
		// only, and ask for the turn again after the round trip.
		for end := now.Add(rtt); ; {
			start := t.opts.Now()
			if err := t.sleep(x.ctx, min(turnLook, end.Sub(start))); err != nil {
				return false, err
			}
			x.waited += t.opts.Now().Sub(start)
			t.catchUp(x.ctx, x.l.p, lg, false)
			if lg.done.Load() {
				return false, nil
			}
			if !t.opts.Now().Before(end) {
				break
			}
		}
	}
}

// turnLook is how often a process waiting for another's learning turn
// looks at what that process has learnt.
const turnLook = 50 * time.Millisecond

// turnHolderGone is the dead-holder verdict (holderGone) on the holder of
// a learning turn: the heartbeats are read only for a holder of another
// machine, since the process table judges this machine's.
func (t *Transport) turnHolderGone(ctx context.Context, h string, now time.Time) bool {
	var beats map[string]time.Time
	if h != t.holder && !holder.Local(h) {
		beats = t.beatsNow(ctx)
	}
	return t.holderGone(h, beats, now)
}

// beatsNow reads the holders' heartbeats, when the state keeps them.
func (t *Transport) beatsNow(ctx context.Context) map[string]time.Time {
	hb, ok := t.state.(Heartbeats)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	beats, err := hb.Beats(ctx)
	if err != nil {
		return nil
	}
	return beats
}

// giveShared frees the shared turn this process holds, on a context of its
// own: it runs on every exit of the request holding it.
func (t *Transport) giveShared(lg *learning, key string) {
	if !lg.sharedHeld {
		return
	}
	lg.sharedHeld = false
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := t.turns.GiveLearningTurn(ctx, learningTurnKey(key), t.holder); err != nil {
		// It lapses with its lease, or is taken over once this
		// process is gone.
		t.log.Warn("giving back the learning turn", "err", err)
	}
}

// catchUp brings the learner up to what other processes learnt: a
// credential whose bucket one of them found is taken from the credential
// store (a process that has learnt everything sends without the turn, so
// this is looked at every turn, not only after another process held it);
// and when another process held the turn since (stale), the counters seen
// before are forgotten, since its requests moved them.
func (t *Transport) catchUp(ctx context.Context, p *provider.Provider, lg *learning, stale bool) {
	lg.mu.Lock()
	unresolved := lg.l.Unresolved()
	lg.mu.Unlock()
	for _, c := range unresolved {
		t.adopt(ctx, p, c)
	}
	lg.mu.Lock()
	if stale {
		lg.l.Forget()
	}
	if !lg.l.Learning() {
		lg.done.Store(true)
	}
	lg.mu.Unlock()
}

// askFirst reports whether c's owner is to be asked at its first use: when
// asked to (Options.AskOwnerFirst), or where a shared database cannot order
// the learning turn and the pool holds more than one token. A single token
// is its own bucket whoever owns it, so it is never asked for that.
func (t *Transport) askFirst(pool *creds.Pool) bool {
	if t.opts.AskOwnerFirst {
		return true
	}
	if t.opts.Credentials == nil || t.turns != nil {
		return false
	}
	return countTokens(pool) > 1
}

// countTokens counts the pool's credentials that carry a token.
func countTokens(pool *creds.Pool) int {
	n := 0
	for _, c := range pool.Credentials() {
		if c.Kind() != creds.Anonymous {
			n++
		}
	}
	return n
}

// takeSharedTurn takes, on a shared state that orders them, the shared
// learning turn too (this process's is held), and catches up with what
// other processes learnt.
func (x *exchange) takeSharedTurn(lg *learning) error {
	if x.t.turns == nil || lg.done.Load() {
		return nil
	}
	stale, err := x.sharedTurn(lg)
	if err != nil {
		return err
	}
	x.t.catchUp(x.ctx, x.l.p, lg, stale)
	return nil
}

// learnerCannotServe reports whether err is a reserve that leaves nothing
// of every credential the learner let the request choose from (the one it
// named, the known ones): the request then chooses among all of them,
// unknown ones included, rather than fail while another could go. Its
// answer still teaches the learner, as any answer received with the turn
// held does.
func (x *exchange) learnerCannotServe(err error) bool {
	var re *quota.ReserveError
	if !x.rt.turnHeld || x.rt.widened || x.rt.only != nil || !errors.As(err, &re) {
		return false
	}
	x.rt.widened = true
	return true
}
