package poll

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
)

// A poll of a URL whose user name is a token, that fails, says so without
// the token: http.Client masks only a password in its errors.
func TestPollErrorsMaskATokenUserName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fail := rtFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("connection refused") })
		rec := &recorder{}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		rec.onPoll = func(int, Event) { cancel() }
		p, err := New(Options{URLs: []string{"https://ghp_tok123456@api.example/x"}, Client: &http.Client{Transport: fail},
			Policy: utcPolicy(), Sink: rec, OnEvent: rec.event})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
		for _, e := range rec.events {
			if s := e.String(); strings.Contains(s, "tok123456") {
				t.Errorf("event shows the token: %s", s)
			}
		}
		if len(rec.kinds(EventBackoff)) == 0 {
			t.Error("the failed poll was not reported")
		}
	})
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
