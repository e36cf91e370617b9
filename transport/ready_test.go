package transport

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
)

func TestReady(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	reg := provider.NewRegistry()
	gh, err := provider.New("github", provider.GitHub, "https://api.github.com")
	if err != nil {
		t.Fatal(err)
	}
	_ = reg.Add(gh)
	a, b := creds.NewToken("github", 1, "ghp_readyaaaaaaaaaaaaa", "test"), creds.NewToken("github", 2, "ghp_readybbbbbbbbbbbbb", "test")
	var dbDown error
	tr, err := New(Options{
		Providers: reg, Pools: map[string]*creds.Pool{"github": creds.NewPool("github", a, b)}, SkipValidation: true,
		Now:  func() time.Time { return now },
		Ping: func(context.Context) error { return dbDown },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Ready(context.Background()); err != nil {
		t.Fatalf("a fresh transport: %v", err)
	}

	dbDown = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	if err := tr.Ready(context.Background()); err == nil || err.Error() != "the database does not answer: dial tcp 127.0.0.1:5432: connect: connection refused" {
		t.Errorf("the database down: %v", err)
	}
	dbDown = nil

	a.MarkInvalid("GET /user answered 401 Unauthorized", now, time.Time{})
	if err := tr.Ready(context.Background()); err != nil {
		t.Errorf("one token of two rejected: %v", err)
	}
	b.MarkInvalid("GET /user answered 401 Unauthorized", now, now.Add(time.Hour))
	err = tr.Ready(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "github: the server rejected every token (2;") {
		t.Errorf("every token rejected: %v", err)
	}
	if err != nil && (strings.Contains(err.Error(), "ghp_") || strings.Contains(err.Error(), "bbbb")) {
		t.Errorf("the reason names a token: %v", err)
	}
	// A rejection is tried again at its Until: the provider is ready again.
	now = now.Add(time.Hour)
	if err := tr.Ready(context.Background()); err != nil {
		t.Errorf("a rejection expired: %v", err)
	}
}
