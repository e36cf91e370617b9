package transport

import (
	"sync"
)

// flights are the cacheable GETs in flight, by what identifies identical
// ones (cache.Cache.Collapsible's key and the pool they go from): a
// request identical to one in flight waits for that one's answer, which
// the cache stores, and is then served from the cache (or goes on its own
// when the answer could not be stored).
type flights struct {
	mu sync.Mutex
	m  map[flightKey]chan struct{}
}

type flightKey struct {
	pool  any
	cache string
}

// join returns the flight of key: leader is true when there was none
// and the caller now leads it (it must call land when answered);
// otherwise done is closed when the leader lands.
func (f *flights) join(key flightKey) (done chan struct{}, leader bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch, ok := f.m[key]; ok {
		return ch, false
	}
	if f.m == nil {
		f.m = map[flightKey]chan struct{}{}
	}
	ch := make(chan struct{})
	f.m[key] = ch
	return ch, true
}

// land ends the flight of key that ch leads, waking its followers.
func (f *flights) land(key flightKey, ch chan struct{}) {
	f.mu.Lock()
	if f.m[key] == ch {
		delete(f.m, key)
	}
	f.mu.Unlock()
	close(ch)
}
