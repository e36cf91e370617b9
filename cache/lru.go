package cache

import "sync"

// lru holds entries in memory, bounded by the sum of their sizes, dropping
// the least recently used first. Every operation is O(1) and takes one
// mutex. The list is intrusive (links live in Entry), so a put allocates
// nothing beyond the map slot.
type lru struct {
	mu       sync.Mutex
	maxBytes int64
	bytes    int64
	entries  map[key]*Entry
	// head is the most recently used entry, tail the least.
	head, tail *Entry
	evictions  uint64
}

func newLRU(maxBytes int64) *lru {
	return &lru{maxBytes: maxBytes, entries: make(map[key]*Entry)}
}

// get returns the entry under k and marks it most recently used.
func (l *lru) get(k key) *Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[k]
	if e != nil && e != l.head {
		l.unlink(e)
		l.pushFront(e)
	}
	return e
}

// put stores e under its key, replacing any entry there, then evicts from
// the least recently used end until the total is within maxBytes. An entry
// larger than maxBytes on its own is not stored (and the old one is
// removed). When old is non-nil, put only replaces if old is still the
// entry under the key, so a slow caller cannot overwrite a newer response.
func (l *lru) put(e, old *Entry) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.entries[e.key]
	if old != nil && cur != old {
		return false
	}
	if cur != nil {
		l.remove(cur)
	}
	if e.size > l.maxBytes {
		return false
	}
	l.entries[e.key] = e
	l.pushFront(e)
	l.bytes += e.size
	for l.bytes > l.maxBytes && l.tail != nil {
		l.remove(l.tail)
		l.evictions++
	}
	return true
}

// delete removes the entry under k, if any.
func (l *lru) delete(k key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.entries[k]; e != nil {
		l.remove(e)
	}
}

// stats returns the number of entries, their total size and the evictions
// so far.
func (l *lru) stats() (entries int, bytes int64, evictions uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries), l.bytes, l.evictions
}

func (l *lru) remove(e *Entry) {
	delete(l.entries, e.key)
	l.unlink(e)
	l.bytes -= e.size
}

func (l *lru) unlink(e *Entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (l *lru) pushFront(e *Entry) {
	e.prev, e.next = nil, l.head
	if l.head != nil {
		l.head.prev = e
	}
	l.head = e
	if l.tail == nil {
		l.tail = e
	}
}
