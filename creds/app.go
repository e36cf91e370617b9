package creds

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/ratekeeper/ratekeeper/provider"
)

// NewAppInstallations returns one credential per installation of a GitHub
// App, indexed from firstIndex. Each installation's token is minted from the
// App's private key on first use and refreshed by ghinstallation shortly
// before it expires (installation tokens live one hour), against p's base
// URL, so GitHub Enterprise Server works as well as api.github.com. rt
// carries the minting requests (nil: http.DefaultTransport).
//
// Each installation is its own bucket: its [Credential.BucketOwner] is
// "app:APPID/installation:ID".
func NewAppInstallations(p *provider.Provider, app provider.AppConfig, firstIndex int, rt http.RoundTripper) ([]*Credential, error) {
	if !p.SupportsApps() {
		return nil, fmt.Errorf("%s: GitHub App installations need a provider of kind github, not %s", p.Name, p.Kind)
	}
	if app.AppID <= 0 {
		return nil, fmt.Errorf("%s: GitHub App id must be a positive number, got %d", p.Name, app.AppID)
	}
	if len(app.InstallationIDs) == 0 {
		return nil, fmt.Errorf("%s: GitHub App %d: no installation ids; list the installations to use", p.Name, app.AppID)
	}
	pemBytes, err := os.ReadFile(app.PrivateKeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: GitHub App %d: cannot read private key: %v", p.Name, app.AppID, err)
	}
	key, err := parseRSAKey(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: GitHub App %d: private key file %s: %v", p.Name, app.AppID, app.PrivateKeyFile, err)
	}
	if rt == nil {
		rt = http.DefaultTransport
	}
	base := p.BaseURL().String()
	out := make([]*Credential, 0, len(app.InstallationIDs))
	seen := map[int64]bool{}
	for _, id := range app.InstallationIDs {
		if id <= 0 || seen[id] {
			return nil, fmt.Errorf("%s: GitHub App %d: installation id %d is not positive or listed twice", p.Name, app.AppID, id)
		}
		seen[id] = true
		// One AppsTransport per installation: ghinstallation writes the
		// shared AppsTransport's fields while refreshing, which would race
		// between installations refreshing at once.
		atr := ghinstallation.NewAppsTransportFromPrivateKey(rt, app.AppID, key)
		atr.BaseURL = base
		itr := ghinstallation.NewFromAppsTransport(atr, id)
		itr.BaseURL = base
		owner := fmt.Sprintf("app:%d/installation:%d", app.AppID, id)
		index := firstIndex + len(out)
		out = append(out, &Credential{
			index:    index,
			provider: p.Name,
			kind:     AppInstallation,
			source:   fmt.Sprintf("GitHub App %d installation %d", app.AppID, id),
			mint:     itr.Token,
			masked:   fmt.Sprintf("#%d %s", index, owner),
			identity: owner,
			st:       &state{ownerKey: owner},
		})
	}
	return out, nil
}

// parseRSAKey reads a PEM-encoded RSA private key in PKCS #1 (what GitHub
// hands out) or PKCS #8 form. Errors never quote the key.
func parseRSAKey(data []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("not PEM-encoded; expected the .pem file GitHub generates for the App")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("PEM block %q is not an RSA private key in PKCS #1 or PKCS #8 form", block.Type)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("private key is %T; GitHub Apps use RSA keys", k)
	}
	return rk, nil
}
