package quotastate

import (
	"bytes"
	"sync"

	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/store"
)

// decodings keeps the last decoding of each quota row, with the bytes it
// was decoded from. A process decides on the same rows over and over —
// every decision looks at the owner and bucket of every credential in the
// pool, mostly unchanged since it last did — and decoding their JSON was a
// third of a deciding process's CPU; a row whose bytes are the same is
// now copied instead (quota's Clone), never shared.
type decodings struct {
	mu   sync.Mutex
	rows map[string]decoding
}

type decoding struct {
	raw    []byte
	owner  quota.Owner
	bucket quota.Bucket
}

// cachedCopy returns a copy of rec decoded (into the field of a decoding
// that field picks), decoding it with dec when its bytes are not the ones
// last decoded.
func cachedCopy[T interface{ Clone() T }](d *decodings, rec *store.Record, field func(*decoding) *T, dec func() T) T {
	if c, ok := d.get(rec); ok {
		return (*field(&c)).Clone()
	}
	v := dec()
	var c decoding
	*field(&c) = v.Clone()
	d.put(rec, c)
	return v
}

func (d *decodings) get(rec *store.Record) (decoding, bool) {
	if rec.Value == nil {
		return decoding{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.rows[rec.Key]
	return c, ok && bytes.Equal(c.raw, rec.Value)
}

func (d *decodings) put(rec *store.Record, c decoding) {
	if rec.Value == nil {
		return
	}
	c.raw = bytes.Clone(rec.Value) // what the caller does with its record is its own
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.rows == nil {
		d.rows = make(map[string]decoding)
	}
	d.rows[rec.Key] = c
}
