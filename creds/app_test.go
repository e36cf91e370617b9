package creds

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/provider"
)

var (
	appKeyOnce sync.Once
	appKey     *rsa.PrivateKey
)

// testAppKey generates one RSA key for all App tests (generation is the slow
// part).
func testAppKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	appKeyOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		appKey = k
	})
	return appKey
}

func writeKey(t *testing.T, pemType string, der []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fakeGitHubApps implements GitHub's POST
// {prefix}/app/installations/{id}/access_tokens: it checks the App's JWT
// (RS256 signature with the App's public key, issuer, issue and expiry
// times) and mints numbered tokens that expire after ttl.
type fakeGitHubApps struct {
	t      *testing.T
	appID  int64
	pub    *rsa.PublicKey
	prefix string
	ttl    time.Duration
	reject map[int64]int // installation → status to answer

	mu    sync.Mutex
	mints map[int64]int
}

func (f *fakeGitHubApps) minted(id int64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mints[id]
}

func (f *fakeGitHubApps) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, f.prefix+"/app/installations/")
	idText, ok2 := strings.CutSuffix(rest, "/access_tokens")
	id, err := strconv.ParseInt(idText, 10, 64)
	if r.Method != http.MethodPost || !ok || !ok2 || err != nil {
		f.t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
		http.NotFound(w, r)
		return
	}
	jwt, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if err := f.verify(jwt, time.Now()); err != nil {
		f.t.Errorf("bad App JWT: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if code, ok := f.reject[id]; ok {
		w.WriteHeader(code)
		fmt.Fprint(w, `{"message":"Not Found"}`)
		return
	}
	f.mu.Lock()
	f.mints[id]++
	n := f.mints[id]
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{
		"token":      fmt.Sprintf("tok-inst-%d-%d", id, n),
		"expires_at": time.Now().Add(f.ttl).UTC().Format(time.RFC3339),
	})
}

func (f *fakeGitHubApps) verify(jwt string, now time.Time) error {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return errors.New("not three parts")
	}
	var header struct{ Alg string }
	var claims struct {
		Iss      string
		Iat, Exp int64
	}
	for i, v := range []any{&header, &claims} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, v); err != nil {
			return err
		}
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if header.Alg != "RS256" {
		return fmt.Errorf("alg %s", header.Alg)
	}
	if err := rsa.VerifyPKCS1v15(f.pub, crypto.SHA256, sum[:], sig); err != nil {
		return err
	}
	if claims.Iss != strconv.FormatInt(f.appID, 10) {
		return fmt.Errorf("iss %q", claims.Iss)
	}
	if claims.Iat > now.Unix() || claims.Exp <= now.Unix() || claims.Exp-claims.Iat > 600 {
		return fmt.Errorf("iat %d exp %d now %d", claims.Iat, claims.Exp, now.Unix())
	}
	return nil
}

func newFakeApps(t *testing.T, prefix string, ttl time.Duration) *fakeGitHubApps {
	return &fakeGitHubApps{t: t, appID: 42, pub: &testAppKey(t).PublicKey, prefix: prefix, ttl: ttl,
		reject: map[int64]int{}, mints: map[int64]int{}}
}

