package cache_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/cache"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/storetest"
)

// BenchmarkRepeatWithBackend is the cache's work on a repeated GET the
// server answers 304 when the entries live in a shared blob table:
// Prepare, then Revalidated and reading the body.
func BenchmarkRepeatWithBackend(b *testing.B) {
	dsns := map[string]func(b *testing.B) string{
		"sqlite":   func(b *testing.B) string { return filepath.Join(b.TempDir(), "bench.db") },
		"postgres": func(b *testing.B) string { return storetest.NewPostgresSchema(b, storetest.PostgresBase(b)) },
	}
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			st, err := store.Open(context.Background(), dsns[name](b), store.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			c := cache.New(cache.Options{Backend: st})
			const url = "https://api.github.com/repos/ratekeeper/ratekeeper"
			body := strings.Repeat("x", 4096)
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			resp := &http.Response{StatusCode: 200, ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body)),
				Header: http.Header{"Etag": {`W/"v1"`}, "Content-Type": {"application/json"}}}
			if _, err := c.Store(req, "alice", resp); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 8192)
			b.ReportAllocs()
			for b.Loop() {
				out, _ := http.NewRequest(http.MethodGet, url, nil)
				e := c.Prepare(out, "alice")
				if e == nil {
					b.Fatal("miss")
				}
				r := c.Revalidated(e, &http.Response{StatusCode: 304, Header: http.Header{"Etag": {`W/"v1"`}}, Body: http.NoBody})
				if n, _ := io.ReadFull(r.Body, buf[:len(body)]); n != len(body) {
					b.Fatal("short body")
				}
			}
		})
	}
}
