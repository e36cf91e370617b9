package ratekeeper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/transport"
)

// bitbucketAPI is an API added from outside package provider, the way
// docs/architecture.md says a new API is added: one type implementing
// provider.API (here embedding provider.GenericAPI and writing only what
// differs) and one Register call. It is a toy, not Bitbucket's real
// rules: a token in X-Bb-Token from BITBUCKET_TOKEN, a bucket of its own
// for /repositories, its owner at /me.
type bitbucketAPI struct{ provider.GenericAPI }

func (bitbucketAPI) Kind() provider.Kind { return "bitbucket" }

func (bitbucketAPI) Aliases() []string { return []string{"bb"} }

func (bitbucketAPI) Auth() provider.Auth { return provider.Auth{Header: "X-Bb-Token"} }

func (bitbucketAPI) TokenEnv(string, *url.URL) []string { return []string{"BITBUCKET_TOKEN"} }

func (bitbucketAPI) Classify(method, rel string) provider.Request {
	r := provider.Request{Resource: "api", Write: provider.IsWrite(method)}
	if strings.HasPrefix(rel, "/repositories/") {
		r.Resource = "repositories"
	}
	return r
}

func (bitbucketAPI) WhoAmIURL(base *url.URL) *url.URL {
	return &url.URL{Scheme: base.Scheme, Host: base.Host, Path: base.Path + "/me"}
}

func (bitbucketAPI) ParseOwner(body []byte) (provider.Owner, error) {
	var v struct {
		AccountID string `json:"account_id"`
		Nickname  string `json:"nickname"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.AccountID == "" {
		return provider.Owner{}, fmt.Errorf("who am I answer names no account: %s", body)
	}
	return provider.Owner{ID: v.AccountID, Name: v.Nickname}, nil
}

func init() {
	if err := provider.Register(bitbucketAPI{}); err != nil {
		panic(err)
	}
}

// toyServer answers as the toy API: /me names the owner of each token, and
// every other path states a limit per bucket, /repositories 500 an hour and
// the rest 1,000. It records the token each request carried.
type toyServer struct {
	mu     sync.Mutex
	tokens []string // "path token" per request
}

func (s *toyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok := r.Header.Get("X-Bb-Token")
	s.mu.Lock()
	s.tokens = append(s.tokens, r.URL.Path+" "+tok+" "+r.Header.Get("Authorization"))
	s.mu.Unlock()
	accounts := map[string]string{"bb-alice-0001": "alice", "bb-bob-00002": "bob"}
	if r.URL.Path == "/bb/me" {
		name, ok := accounts[tok]
		if !ok {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, `{"account_id":"{%s-id}","nickname":%q}`, name, name)
		return
	}
	limit := "1000"
	if strings.HasPrefix(r.URL.Path, "/bb/repositories/") {
		limit = "500"
	}
	w.Header().Set("X-RateLimit-Limit", limit)
	w.Header().Set("X-RateLimit-Remaining", "400")
	w.Header().Set("X-RateLimit-Reset", fmt.Sprint(time.Now().Add(time.Hour).Unix()))
	fmt.Fprintln(w, `{"ok":true}`)
}

// An API added through the public interface serves a fetch: its alias and
// its kind key pick it, its variable and header carry the token, its "who
// am I" names the owners, and its paths spend from its own buckets.
func TestAPIAddedOutsideTheProviderPackage(t *testing.T) {
	if got := provider.KindOf("bb"); got != "bitbucket" {
		t.Fatalf("KindOf(bb) = %q, want bitbucket", got)
	}
	if err := provider.Register(bitbucketAPI{}); err == nil {
		t.Error("a second Register of kind bitbucket succeeded")
	}
	srv := &toyServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	t.Setenv("BITBUCKET_TOKEN", "bb-alice-0001,bb-bob-00002")

	config := filepath.Join(t.TempDir(), "rk.toml")
	if err := os.WriteFile(config, []byte("[providers.work]\nkind = \"bitbucket\"\nbase_url = \""+ts.URL+"/bb\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		how, name string
		opts      ratekeeper.Options
	}{
		{"alias in --provider", "bb", ratekeeper.Options{Providers: []string{"bb=" + ts.URL + "/bb"}}},
		{"kind in the config", "work", ratekeeper.Options{ConfigFile: config}},
	} {
		t.Run(c.how, func(t *testing.T) {
			opts := c.opts
			srv.mu.Lock()
			srv.tokens = nil
			srv.mu.Unlock()
			opts.Tune = func(o *transport.Options) { o.AskOwnerFirst = true }
			tr, err := ratekeeper.NewTransport(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			client := &http.Client{Transport: tr}
			for _, path := range []string{"/repositories/o/r", "/users/o", "/repositories/o/r2", "/users/p"} {
				resp, err := client.Get(ts.URL + "/bb" + path)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("GET %s: %s", path, resp.Status)
				}
			}
			checkToyRequests(t, srv)
			checkToyStatus(t, tr, c.name)
		})
	}
}

// checkToyRequests: every request carried one of the variable's tokens in
// the API's header and nothing in Authorization, and each token's owner was
// asked at /me.
func checkToyRequests(t *testing.T, srv *toyServer) {
	t.Helper()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	asked := map[string]bool{}
	for _, seen := range srv.tokens {
		f := strings.Split(seen, " ")
		if f[1] != "bb-alice-0001" && f[1] != "bb-bob-00002" || f[2] != "" {
			t.Errorf("request %s carried X-Bb-Token %q and Authorization %q", f[0], f[1], f[2])
		}
		if f[0] == "/bb/me" {
			asked[f[1]] = true
		}
	}
	if !asked["bb-alice-0001"] || !asked["bb-bob-00002"] {
		t.Errorf("owners asked for %v, want both tokens; requests %q", asked, srv.tokens)
	}
}

// checkToyStatus: each credential's owner is the one /me named, and the
// requests spent from the API's two buckets at the limits stated.
func checkToyStatus(t *testing.T, tr *transport.Transport, name string) {
	t.Helper()
	sts, err := tr.Status(context.Background(), time.Now(), name)
	if err != nil {
		t.Fatal(err)
	}
	owners, limits := map[string]bool{}, map[string]int64{}
	for _, st := range sts {
		owners[st.Owner] = true
		for _, r := range st.Resources {
			if r.Limit != nil {
				limits[r.Resource] = *r.Limit
			}
		}
	}
	if len(sts) != 2 || !owners["alice (id {alice-id})"] || !owners["bob (id {bob-id})"] {
		t.Errorf("owners %v of %d credentials, want alice and bob", owners, len(sts))
	}
	if limits["repositories"] != 500 || limits["api"] != 1000 {
		t.Errorf("limits by resource %v, want repositories 500 and api 1000", limits)
	}
}

// A registered API's token variable is never sent to a host no provider
// owns, even one named like it.
func TestRegisteredAPIsVariableNotSentToALookAlike(t *testing.T) {
	if !slices.Contains(provider.FixedTokenEnv(), "BITBUCKET_TOKEN") {
		t.Fatalf("FixedTokenEnv %v lacks the registered API's BITBUCKET_TOKEN", provider.FixedTokenEnv())
	}
	for _, env := range []string{"GITHUB_TOKEN", "GH_TOKEN", "GITLAB_TOKEN", "HF_TOKEN"} {
		if !slices.Contains(provider.FixedTokenEnv(), env) {
			t.Errorf("FixedTokenEnv lacks %s", env)
		}
	}
}
