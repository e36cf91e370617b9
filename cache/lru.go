package cache

import "sync"

// lru holds records in memory, bounded by the sum of their sizes, dropping
// the least recently used first. Every operation is O(1) in the number of
// records and takes one mutex. The list is intrusive (links live in
// record), so storing allocates nothing beyond the map slot.
type lru struct {
	mu        sync.Mutex
	maxBytes  int64
	bytes     int64
	responses int // variants in all records
	records   map[key]*record
	// head is the most recently used record, tail the least.
	head, tail *record
	evictions  uint64
}

func newLRU(maxBytes int64) *lru {
	return &lru{maxBytes: maxBytes, records: make(map[key]*record)}
}

// get returns the record under k and marks it most recently used.
func (l *lru) get(k key) *record {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.records[k]
	if r != nil && r != l.head {
		l.unlink(r)
		l.pushFront(r)
	}
	return r
}

// update replaces the record under k with fn's answer given the current
// one (nil for none), atomically, then evicts from the least recently used
// end until the total is within maxBytes. fn returning nil removes the
// record; a record larger than maxBytes on its own is not stored (and the
// old one is removed). It reports whether fn's record is stored.
func (l *lru) update(k key, fn func(*record) *record) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.records[k]
	r := fn(cur)
	if r == cur {
		return r != nil
	}
	if cur != nil {
		l.remove(cur)
	}
	if r == nil || r.size > l.maxBytes {
		return false
	}
	l.records[k] = r
	l.pushFront(r)
	l.bytes += r.size
	l.responses += r.responses()
	for l.bytes > l.maxBytes && l.tail != nil {
		l.remove(l.tail)
		l.evictions++
	}
	return true
}

// set stores r under its key, replacing any record there.
func (l *lru) set(r *record) {
	l.update(r.key, func(*record) *record { return r })
}

// delete removes the record under k, if any.
func (l *lru) delete(k key) {
	l.update(k, func(*record) *record { return nil })
}

// stats returns the number of responses held, their total size and the
// evictions so far.
func (l *lru) stats() (responses int, bytes int64, evictions uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.responses, l.bytes, l.evictions
}

func (l *lru) remove(r *record) {
	delete(l.records, r.key)
	l.unlink(r)
	l.bytes -= r.size
	l.responses -= r.responses()
}

func (l *lru) unlink(r *record) {
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		l.head = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		l.tail = r.prev
	}
	r.prev, r.next = nil, nil
}

func (l *lru) pushFront(r *record) {
	r.prev, r.next = nil, l.head
	if l.head != nil {
		l.head.prev = r
	}
	l.head = r
	if l.tail == nil {
		l.tail = r
	}
}
