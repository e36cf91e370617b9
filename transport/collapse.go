package transport

import (
	"sync"
	"sync/atomic"
)

// flights are the cacheable GETs in flight, by what identifies identical
// ones (cache.Cache.Collapsible's key and the pool they go from): a
// request identical to one in flight waits for that one's answer, which
// the cache stores, and is then served from the cache (or goes on its own
// when the answer could not be stored).
type flights struct {
	mu sync.Mutex
	m  map[flightKey]*flight
}

type flightKey struct {
	pool  any
	cache string
}

// flight is one leading request: done is closed when it is answered (or
// gives up); sent is set once it holds its quota, from when its answer is
// one round trip away.
type flight struct {
	done chan struct{}
	sent atomic.Bool
}

// join returns the flight of key: leader is true when there was none
// and the caller now leads it (it must call land when answered).
func (f *flights) join(key flightKey) (fl *flight, leader bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl, ok := f.m[key]; ok {
		return fl, false
	}
	if f.m == nil {
		f.m = map[flightKey]*flight{}
	}
	fl = &flight{done: make(chan struct{})}
	f.m[key] = fl
	return fl, true
}

// land ends the flight of key that fl leads, waking its followers.
func (f *flights) land(key flightKey, fl *flight) {
	f.mu.Lock()
	if f.m[key] == fl {
		delete(f.m, key)
	}
	f.mu.Unlock()
	close(fl.done)
}
