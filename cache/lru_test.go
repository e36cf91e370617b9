package cache

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// recordOf is a record of one response, of the given total size.
func recordOf(id byte, size int64) *record {
	var k key
	k[0] = id
	r := newRecord(k, []*Entry{{key: k}})
	r.size = size
	return r
}

func keys(l *lru) string {
	var b strings.Builder
	for r := l.head; r != nil; r = r.next {
		fmt.Fprintf(&b, "%d", r.key[0])
	}
	return b.String()
}

func TestLRUOrderAndBytes(t *testing.T) {
	l := newLRU(100)
	for id := byte(1); id <= 3; id++ {
		l.set(recordOf(id, 30))
	}
	if keys(l) != "321" || l.bytes != 90 || l.responses != 3 {
		t.Fatalf("order %s bytes %d responses %d", keys(l), l.bytes, l.responses)
	}
	l.get(recordOf(1, 0).key) // 1 becomes most recent
	if keys(l) != "132" {
		t.Fatalf("order %s after get", keys(l))
	}
	l.set(recordOf(4, 30)) // 120 > 100: evict 2, the least recent
	if keys(l) != "413" || l.bytes != 90 || l.evictions != 1 {
		t.Fatalf("order %s bytes %d evictions %d", keys(l), l.bytes, l.evictions)
	}
	l.set(recordOf(3, 50)) // replace: 30 -> 50, total 110: evict 1
	if keys(l) != "34" || l.bytes != 80 || l.evictions != 2 {
		t.Fatalf("order %s bytes %d evictions %d after replace", keys(l), l.bytes, l.evictions)
	}
	if l.update(recordOf(4, 0).key, func(*record) *record { return recordOf(4, 101) }) {
		t.Fatal("a record larger than the bound was stored")
	}
	if keys(l) != "3" || l.bytes != 50 || l.responses != 1 {
		t.Fatalf("order %s bytes %d: the old record under an oversized key must go", keys(l), l.bytes)
	}
	// update sees the current record and may keep it.
	cur := l.get(recordOf(3, 0).key)
	var seen *record
	if !l.update(cur.key, func(r *record) *record { seen = r; return r }) || seen != cur || keys(l) != "3" {
		t.Fatalf("update: seen %p, want %p", seen, cur)
	}
	l.delete(recordOf(3, 0).key)
	l.delete(recordOf(9, 0).key)
	if l.head != nil || l.tail != nil || l.bytes != 0 || len(l.records) != 0 || l.responses != 0 {
		t.Fatalf("not empty: %s %d", keys(l), l.bytes)
	}
}

// storeDirect stores a synthetic 200 for url with a body of n bytes.
func storeDirect(t *testing.T, c *Cache, url string, n int) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Etag": {`"e"`}},
		ContentLength: int64(n), Body: io.NopCloser(strings.NewReader(strings.Repeat("b", n)))}
	got, err := c.Store(req, "", resp)
	if err != nil || got.Header.Get(HeaderName) != Miss {
		t.Fatalf("Store: %v, marker %q", err, got.Header.Get(HeaderName))
	}
}

func cached(c *Cache, url string) bool {
	req, _ := http.NewRequest("GET", url, nil)
	return c.Prepare(req, "") != nil
}

func TestCacheEvictsByBytes(t *testing.T) {
	probe := New(Options{})
	storeDirect(t, probe, "https://h/probe", 1000)
	size := probe.Stats().Bytes // one entry with a 1000-byte body

	c := New(Options{MaxBytes: 3*size + size/2})
	for i := range 3 {
		storeDirect(t, c, fmt.Sprintf("https://h/%d", i), 1000)
	}
	if s := c.Stats(); s.Entries != 3 || s.Bytes != 3*size || s.Evictions != 0 {
		t.Fatalf("stats %+v, entry size %d", s, size)
	}
	if !cached(c, "https://h/0") { // touch 0: 1 is now least recent
		t.Fatal("0 missing")
	}
	storeDirect(t, c, "https://h/3", 1000)
	if cached(c, "https://h/1") {
		t.Fatal("the least recently used entry survived")
	}
	for _, u := range []string{"https://h/0", "https://h/2", "https://h/3"} {
		if !cached(c, u) {
			t.Fatalf("%s evicted", u)
		}
	}
	// A bigger body pushes out as many entries as it needs.
	storeDirect(t, c, "https://h/big", 2500)
	if s := c.Stats(); s.Bytes > 3*size+size/2 || s.Evictions != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// TestConcurrentUse runs Prepare, Store and Revalidated from many
// goroutines against one origin; run with -race.
func TestConcurrentUse(t *testing.T) {
	o := newOrigin(t)
	const paths = 8
	for i := range paths {
		o.set(fmt.Sprintf("/r/%d", i), resource{body: jsonBody(500 + 100*i), etag: fmt.Sprintf(`"%d"`, i)})
	}
	// Small enough that entries are evicted while others use them.
	c := New(Options{MaxBytes: 4000})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				p := (g + i) % paths
				owner := []string{"alice", "bob"}[i%2]
				resp, body := get(t, c, owner, o.url(fmt.Sprintf("/r/%d", p)))
				if resp.StatusCode != 200 || body != jsonBody(500+100*p) {
					t.Errorf("path %d: status %d, %d bytes", p, resp.StatusCode, len(body))
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			c.Stats()
		}
	})
	wg.Wait()
	// How many repeats find their entry before it is evicted depends on
	// the scheduling (under load, none may): hits are only checked
	// against the server's 304s.
	s := c.Stats()
	if s.Stores == 0 || s.Evictions == 0 || s.Bytes > 4000 {
		t.Fatalf("stats %+v", s)
	}
	if _, nm := o.counts(); uint64(nm) != s.Hits {
		t.Fatalf("server sent %d 304s, cache counted %d hits", nm, s.Hits)
	}
}
