package sim

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// testAppKey is one RSA key for every App test (generating one is slow).
var testAppKey = func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}()

func testAppPEM() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(testAppKey)}))
}

// signJWT makes an App's JWT as a client does, with key k.
func signJWT(t *testing.T, k *rsa.PrivateKey, appID int64, iat, exp time.Time) string {
	t.Helper()
	enc := base64.RawURLEncoding
	h := enc.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`))
	c := enc.EncodeToString([]byte(`{"iss":"` + strconv.FormatInt(appID, 10) + `","iat":` + strconv.FormatInt(iat.Unix(), 10) + `,"exp":` + strconv.FormatInt(exp.Unix(), 10) + `}`))
	sum := sha256.Sum256([]byte(h + "." + c))
	sig, err := rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return h + "." + c + "." + enc.EncodeToString(sig)
}

func appConfig() Config {
	return Config{APIs: []APIConfig{{
		Dialect: "github", Secondary: noSecondary(), Window: time.Hour,
		Tokens: []TokenConfig{{Token: "fg-acme", Owner: "bot", Accounts: []string{"acme"}}, {Token: "classic", Owner: "carol"}},
		Apps: []AppConfig{{ID: 7, Slug: "keeper", PublicKey: testAppPEM(), Installations: []InstallationConfig{
			{ID: 11, Account: "acme", Repositories: 100, Users: 10},
			{ID: 12, Account: "globex", Limit: 50},
			{ID: 13, Account: "dora", AccountType: "User"},
		}}},
	}}}
}

func TestAppInstallationsTokensAndVisibility(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mustNew(t, appConfig())
		c := newClient(t, srv)
		now := time.Now()
		jwt := signJWT(t, testAppKey, 7, now.Add(-time.Minute), now.Add(9*time.Minute))

		a := c.get("/app/installations", jwt)
		if a.status != http.StatusOK {
			t.Fatalf("GET /app/installations: %d %s", a.status, a.body)
		}
		var list []struct {
			ID      int64 `json:"id"`
			Account struct {
				Login string `json:"login"`
				Type  string `json:"type"`
			} `json:"account"`
		}
		mustJSON(t, a.body, &list)
		if len(list) != 3 || list[0].Account.Login != "acme" || list[2].Account.Type != "User" {
			t.Fatalf("installations = %+v", list)
		}
		if got := a.h("X-Ratelimit-Limit"); got != "5000" {
			t.Errorf("JWT budget limit = %q, want the App's 5000", got)
		}
		if a := c.get("/repos/globex/x/installation", jwt); a.status != http.StatusOK || a.json(t)["id"].(float64) != 12 {
			t.Errorf("GET /repos/globex/x/installation: %d %s", a.status, a.body)
		}
		if a := c.get("/repos/nobody/x/installation", jwt); a.status != http.StatusNotFound {
			t.Errorf("installation of an owner without one: %d, want 404", a.status)
		}

		// A JWT signed by another key, or expired, is refused.
		other, _ := rsa.GenerateKey(rand.Reader, 1024)
		if a := c.get("/app/installations", signJWT(t, other, 7, now, now.Add(5*time.Minute))); a.status != http.StatusUnauthorized {
			t.Errorf("JWT of another key: %d, want 401", a.status)
		}
		if a := c.get("/app/installations", signJWT(t, testAppKey, 7, now.Add(-20*time.Minute), now.Add(-10*time.Minute))); a.status != http.StatusUnauthorized {
			t.Errorf("expired JWT: %d, want 401", a.status)
		}

		a = c.do(http.MethodPost, "/app/installations/11/access_tokens", "Authorization", "Bearer "+jwt)
		if a.status != http.StatusCreated {
			t.Fatalf("mint: %d %s", a.status, a.body)
		}
		var tok struct {
			Token     string    `json:"token"`
			ExpiresAt time.Time `json:"expires_at"`
		}
		if err := json.Unmarshal([]byte(a.body), &tok); err != nil || len(tok.Token) <= 40 || tok.ExpiresAt.Sub(now) != time.Hour {
			t.Fatalf("minted %d chars expiring %v (%v)", len(tok.Token), tok.ExpiresAt, err)
		}
		own := c.get("/repos/acme/app", tok.Token)
		if own.status != http.StatusOK || own.h("X-Ratelimit-Limit") != strconv.Itoa(5000+50*80) {
			t.Errorf("own repository: %d limit %s, want 200 and 5000 + 50 per repository beyond 20", own.status, own.h("X-Ratelimit-Limit"))
		}
		if a := c.get("/repos/globex/app", tok.Token); a.status != http.StatusNotFound || a.h("X-Ratelimit-Used") != "2" {
			t.Errorf("another account's repository: %d used %s, want a charged 404", a.status, a.h("X-Ratelimit-Used"))
		}
		// Private to their installations: a classic token sees neither
		// acme's nor globex's, but sees everyone else's.
		if a := c.get("/repos/acme/app", "classic"); a.status != http.StatusNotFound {
			t.Errorf("classic token on an installation's private repository: %d", a.status)
		}
		if a := c.get("/repos/public/app", "classic"); a.status != http.StatusOK {
			t.Errorf("classic token on a public repository: %d", a.status)
		}
		// A fine-grained token limited to acme.
		if a := c.get("/repos/acme/app", "fg-acme"); a.status != http.StatusOK {
			t.Errorf("fine-grained token on its organisation: %d", a.status)
		}
		if a := c.get("/repos/public/app", "fg-acme"); a.status != http.StatusNotFound {
			t.Errorf("fine-grained token elsewhere: %d", a.status)
		}

		time.Sleep(time.Hour)
		if a := c.get("/repos/acme/app", tok.Token); a.status != http.StatusUnauthorized {
			t.Errorf("expired installation token: %d, want 401", a.status)
		}
		st := srv.Stats()
		if st.Total.Hidden != 3 || st.Total.ExpiredTokens != 1 {
			t.Errorf("hidden %d expired %d, want 3 and 1", st.Total.Hidden, st.Total.ExpiredTokens)
		}
		if len(st.Apps) != 3 || st.Apps[0].Mints != 1 || st.Apps[0].Account != "acme" {
			t.Errorf("app stats %+v", st.Apps)
		}
	})
}

func TestInstallationLimit(t *testing.T) {
	for _, c := range []struct{ repos, users, want int64 }{{0, 0, 5000}, {20, 20, 5000}, {21, 0, 5050}, {100, 50, 5000 + 4000 + 1500}, {1000, 1000, 12500}} {
		if got := InstallationLimit(c.repos, c.users); got != c.want {
			t.Errorf("InstallationLimit(%d, %d) = %d, want %d", c.repos, c.users, got, c.want)
		}
	}
}

func TestAppConfigErrors(t *testing.T) {
	cfg := Config{APIs: []APIConfig{{Dialect: "gitlab", Apps: []AppConfig{{ID: 0, PublicKey: "nope", Installations: []InstallationConfig{{ID: 1}}}}}}}
	err := cfg.Validate()
	for _, want := range []string{"github dialect", "apps[0].id", "apps[0].public_key", "installations[0].account"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
}
