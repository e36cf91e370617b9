package poll

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// BenchmarkNext measures one decision of the policy: the profile, the
// period-start search, the budget guard.
func BenchmarkNext(b *testing.B) {
	p := DefaultPolicy()
	p.Location = mustLoad(b, "Asia/Tokyo")
	now := tue(p.Location, 10, 0)
	s, _ := p.Next(State{}, Observation{Outcome: First}, now)
	obs := Observation{Outcome: Unchanged, NotModified: true, PollInterval: time.Minute,
		Quota: Quota{Known: true, Remaining: 4000, Limit: 5000, Reset: now.Add(time.Hour)}}
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Minute)
		s, _ = p.Next(s, obs, now)
	}
}

// BenchmarkCompareEvents compares a 30-item events page (about 30 KiB)
// with the previous one.
func BenchmarkCompareEvents(b *testing.B) {
	page := func(first int) []byte {
		items := make([]map[string]any, 30)
		for i := range items {
			items[i] = map[string]any{"id": fmt.Sprint(first - i), "type": "PushEvent",
				"actor":   map[string]any{"login": "user", "url": "https://api.github.com/users/user"},
				"payload": map[string]any{"ref": "refs/heads/main", "commits": []string{"a", "b", "c"}}, "created_at": "2025-06-10T10:00:00Z"}
		}
		body, _ := json.Marshal(items)
		return body
	}
	prev, _ := Compare(Baseline{}, `"a"`, "", page(1000))
	next := page(1001)
	b.SetBytes(int64(len(next)))
	b.ReportAllocs()
	for b.Loop() {
		_, d := Compare(prev, `"b"`, "", next)
		if len(d.NewItems) != 1 {
			b.Fatal(len(d.NewItems))
		}
	}
}
