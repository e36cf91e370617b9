package transport

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/quota"
)

// A WaitError remembers the quota its request waited for, so that a caller
// that put the request aside for long — package tasks, whose task sleeps
// in the database until RetryAt — can ask again, without sending or
// reserving anything, whether the quota came back sooner: another
// process's answer showed more remaining, a pause was lifted, a reading
// raised a learnt limit.

// waitedFor is the quota a request waited for: the slots of its last
// decision, and what it asked of them.
type waitedFor struct {
	slots []Slot
	ask   quota.Ask
}

// newWaitedFor copies slots, which the exchange reuses, and ask.
func newWaitedFor(slots []Slot, ask quota.Ask) *waitedFor {
	w := &waitedFor{slots: slices.Clone(slots), ask: ask}
	for i := range w.slots {
		w.slots[i].Also = slices.Clone(w.slots[i].Also)
		w.slots[i].Draws = slices.Clone(w.slots[i].Draws)
	}
	return w
}

// QuotaKey names the quota the wait is for: the owners, buckets and
// scopes of the credentials the request could go with, and what it asks
// of them but its units (a language model's tokens). Requests with one
// key wait for the same quota: one ReadyAt answers for them all. It is ""
// for a WaitError no transport made.
func (e *WaitError) QuotaKey() string {
	if e.waited == nil {
		return ""
	}
	var sb strings.Builder
	for i, s := range e.waited.slots {
		if i > 0 {
			sb.WriteString(" | ")
		}
		sb.WriteString(s.Bucket.String())
		if s.Scope != (BucketID{}) {
			sb.WriteString(" scope " + s.Scope.Resource)
		}
		for _, a := range s.Also {
			sb.WriteString(" also " + a.String())
		}
		for _, d := range s.Draws {
			sb.WriteString(" draws " + d.Bucket.String())
		}
	}
	ask := e.waited.ask
	ask.Units = 0
	sum := sha256.Sum256(fmt.Appendf(nil, "%+v", ask))
	return sb.String() + " ask " + hex.EncodeToString(sum[:6])
}

// ReadyAt says when the request that returned e could go, by the
// transport's one decision (quota.Decide, as State.Reserve runs it) taken
// now on the owners and buckets its State holds (State.Buckets and
// Owners: copies), so that nothing is reserved or written: now when the
// request could go at once, else the moment the decision names. What
// the decision names is its view at the time asked (another process may
// take the quota first): a request sent then decides again, and waits
// again if it must. It costs one read of the State's buckets and one of
// its owners — memory on this process's State, a query each on a shared
// database (store/quotastate).
//
// It returns RetryAt for a WaitError no transport made, and the
// transport's *ReserveError when the reserve leaves nothing of every
// credential's bucket.
func (e *WaitError) ReadyAt(ctx context.Context) (time.Time, error) {
	if e.t == nil || e.waited == nil || len(e.waited.slots) == 0 {
		return e.Until, nil
	}
	t := e.t
	buckets, err := t.state.Buckets(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("ratekeeper: reading quota buckets: %w", err)
	}
	owners, err := t.state.Owners(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("ratekeeper: reading quota owners: %w", err)
	}
	now := t.opts.Now()
	// Each owner and bucket is copied once, so that slots sharing one
	// share the copy, as they share the original in Reserve.
	ownCopies := map[OwnerID]*quota.Owner{}
	owner := func(id OwnerID) *quota.Owner {
		if o, ok := ownCopies[id]; ok {
			return o
		}
		o := deepCopy(owners[id])
		ownCopies[id] = &o
		return &o
	}
	bucketCopies := map[BucketID]*quota.Bucket{}
	bucket := func(id BucketID) *quota.Bucket {
		if b, ok := bucketCopies[id]; ok {
			return b
		}
		b, ok := buckets[id]
		if ok {
			b = deepCopy(b)
		} else {
			b = quota.NewBucket()
		}
		bucketCopies[id] = &b
		return &b
	}
	opts := make([]quota.Option, 0, len(e.waited.slots))
	for _, s := range e.waited.slots {
		opt := quota.Option{Owner: owner(s.Owner), Bucket: bucket(s.Bucket)}
		if s.Scope != (BucketID{}) {
			opt.Scope = bucket(s.Scope)
		}
		for _, id := range s.Also {
			opt.Also = append(opt.Also, bucket(id))
		}
		opt.Draws = QuotaDraws(s.Draws, bucket)
		opts = append(opts, opt)
	}
	ask := e.waited.ask
	// The decision commits to the copies when the request could go: a
	// lease no one settles, dropped with them.
	d := quota.Decide(opts, &ask, quota.Lease{ID: 1, Until: now.Add(t.opts.Lease), Holder: t.holder}, now)
	if d.Err != nil {
		var re *quota.ReserveError
		if errors.As(d.Err, &re) {
			return time.Time{}, &ReserveError{Provider: e.Provider, Resource: e.Resource, Reserve: re.Reserve, Limit: re.Limit}
		}
		return time.Time{}, d.Err
	}
	if d.Index < 0 {
		return e.Until, nil
	}
	return now.Add(d.Wait), nil
}

// deepCopy copies a quota value through its JSON form, the one a shared
// State keeps: the copy shares no slice or map with v, whatever fields
// the type gains.
func deepCopy[T any](v T) T {
	var out T
	b, err := json.Marshal(v)
	if err == nil && json.Unmarshal(b, &out) == nil {
		return out
	}
	return v
}
