package transport

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := func(v int64) *int64 { return &v }
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	core := func(rem, lim int64, reset time.Duration) []ResourceStatus {
		return []ResourceStatus{{Resource: "core", Remaining: n(rem), Limit: n(lim), Reset: at(reset)},
			{Resource: "search", Remaining: n(1), Limit: n(30)}}
	}
	creds := []CredentialStatus{
		// Two tokens of alice: one bucket, counted once; 1,400 of
		// 10,000 (14 %) is a WARNING.
		{Provider: "github", State: "available", bucket: "user:1", Resources: core(1000, 5000, 30*time.Minute)},
		{Provider: "github", State: "available", bucket: "user:1", Resources: core(1000, 5000, 30*time.Minute)},
		{Provider: "github", State: "available", bucket: "user:2", Resources: core(400, 5000, 10*time.Minute)},
		{Provider: "github", State: "invalid", bucket: "token:x", Resources: core(0, 5000, time.Minute)},
		// Nothing known yet.
		{Provider: "gitlab", State: "unknown", bucket: "token:y", Resources: []ResourceStatus{}},
		// Every token rejected.
		{Provider: "huggingface", State: "invalid", bucket: "token:z"},
		// Spent.
		{Provider: "codeberg", State: "available", bucket: "user:3", Resources: []ResourceStatus{{Resource: "api", Remaining: n(0), Limit: n(100)}}},
	}
	got := summarize([]mainResource{{"github", "core"}, {"gitlab", "api"}, {"huggingface", "api"}, {"codeberg", "api"}, {"gitea", "api"}}, creds, now)
	gh := got[0]
	if gh.Credentials != 4 || gh.Invalid != 1 || *gh.Remaining != 1400 || *gh.Limit != 10000 || gh.Health != "WARNING" ||
		!gh.Reset.Equal(now.Add(10*time.Minute)) || *gh.ResetsIn != 600 {
		t.Errorf("github: %+v (remaining %d of %d)", gh, *gh.Remaining, *gh.Limit)
	}
	for i, want := range []struct {
		provider, health string
		creds            int
	}{{"gitlab", "UNKNOWN", 1}, {"huggingface", "EXHAUSTED", 1}, {"codeberg", "EXHAUSTED", 1}, {"gitea", "UNKNOWN", 0}} {
		s := got[i+1]
		if s.Provider != want.provider || s.Health != want.health || s.Credentials != want.creds {
			t.Errorf("%s: %+v, want %s with %d credentials", want.provider, s, want.health, want.creds)
		}
	}
	if got[1].Remaining != nil || got[4].Limit != nil {
		t.Error("numbers for a provider with nothing known")
	}
}
