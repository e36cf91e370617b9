package quotastate

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/transport"
)

// Holders and their heartbeats. Keys:
//
//	holder/HOLDER   {"seen": time}, the holder's latest heartbeat
//
// A lease names its holder (quota.Lease.Holder); FreeHolders removes the
// leases of holders the transport proves gone, from every owner and bucket
// that has one.

var _ transport.Heartbeats = (*State)(nil)

type beat struct {
	Seen time.Time `json:"seen"`
}

// Beat implements transport.Heartbeats: it records that holder was alive
// at now (on the database's clock, see ClockOffset).
func (st *State) Beat(ctx context.Context, holder string, now time.Time) error {
	off, err := st.offset(ctx)
	if err != nil {
		return err
	}
	return update(ctx, st, key("holder", holder), func() beat { return beat{} }, func(b *beat) error {
		b.Seen = now.Add(off).UTC()
		return nil
	})
}

// Beats implements transport.Heartbeats: every holder's latest heartbeat,
// on the transport's clock.
func (st *State) Beats(ctx context.Context) (map[string]time.Time, error) {
	off, err := st.offset(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := st.s.List(ctx, "holder/")
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(recs))
	for _, rec := range recs {
		h, ok := unescape(strings.TrimPrefix(rec.Key, "holder/"))
		if !ok {
			continue
		}
		var b beat
		if err := json.Unmarshal(rec.Value, &b); err != nil {
			st.corrupt(rec.Key, err)
			continue
		}
		out[h] = b.Seen.Add(-off)
	}
	return out, nil
}

// FreeHolders implements transport.State. It reads every owner and bucket
// (no lock), asks gone once per holder found in a lease, and rewrites, in
// one transaction, only the rows that hold a lease of a gone holder.
func (st *State) FreeHolders(ctx context.Context, gone func(holder string) bool) (int, error) {
	if err := st.Flush(ctx); err != nil {
		return 0, err
	}
	verdict := map[string]bool{}
	isGone := func(h string) bool {
		g, ok := verdict[h]
		if !ok {
			g = gone(h)
			verdict[h] = g
		}
		return g
	}
	var keys []string
	owners := map[string]bool{}
	for _, prefix := range []string{"owner/", "bucket/"} {
		recs, err := st.s.List(ctx, prefix)
		if err != nil {
			return 0, err
		}
		for _, rec := range recs {
			var v struct {
				Leases quota.Leases `json:"leases"`
			}
			if json.Unmarshal(rec.Value, &v) != nil {
				continue
			}
			for _, h := range v.Leases.Holders() {
				if isGone(h) {
					keys = append(keys, rec.Key)
					owners[rec.Key] = prefix == "owner/"
					break
				}
			}
		}
	}
	if len(keys) == 0 {
		return 0, nil
	}
	freed := 0
	// Freed slots wake the waiters of every process.
	ctx = store.WithNotification(ctx, store.Notification{Channel: WakeChannel, Payload: st.wakeID()})
	err := st.s.UpdateMany(ctx, keys, func(recs []*store.Record) error {
		freed = 0
		for _, rec := range recs {
			if owners[rec.Key] {
				o := &quota.Owner{}
				st.decode(rec, o)
				freed += o.FreeHolders(isGone)
				if err := encode(rec, o); err != nil {
					return err
				}
				continue
			}
			b := quota.NewBucket()
			st.decode(rec, &b)
			freed += b.FreeHolders(isGone)
			if err := encode(rec, &b); err != nil {
				return err
			}
		}
		return nil
	})
	return freed, err
}
