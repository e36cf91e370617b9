package transport

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
)

// installationTokens mints GitHub App installation tokens that live an
// hour, numbered: POST /sim/app/installations/7/access_tokens.
type installationTokens struct {
	mu    sync.Mutex
	n     int
	inner http.Handler // everything else: the simulated API
}

func (it *installationTokens) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/sim/app/installations/7/access_tokens" {
		it.inner.ServeHTTP(w, r)
		return
	}
	it.mu.Lock()
	it.n++
	n := it.n
	it.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"token":      fmt.Sprintf("ghs_installation7_%d", n),
		"expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
	})
}

func writeAppKey(t *testing.T) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "app.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(path, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A GitHub App installation token rotates every hour. GitHub's entity tag
// hashes the token, so the tag stored with the old token never matches a
// request with the new one; the transport sends the tag the server gives
// the new token for the stored body, and the repeat is a free 304.
func TestRotatedTokenRevalidatesTheOldTokensAnswer(t *testing.T) {
	keyFile := writeAppKey(t)
	synctest.Test(t, func(t *testing.T) {
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Prefix: "/sim", Tokens: []sim.TokenConfig{
			{Token: "ghs_installation7_1", Owner: "installation-7"}, {Token: "ghs_installation7_2", Owner: "installation-7"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		mux := &installationTokens{inner: srv}
		var lastAuth string
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			lastAuth = req.Header.Get("Authorization")
			return handlerRT{mux}.RoundTrip(req)
		})
		p, err := provider.New("github", provider.GitHub, "http://sim.test/sim")
		if err != nil {
			t.Fatal(err)
		}
		reg := provider.NewRegistry()
		if err := reg.Add(p); err != nil {
			t.Fatal(err)
		}
		inst, err := creds.NewAppInstallations(p, provider.AppConfig{AppID: 1, PrivateKeyFile: keyFile, InstallationIDs: []int64{7}}, 1, handlerRT{mux})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := New(Options{Providers: reg, Pools: map[string]*creds.Pool{"github": creds.NewPool("github", inst...)},
			Base: base, Policy: quota.Policy{Kind: quota.Greedy}})
		if err != nil {
			t.Fatal(err)
		}
		get := func() (*http.Response, string) {
			req, _ := http.NewRequest(http.MethodGet, "http://sim.test/sim/repos/o/r", nil)
			req.Header.Set("Accept", "application/vnd.github+json")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			return resp, drain(resp)
		}
		first, body := get()
		if first.Header.Get(HeaderCache) != "miss" || lastAuth != "Bearer ghs_installation7_1" {
			t.Fatalf("first: cache %q, sent with %q", first.Header.Get(HeaderCache), lastAuth)
		}
		time.Sleep(59*time.Minute + 30*time.Second) // the token is refreshed within its last minute
		again, repeat := get()
		if lastAuth != "Bearer ghs_installation7_2" {
			t.Fatalf("the repeat went with %q, want the rotated token", lastAuth)
		}
		if again.StatusCode != 200 || again.Header.Get(HeaderCache) != "revalidated" || repeat != body {
			t.Fatalf("repeat with the rotated token: %d, cache %q", again.StatusCode, again.Header.Get(HeaderCache))
		}
		b, _ := srv.Stats().BucketFor("github", "installation-7", "core")
		if b.Charged != 1 || b.NotModified != 1 {
			t.Fatalf("charged %d with %d 304s, want 1 and 1", b.Charged, b.NotModified)
		}
	})
}

// roundTripFunc is a RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