func TestAppInstallations(t *testing.T) {
	key := testAppKey(t)
	keyFile := writeKey(t, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
	fake := newFakeApps(t, "/api/v3", time.Hour)
	fake.reject[999] = http.StatusNotFound
	fake.reject[500] = http.StatusInternalServerError
	srv := httptest.NewServer(fake)
	defer srv.Close()
	// A GitHub Enterprise Server: tokens are minted under /api/v3.
	p, err := provider.New("ghes", provider.GitHub, srv.URL+"/api/v3")
	if err != nil {
		t.Fatal(err)
	}
	p.App = &provider.AppConfig{AppID: 42, PrivateKeyFile: keyFile, InstallationIDs: []int64{111, 222, 999, 500}}
	pool, notes, err := Load(p, Options{
		LookupEnv:    envOf(map[string]string{"GITHUB_TOKEN": "tok-bot-1"}),
		AppTransport: srv.Client().Transport,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 0 {
		t.Errorf("notes = %q", notes)
	}
	cs := pool.Credentials()
	if len(cs) != 5 {
		t.Fatalf("pool = %v", cs)
	}
	if cs[0].Kind() != Static {
		t.Errorf("env token not first: %v", cs[0])
	}
	i111, i222, i999, i500 := cs[1], cs[2], cs[3], cs[4]
	if i111.Masked() != "#2 app:42/installation:111" || i111.Kind() != AppInstallation || i111.Index() != 2 ||
		i111.BucketOwner() != "app:42/installation:111" || i222.BucketOwner() != "app:42/installation:222" ||
		i111.Source() != "GitHub App 42 installation 111" {
		t.Errorf("installation credential: %s %s %d %s %s", i111.Masked(), i111.Kind(), i111.Index(), i111.BucketOwner(), i111.Source())
	}
	ctx := context.Background()
	for range 3 {
		if tok, err := i111.Token(ctx); err != nil || tok != "tok-inst-111-1" {
			t.Fatalf("Token = %q, %v", tok, err)
		}
	}
	if n := fake.minted(111); n != 1 {
		t.Errorf("minted %d tokens for a valid one", n)
	}
	if tok, _ := i222.Token(ctx); tok != "tok-inst-222-1" {
		t.Errorf("installation 222 token = %q", tok)
	}
	// Validation mints (already done: no new request) and knows the owner.
	if owner, err := Validate(ctx, failingTransport{t}, p, i111); err != nil || owner != "app:42/installation:111" || i111.State(time.Now()) != Available {
		t.Errorf("Validate = %q, %v, state %s", owner, err, i111.State(time.Now()))
	}
	// An owner learnt elsewhere does not merge installations into one bucket.
	i222.SetOwner(ownerOf("acme[bot]", "7"))
	i222.ShareBucketWith(i111)
	if i222.BucketOwner() != "app:42/installation:222" {
		t.Errorf("installation bucket changed to %s", i222.BucketOwner())
	}
	// A rejected installation is invalid; a server error is not.
	if _, err := Validate(ctx, failingTransport{t}, p, i999); !errors.Is(err, ErrInvalid) || i999.State(time.Now()) != Invalid ||
		!strings.Contains(i999.Status(time.Now()).Reason, "404") {
		t.Errorf("rejected installation: %v, %+v", err, i999.Status(time.Now()))
	}
	if _, err := Validate(ctx, failingTransport{t}, p, i500); err == nil || errors.Is(err, ErrInvalid) || i500.State(time.Now()) != Unknown {
		t.Errorf("server error: %v, %s", err, i500.State(time.Now()))
	}
	// Nothing printable reveals an installation token or the key.
	type holder struct {
		c Credential
		p *Credential
	}
	keyPEM, _ := os.ReadFile(keyFile)
	keyLine := strings.Split(string(keyPEM), "\n")[1]
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%d"} {
		out := fmt.Sprintf(verb, holder{*i111, i111}) + fmt.Sprintf(verb, *i111)
		if strings.Contains(out, "tok-inst") || strings.Contains(out, keyLine[:16]) || strings.Contains(out, "PRIVATE") {
			t.Errorf("%s reveals a secret: %s", verb, out)
		}
	}
}

func TestAppInstallationsBadInput(t *testing.T) {
	key := testAppKey(t)
	good := writeKey(t, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(key)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	notPEM := filepath.Join(t.TempDir(), "key.txt")
	os.WriteFile(notPEM, []byte("not a key"), 0o600)
	gh := builtin(t, "github")
	gl := builtin(t, "gitlab")
	tests := []struct {
		p    *provider.Provider
		app  provider.AppConfig
		want string
	}{
		{gh, provider.AppConfig{AppID: 1, PrivateKeyFile: writeKey(t, "PRIVATE KEY", pkcs8), InstallationIDs: []int64{1}}, ""},
		{gh, provider.AppConfig{AppID: 1, PrivateKeyFile: good, InstallationIDs: []int64{1}}, ""},
		{gl, provider.AppConfig{AppID: 1, PrivateKeyFile: good, InstallationIDs: []int64{1}}, "gitlab: GitHub App installations need a provider of kind github, not gitlab"},
		{gh, provider.AppConfig{AppID: 0, PrivateKeyFile: good, InstallationIDs: []int64{1}}, "GitHub App id must be a positive number"},
		{gh, provider.AppConfig{AppID: 1, PrivateKeyFile: good}, "no installation ids"},
		{gh, provider.AppConfig{AppID: 1, PrivateKeyFile: good, InstallationIDs: []int64{1, 1}}, "installation id 1 is not positive or listed twice"},
		{gh, provider.AppConfig{AppID: 1, PrivateKeyFile: filepath.Join(t.TempDir(), "missing.pem"), InstallationIDs: []int64{1}}, "cannot read private key: open "},
		{gh, provider.AppConfig{AppID: 1, PrivateKeyFile: notPEM, InstallationIDs: []int64{1}}, "not PEM-encoded"},
		{gh, provider.AppConfig{AppID: 1, PrivateKeyFile: writeKey(t, "PRIVATE KEY", ecDER), InstallationIDs: []int64{1}}, "GitHub Apps use RSA keys"},
		{gh, provider.AppConfig{AppID: 1, PrivateKeyFile: writeKey(t, "RSA PRIVATE KEY", []byte("junk")), InstallationIDs: []int64{1}}, `PEM block "RSA PRIVATE KEY" is not an RSA private key`},
	}
	for _, tt := range tests {
		_, err := NewAppInstallations(tt.p, tt.app, 1, nil)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tt.app, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: err = %v, want %q", tt.app, err, tt.want)
		}
	}
}

// handlerTransport serves requests in-process, so that a synctest bubble
// (where real sockets would keep time from advancing) can drive the fake
// GitHub.
type handlerTransport struct{ h http.Handler }

func (ht handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		defer r.Body.Close()
	}
	rec := httptest.NewRecorder()
	ht.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// TestAppTokenRefresh drives time with testing/synctest: an installation
// token that lives 10 minutes is reused while fresh and replaced before it
// expires, never after.
func TestAppTokenRefresh(t *testing.T) {
	key := testAppKey(t)
	keyFile := writeKey(t, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
	synctest.Test(t, func(t *testing.T) {
		fake := newFakeApps(t, "", 10*time.Minute)
		p, err := provider.New("github", provider.GitHub, "https://api.github.com")
		if err != nil {
			t.Fatal(err)
		}
		cs, err := NewAppInstallations(p, provider.AppConfig{AppID: 42, PrivateKeyFile: keyFile, InstallationIDs: []int64{7}}, 1, handlerTransport{fake})
		if err != nil {
			t.Fatal(err)
		}
		c := cs[0]
		start := time.Now()
		expiresOf := map[string]time.Time{}
		for _, step := range []struct {
			elapsed time.Duration
			want    string
		}{
			{0, "tok-inst-7-1"},
			{5 * time.Minute, "tok-inst-7-1"},
			{8*time.Minute + 59*time.Second, "tok-inst-7-1"},
			{9*time.Minute + 30*time.Second, "tok-inst-7-2"}, // within a minute of expiry: refreshed
			{15 * time.Minute, "tok-inst-7-2"},
			{45 * time.Minute, "tok-inst-7-3"}, // long idle: refreshed, not the expired one
		} {
			time.Sleep(time.Until(start.Add(step.elapsed)))
			tok, err := c.Token(context.Background())
			if err != nil {
				t.Fatalf("at %v: %v", step.elapsed, err)
			}
			if tok != step.want {
				t.Errorf("at %v: token %s, want %s", step.elapsed, tok, step.want)
			}
			if _, ok := expiresOf[tok]; !ok {
				expiresOf[tok] = time.Now().Add(10 * time.Minute)
			}
			if !time.Now().Before(expiresOf[tok]) {
				t.Errorf("at %v: %s returned after it expired", step.elapsed, tok)
			}
		}
		if n := fake.minted(7); n != 3 {
			t.Errorf("minted %d tokens, want 3", n)
		}
	})
}
