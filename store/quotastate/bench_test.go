package quotastate_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/transport"
)

// BenchmarkRequestWithSharedState is one GET through the transport with
// quota state in memory, SQLite and PostgreSQL (quota never binding; the
// server answers in process): what sharing the state costs per request.
// Each request reads and updates its owner and bucket a few times: these
// numbers decide whether leasing batches of quota would pay.
func BenchmarkRequestWithSharedState(b *testing.B) {
	backends := map[string]func(b *testing.B) string{
		"memory":   func(b *testing.B) string { return "memory" },
		"sqlite":   func(b *testing.B) string { return filepath.Join(b.TempDir(), "bench.db") },
		"postgres": func(b *testing.B) string { return storetest.NewPostgresSchema(b, storetest.PostgresBase(b)) },
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "5000000")
		w.Header().Set("X-RateLimit-Remaining", "4999999")
		w.Header().Set("X-RateLimit-Reset", fmt.Sprint(time.Now().Add(time.Hour).Unix()))
		io.WriteString(w, "{}")
	})
	for _, name := range []string{"memory", "sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			tr, err := ratekeeper.NewTransport(ratekeeper.Options{
				DB:        backends[name](b),
				Providers: []string{"github=http://api.test"},
				Tokens:    map[string][]string{"github": {"tok-bench-1"}},
				Policy:    "greedy",
				Base:      recorderTransport{handler},
				Tune: func(o *transport.Options) {
					o.SkipValidation = true
					// GitHub's 900 points per endpoint per minute would
					// pace this loop to 15 requests a second.
					o.Providers.Lookup("github").Secondary = provider.Secondary{MaxConcurrency: 20}
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			req, _ := http.NewRequest(http.MethodGet, "http://api.test/user", nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

type recorderTransport struct{ h http.Handler }

func (rt recorderTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	rt.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}
