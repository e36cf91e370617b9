package quotastate

import (
	"bytes"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/store"
)

// view is what this process last saw of the quota rows: each row's value
// and version as its last snapshot read or its own last write left them.
// A decision may choose on it instead of reading a snapshot: the choice is
// decided again on the locked rows before anything is written (see
// commitChosen), so a stale view can cost a lost race or a fresh read,
// never an overspend. It saves a round trip to the database and the
// database's work of one read per decision, which on a machine whose cores
// the database and the deciding processes share is what bounds the
// decisions a second.
//
// Nothing seen before a database outage is used after it (epoch, see
// store.OutageEpoch): the first decisions after the database is back read
// what the other processes left while it was away.
type view struct {
	mu    sync.Mutex
	recs  map[string]seen
	epoch uint64 // the store's outage epoch the records were seen in
}

type seen struct {
	rec store.Record
	at  time.Time // when it was read or written (the State's clock)
}

// viewMaxAge is how long a seen row may stand in for a read: beyond it,
// other processes have likely moved it, and choosing on it would mostly
// lose races.
const viewMaxAge = 500 * time.Millisecond

// get returns the seen records of keys, in order, when every one is
// younger than viewMaxAge at now.
func (v *view) get(keys []string, now time.Time, epoch uint64) ([]store.Record, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if epoch != v.epoch {
		v.recs, v.epoch = nil, epoch
		return nil, false
	}
	out := make([]store.Record, len(keys))
	for i, k := range keys {
		s, ok := v.recs[k]
		if !ok || now.Sub(s.at) > viewMaxAge {
			return nil, false
		}
		out[i] = s.rec
	}
	return out, true
}

// put records recs as seen at now.
func (v *view) put(recs []store.Record, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.recs == nil {
		v.recs = make(map[string]seen)
	}
	for _, r := range recs {
		v.recs[r.Key] = seen{rec: r, at: now}
	}
}

// written records what a committed transaction left in recs, whose values
// before the transaction's changes were olds: a row whose value changed
// was written, one version up; the others are as read under the lock.
func (v *view) written(recs []*store.Record, olds [][]byte, now time.Time) {
	out := make([]store.Record, len(recs))
	for i, r := range recs {
		out[i] = store.Record{Key: r.Key, Value: r.Value, Version: r.Version}
		if !bytes.Equal(olds[i], r.Value) {
			out[i].Version++
		}
	}
	v.put(out, now)
}

// forget drops keys: the next decision on them reads them.
func (v *view) forget(keys []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, k := range keys {
		delete(v.recs, k)
	}
}
