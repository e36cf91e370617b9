package creds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/provider"
)

// fakeUsers is one provider's idea of who owns which token.
type fakeUsers struct {
	kind provider.Kind
	// users maps a token to the body GET /user (or whoami-v2) returns.
	users map[string]string
	// status maps a token to a non-200 status to answer instead.
	status map[string]int
}

// handler serves the provider's "who am I" endpoint under prefix, reading the
// token the way that provider expects it, and nothing else.
func (f fakeUsers) handler(t *testing.T, prefix string) http.Handler {
	path := prefix + "/user"
	if f.kind == provider.HuggingFace {
		path = prefix + "/api/whoami-v2"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != path {
			t.Errorf("unexpected %s %s (want GET %s)", r.Method, r.URL.Path, path)
			http.NotFound(w, r)
			return
		}
		var tok string
		var ok bool
		switch f.kind {
		case provider.GitLab:
			tok = r.Header.Get("PRIVATE-TOKEN")
			ok = tok != "" && r.Header.Get("Authorization") == ""
		case provider.Gitea:
			tok, ok = strings.CutPrefix(r.Header.Get("Authorization"), "token ")
		default:
			tok, ok = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		}
		if !ok {
			t.Errorf("%s: token not sent the %s way: %v", r.URL.Path, f.kind, r.Header)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if code, ok := f.status[tok]; ok {
			w.WriteHeader(code)
			fmt.Fprint(w, `{"message":"no"}`)
			return
		}
		body, ok := f.users[tok]
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"message":"Bad credentials"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	})
}

func TestValidatePerKind(t *testing.T) {
	tests := []struct {
		kind   provider.Kind
		prefix string // where the API lives on the test server
		users  map[string]string
		owners map[string]string // token → expected owner key
		names  map[string]string // token → expected owner name
	}{
		{
			kind: provider.GitHub, prefix: "/api/v3",
			users: map[string]string{
				"tok-alice-1": `{"login":"alice","id":100}`,
				"tok-alice-2": `{"login":"alice","id":100}`,
				"tok-bot-1":   `{"login":"bot","id":200}`,
			},
			owners: map[string]string{"tok-alice-1": "user:100", "tok-alice-2": "user:100", "tok-bot-1": "user:200"},
			names:  map[string]string{"tok-alice-1": "alice", "tok-bot-1": "bot"},
		},
		{
			kind: provider.GitLab, prefix: "/api/v4",
			users:  map[string]string{"tok-gl-1": `{"id":7,"username":"root","name":"Administrator"}`},
			owners: map[string]string{"tok-gl-1": "user:7"},
			names:  map[string]string{"tok-gl-1": "root"},
		},
		{
			kind: provider.HuggingFace, prefix: "/hf",
			users:  map[string]string{"tok-hf-1": `{"type":"user","id":"65a1b2","name":"carol"}`},
			owners: map[string]string{"tok-hf-1": "user:65a1b2"},
			names:  map[string]string{"tok-hf-1": "carol"},
		},
		{
			kind: provider.Gitea, prefix: "/api/v1",
			users:  map[string]string{"tok-gt-1": `{"id":3,"login":"dave"}`},
			owners: map[string]string{"tok-gt-1": "user:3"},
			names:  map[string]string{"tok-gt-1": "dave"},
		},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind), func(t *testing.T) {
			srv := httptest.NewServer(fakeUsers{kind: tt.kind, users: tt.users}.handler(t, tt.prefix))
			defer srv.Close()
			p, err := provider.New("p", tt.kind, srv.URL+tt.prefix)
			if err != nil {
				t.Fatal(err)
			}
			var tokens []string
			for tok := range tt.owners {
				tokens = append(tokens, tok)
			}
			tokens = append(tokens, "tok-revoked-9")
			var creds []*Credential
			for i, tok := range tokens {
				creds = append(creds, NewToken("p", i+1, tok, "test"))
			}
			for i, c := range creds {
				owner, err := Validate(context.Background(), http.DefaultTransport, p, c)
				tok := tokens[i]
				if tok == "tok-revoked-9" {
					if !errors.Is(err, ErrInvalid) || owner != "" {
						t.Errorf("revoked: owner %q err %v", owner, err)
					}
					st := c.Status(time.Now())
					if st.State != Invalid || !strings.Contains(st.Reason, "401") || !strings.Contains(st.Reason, "GET "+tt.prefix) {
						t.Errorf("revoked status = %+v", st)
					}
					if err != nil && strings.Contains(err.Error(), tok) {
						t.Errorf("error reveals the token: %v", err)
					}
					// Validating again answers at once, without a request.
					if _, err := Validate(context.Background(), failingTransport{t}, p, c); !errors.Is(err, ErrInvalid) {
						t.Errorf("revalidating an invalid credential: %v", err)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", c, err)
					continue
				}
				if owner != tt.owners[tok] || c.BucketOwner() != tt.owners[tok] {
					t.Errorf("%s: owner %q, bucket %q, want %q", c, owner, c.BucketOwner(), tt.owners[tok])
				}
				if name, ok := tt.names[tok]; ok && c.Owner().Name != name {
					t.Errorf("%s: owner name %q, want %q", c, c.Owner().Name, name)
				}
				if c.State(time.Now()) != Available {
					t.Errorf("%s: state %s after validation", c, c.State(time.Now()))
				}
			}
			if tt.kind == provider.GitHub {
				// Two tokens of alice are one bucket; bot's is another.
				groups := NewPool("p", creds...).Buckets()
				if len(groups) != 3 || len(groups[0])+len(groups[1])+len(groups[2]) != 4 {
					t.Errorf("buckets = %v", groups)
				}
			}
		})
	}
}

