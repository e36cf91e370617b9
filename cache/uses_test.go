package cache

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/sqlite"
)

// touchingBackend is a fakeBackend that counts TouchBlob calls.
type touchingBackend struct {
	*fakeBackend
	mu      sync.Mutex
	touches int
}

func (b *touchingBackend) TouchBlob(ctx context.Context, key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.touches++
	return nil
}

// handClock is a clock a test moves.
type handClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *handClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *handClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Hits served by the memory front reach a backend that records uses at
// most once a minute per record, and not at all within a minute of the
// record's write.
func TestFrontHitsRecordedOncePerMinute(t *testing.T) {
	o := newOrigin(t)
	o.set("/repos/a/b", resource{body: `{"id":1}`, etag: `W/"v1"`})
	b := &touchingBackend{fakeBackend: newFakeBackend()}
	clk := &handClock{t: epoch}
	c := New(Options{Backend: b, Now: clk.Now})
	resp, _ := get(t, c, "alice", o.url("/repos/a/b"))
	mustStatus(t, resp, 200, Miss)

	touches := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.touches
	}
	for _, step := range []struct {
		after time.Duration
		hits  int
		want  int
	}{
		{30 * time.Second, 5, 0}, // within a minute of the write
		{31 * time.Second, 5, 1}, // a minute on: once
		{30 * time.Second, 5, 1},
		{31 * time.Second, 1, 2},
	} {
		clk.Add(step.after)
		for range step.hits {
			resp, _ := get(t, c, "alice", o.url("/repos/a/b"))
			mustStatus(t, resp, 200, Revalidated)
		}
		if got := touches(); got != step.want {
			t.Fatalf("at %v: %d uses recorded; want %d", clk.Now().Sub(epoch), got, step.want)
		}
	}
	b.fakeBackend.mu.Lock()
	gets := b.gets
	b.fakeBackend.mu.Unlock()
	if gets != 1 {
		t.Fatalf("the backend was read %d times; want once (the front serves the hits)", gets)
	}
}

// A URL one process revalidates all the time from its memory front is not
// evicted from a shared SQLite table before blobs nobody used since.
func TestFrontHitsKeepTheSharedBlob(t *testing.T) {
	o := newOrigin(t)
	o.set("/repos/a/b", resource{body: `{"id":1}`, etag: `W/"v1"`})
	clk := &handClock{t: epoch}
	path := filepath.Join(t.TempDir(), "cache.db")
	st, err := sqlite.Open(t.Context(), path, store.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := New(Options{Backend: st, Now: clk.Now})
	resp, _ := get(t, c, "alice", o.url("/repos/a/b"))
	mustStatus(t, resp, 200, Miss)
	req, err := http.NewRequest(http.MethodGet, o.url("/repos/a/b"), nil)
	if err != nil {
		t.Fatal(err)
	}
	hot := blobKey(requestKey(req))
	blob, ok, err := st.GetBlob(t.Context(), hot) // within the minute: records nothing
	if err != nil || !ok {
		t.Fatalf("the answer is not in the table: %v, %v", ok, err)
	}
	size := len(hot) + len(blob)
	cold := func(i int) string { return BlobKeyPrefix + strings.Repeat(string(rune('a'+i)), 64) }
	value := strings.Repeat("c", size-len(cold(0))) // a blob as big as the hot one

	clk.Add(time.Second)
	if err := st.PutBlob(t.Context(), cold(0), []byte(value)); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Minute)
	resp, _ = get(t, c, "alice", o.url("/repos/a/b")) // from the front
	mustStatus(t, resp, 200, Revalidated)

	// Another process, whose limit holds two such blobs, writes a third.
	other, err := sqlite.Open(t.Context(), path, store.Options{Now: clk.Now, BlobLimit: int64(2 * size)})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	clk.Add(time.Second)
	if err := other.PutBlob(t.Context(), cold(1), []byte(value)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := other.GetBlob(t.Context(), hot); !ok {
		t.Fatal("the blob served from the front all along was evicted; the least recently used one should have been")
	}
	if _, ok, _ := other.GetBlob(t.Context(), cold(0)); ok {
		t.Fatal("the blob nobody used since its write survived; the hot one's hit was not recorded")
	}
}
