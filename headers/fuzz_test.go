package headers

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzParse feeds arbitrary responses through ReadRaw and Parse: nothing
// may panic, the wait is never negative, and the summary always encodes.
// The seed corpus is every response under testdata/responses.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "responses", "*.http"))
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, int64(0))
	}
	f.Add([]byte("HTTP/2 429\nRateLimit: \"a\";r=0;t=5, b;r=1\nRateLimit-Policy: \"a\";q=1;w=1\n\n"), int64(12345))
	f.Add([]byte("HTTP/1.1 403 Forbidden\nx-ratelimit-remaining: 0\nx-ratelimit-reset: 99999999999999\nretry-after: Thu, 01 Jan 2026 00:49:26 GMT\n\n{\"retry_after\": 1e400}"), int64(-1))
	f.Fuzz(func(t *testing.T, data []byte, offset int64) {
		raw, err := ReadRaw(bytes.NewReader(data))
		if err != nil {
			return
		}
		at := now.Add(time.Duration(offset))
		r := Parse(raw.Status, raw.Header, raw.Body, at)
		if r.Wait < 0 {
			t.Fatalf("negative wait %v", r.Wait)
		}
		if r.HasRetryAfter && r.RetryAfter < 0 {
			t.Fatalf("negative retry-after %v", r.RetryAfter)
		}
		s := r.Summarize()
		if math.IsNaN(s.WaitSeconds) || math.IsInf(s.WaitSeconds, 0) || s.WaitSeconds < 0 {
			t.Fatalf("wait_seconds %v", s.WaitSeconds)
		}
		if _, err := json.Marshal(s); err != nil {
			t.Fatalf("summary does not encode: %v", err)
		}
		_ = r.Describe(at)
	})
}
