package ratekeeper

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/ratekeeper/ratekeeper/sim"
)

// The library, configured as a user does (a config file naming the App and
// its key), sends each repository's requests to its owner's installation;
// a request that brings its own token goes with it alone, 404 included.
func TestLibraryRoutesAppInstallationsByOwner(t *testing.T) {
	t.Setenv("GITHUB_TOKEN", "")
	t.Setenv("GH_TOKEN", "")
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "app.pem"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	accounts := []string{"acme", "globex", "dora"}
	app := sim.AppConfig{ID: 9, PublicKey: string(keyPEM)}
	for i, a := range accounts {
		app.Installations = append(app.Installations, sim.InstallationConfig{ID: int64(40 + i), Account: a})
	}
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Secondary: &sim.SecondaryConfig{}, Apps: []sim.AppConfig{app},
		Tokens: []sim.TokenConfig{{Token: "github_pat_own_globex_only", Accounts: []string{"globex"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	cfg := fmt.Sprintf("[providers.github]\nbase_url = %q\n\n[providers.github.app]\napp_id = 9\nprivate_key_file = \"app.pem\"\n", ts.URL)
	if err := os.WriteFile(filepath.Join(dir, "rk.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	client := NewClient(Options{ConfigFile: filepath.Join(dir, "rk.toml"), DB: "memory"})
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Ratekeeper-Credential")
	}
	for i := range 10 {
		for j, a := range accounts {
			status, cred := get(fmt.Sprintf("/repos/%s/r%d", a, i), "")
			if want := fmt.Sprintf("#%d app:9/installation:%d", j+1, 40+j); status != http.StatusOK || cred != want {
				t.Fatalf("%s/r%d: %d by %q, want 200 by %q", a, i, status, cred, want)
			}
		}
	}
	if st := srv.Stats(); st.Total.Hidden != 0 {
		t.Errorf("%d requests went to an installation that cannot see the repository", st.Total.Hidden)
	}
	// The caller's own token, which cannot see acme: its 404 is the
	// answer, never tried with an installation.
	if status, _ := get("/repos/acme/r0", "github_pat_own_globex_only"); status != http.StatusNotFound {
		t.Errorf("own token on a repository it cannot see: %d, want its 404", status)
	}
	if st := srv.Stats(); st.Total.Hidden != 1 {
		t.Errorf("hidden %d, want the caller's one request", st.Total.Hidden)
	}
}