// failingTransport fails the test if it is used.
type failingTransport struct{ t *testing.T }

func (f failingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.t.Errorf("unexpected request %s %s", r.Method, r.URL)
	return nil, errors.New("no requests expected")
}

func TestValidateUndecided(t *testing.T) {
	srv := httptest.NewServer(fakeUsers{kind: provider.GitHub,
		users:  map[string]string{"tok-weird-1": `{"message":"hello"}`, "tok-html-1": `<html>`},
		status: map[string]int{"tok-actions-1": http.StatusForbidden, "tok-busy-1": http.StatusTooManyRequests, "tok-down-1": http.StatusBadGateway},
	}.handler(t, ""))
	defer srv.Close()
	p, err := provider.New("github", provider.GitHub, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]string{
		"tok-actions-1": "answered 403 Forbidden; the owner is unknown",
		"tok-busy-1":    "answered 429 Too Many Requests",
		"tok-down-1":    "answered 502 Bad Gateway",
		"tok-weird-1":   "validation response names no owner",
		"tok-html-1":    "not the expected JSON object",
	} {
		c := NewToken("github", 1, tok, "test")
		_, err := Validate(context.Background(), http.DefaultTransport, p, c)
		if err == nil || !strings.Contains(err.Error(), want) || errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want %q", tok, err, want)
		}
		var ve *ValidationError
		if strings.Contains(want, "answered") && (!errors.As(err, &ve) || ve.StatusCode < 400) {
			t.Errorf("%s: not a ValidationError: %v", tok, err)
		}
		if st := c.Status(time.Now()); st.State != Unknown {
			t.Errorf("%s: state changed to %+v", tok, st)
		}
		if strings.Contains(err.Error(), tok) {
			t.Errorf("error reveals the token: %v", err)
		}
	}
}

func TestValidateOther(t *testing.T) {
	gh := builtin(t, "github")
	// Anonymous: nothing to ask.
	anon := NewAnonymous("github", 1)
	if owner, err := Validate(context.Background(), failingTransport{t}, gh, anon); owner != "anonymous" || err != nil {
		t.Errorf("anonymous: %q %v", owner, err)
	}
	// Generic: no endpoint.
	corp, err := provider.New("corp", provider.Generic, "https://git.example.com")
	if err != nil {
		t.Fatal(err)
	}
	c := NewToken("corp", 1, "tok-corp-1", "test")
	if _, err := Validate(context.Background(), failingTransport{t}, corp, c); !errors.Is(err, provider.ErrNoValidation) {
		t.Errorf("generic: %v", err)
	}
	// A credential is never sent to another provider.
	if _, err := Validate(context.Background(), failingTransport{t}, gh, c); err == nil || !strings.Contains(err.Error(), "belongs to provider corp, not github") {
		t.Errorf("cross-provider: %v", err)
	}
	// Network errors are returned, state unchanged.
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	p, _ := provider.New("github", provider.GitHub, srv.URL)
	tc := NewToken("github", 1, "tok-alice-1", "test")
	if _, err := Validate(context.Background(), http.DefaultTransport, p, tc); err == nil || tc.State(time.Now()) != Unknown {
		t.Errorf("closed server: %v, state %s", err, tc.State(time.Now()))
	}
}

func TestValidateJSONOwner(t *testing.T) {
	// The owner shows up in JSON and slog once known, the token never.
	srv := httptest.NewServer(fakeUsers{kind: provider.GitHub, users: map[string]string{leakToken: `{"login":"octocat","id":1}`}}.handler(t, ""))
	defer srv.Close()
	p, _ := provider.New("github", provider.GitHub, srv.URL)
	c := NewToken("github", 1, leakToken, "test")
	if _, err := Validate(context.Background(), http.DefaultTransport, p, c); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(c)
	if leaks(string(b)) || !strings.Contains(string(b), `"owner":"octocat (id 1)"`) {
		t.Errorf("JSON = %s", b)
	}
}
