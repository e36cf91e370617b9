package creds

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/provider"
)

// AppLookInterval is how often an App looks again for an installation it
// did not find: GET /app/installations, or one owner's
// GET /repos/OWNER/REPO/installation. A new installation shows up within
// it, and an owner the App is not installed on costs at most one JWT
// request per interval.
const AppLookInterval = 3 * time.Minute

// App is a GitHub App whose installations are credentials. It mints each
// installation's token with a JWT signed by the App's key, and learns the
// installations' accounts (GET /app/installations, paid with the JWT, not
// with an installation's budget), so that a request goes to the
// installation of its repository's owner. Configured with installation
// ids, it uses those; without, every installation it finds, new ones
// included. An App is safe for concurrent use.
type App struct {
	provider string
	id       int64
	key      *rsa.PrivateKey
	base     string // the API's base URL, without a trailing slash
	rt       http.RoundTripper
	now      func() time.Time
	fixed    bool // installation ids were configured: use only those

	// look serialises the JWT requests that look for installations.
	look chan struct{}

	mu        sync.Mutex
	pool      *Pool // where discovered installations are added
	next      int   // the index the next discovered installation gets
	byID      map[int64]*Credential
	listed    time.Time            // last GET /app/installations that succeeded
	notFound  map[string]time.Time // owner (lower case) -> when its lookup found no installation
	jwt       string
	jwtExpiry time.Time
}

// installation is what an installation credential holds besides its
// state: its App, id, account, and its current token.
type installation struct {
	app *App
	id  int64
	// sem serialises mints, so concurrent requests wait for one token
	// rather than each minting its own.
	sem chan struct{}

	mu      sync.Mutex
	account string // login of the organisation or user; "" until listed
	// token returns the current token; a closure so that nothing
	// printing by reflection (a struct holding a Credential) sees it.
	token     func() string
	refreshAt time.Time // our clock: a few minutes before expires_at
	mints     int
}

// AppOptions tune [NewApp].
type AppOptions struct {
	// FirstIndex is the index of the App's first credential in its pool.
	FirstIndex int
	// Transport carries the JWT requests (nil: http.DefaultTransport). It
	// should not be a rate-keeping transport: they spend the App's own
	// budget, not an installation's.
	Transport http.RoundTripper
	// Now is the clock tokens' expiry is judged on (nil: time.Now).
	Now func() time.Time
}

// NewApp reads the App's key and makes a credential for each configured
// installation id (none when installation_ids is omitted: they are found
// by [App.Refresh]).
func NewApp(p *provider.Provider, cfg provider.AppConfig, opts AppOptions) (*App, error) {
	if !p.SupportsApps() {
		return nil, fmt.Errorf("%s: GitHub App installations need a provider of kind github, not %s", p.Name, p.Kind)
	}
	if cfg.AppID <= 0 {
		return nil, fmt.Errorf("%s: GitHub App id must be a positive number, got %d", p.Name, cfg.AppID)
	}
	pemBytes, err := os.ReadFile(cfg.PrivateKeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: GitHub App %d: cannot read private key: %v", p.Name, cfg.AppID, err)
	}
	key, err := parseRSAKey(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: GitHub App %d: private key file %s: %v", p.Name, cfg.AppID, cfg.PrivateKeyFile, err)
	}
	a := &App{
		provider: p.Name, id: cfg.AppID, key: key, base: strings.TrimSuffix(p.BaseURL().String(), "/"),
		rt: opts.Transport, now: opts.Now, fixed: len(cfg.InstallationIDs) > 0, look: make(chan struct{}, 1),
		next: max(opts.FirstIndex, 1), byID: map[int64]*Credential{}, notFound: map[string]time.Time{},
	}
	if a.rt == nil {
		a.rt = http.DefaultTransport
	}
	if a.now == nil {
		a.now = time.Now
	}
	for _, id := range cfg.InstallationIDs {
		if id <= 0 || a.byID[id] != nil {
			return nil, fmt.Errorf("%s: GitHub App %d: installation id %d is not positive or listed twice", p.Name, cfg.AppID, id)
		}
		a.addLocked(id, "")
	}
	return a, nil
}

// NewAppInstallations returns one credential per configured installation
// of a GitHub App, indexed from firstIndex (see [NewApp]); rt carries the
// minting requests.
//
// Each installation is its own bucket: its [Credential.BucketOwner] is
// "app:APPID/installation:ID".
func NewAppInstallations(p *provider.Provider, cfg provider.AppConfig, firstIndex int, rt http.RoundTripper) ([]*Credential, error) {
	if len(cfg.InstallationIDs) == 0 && p.SupportsApps() && cfg.AppID > 0 {
		return nil, fmt.Errorf("%s: GitHub App %d: no installation ids; list the installations to use", p.Name, cfg.AppID)
	}
	a, err := NewApp(p, cfg, AppOptions{FirstIndex: firstIndex, Transport: rt})
	if err != nil {
		return nil, err
	}
	return a.Credentials(), nil
}

// ID returns the App's id.
func (a *App) ID() int64 { return a.id }

// Credentials returns the installations' credentials known so far, by
// index.
func (a *App) Credentials() []*Credential {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*Credential, 0, len(a.byID))
	for _, c := range a.byID {
		out = append(out, c)
	}
	sortByIndex(out)
	return out
}

// addLocked makes the credential of installation id. Must hold a.mu.
func (a *App) addLocked(id int64, account string) *Credential {
	in := &installation{app: a, id: id, account: account, sem: make(chan struct{}, 1)}
	owner := fmt.Sprintf("app:%d/installation:%d", a.id, id)
	c := &Credential{
		index:    a.next,
		provider: a.provider,
		kind:     AppInstallation,
		source:   fmt.Sprintf("GitHub App %d installation %d", a.id, id),
		mint:     in.get,
		inst:     in,
		masked:   fmt.Sprintf("#%d %s", a.next, owner),
		identity: owner,
		st:       &state{ownerKey: owner},
	}
	a.next++
	a.byID[id] = c
	return c
}

// For returns the credential of the installation on account owner (any
// case), looking for it when it is not known: the App's installations are
// listed (once, then at most every [AppLookInterval]), and for an owner
// still without one, GET /repos/OWNER/REPO/installation (at most every
// AppLookInterval per owner; repo "" skips it). It returns nil when the
// App is not installed there, or a look failed.
func (a *App) For(ctx context.Context, owner, repo string) *Credential {
	owner = strings.ToLower(owner)
	if c := a.known(owner); c != nil {
		return c
	}
	select {
	case a.look <- struct{}{}:
	case <-ctx.Done():
		return nil
	}
	defer func() { <-a.look }()
	if c := a.known(owner); c != nil { // found while this one waited
		return c
	}
	now := a.now()
	a.mu.Lock()
	listDue := a.listed.IsZero() || now.Sub(a.listed) >= AppLookInterval
	lookDue := repo != "" && (a.notFound[owner].IsZero() || now.Sub(a.notFound[owner]) >= AppLookInterval)
	a.mu.Unlock()
	if listDue {
		if a.refresh(ctx) == nil {
			if c := a.known(owner); c != nil {
				return c
			}
		}
	}
	if !lookDue {
		return nil
	}
	var v installationJSON
	status, err := a.call(ctx, http.MethodGet, "/repos/"+url.PathEscape(owner)+"/"+url.PathEscape(repo)+"/installation", &v)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil && status == http.StatusOK && v.ID > 0 {
		return a.foundLocked(v)
	}
	if err == nil && status == http.StatusNotFound {
		a.notFound[owner] = now
	}
	return nil
}

// known returns the installation credential whose account is owner (lower
// case), or nil.
func (a *App) known(owner string) *Credential {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.byID {
		if strings.EqualFold(c.inst.Account(), owner) {
			return c
		}
	}
	return nil
}

// installationJSON is what GitHub says of an installation.
type installationJSON struct {
	ID      int64 `json:"id"`
	Account struct {
		Login string `json:"login"`
	} `json:"account"`
}

// foundLocked records an installation found by a look: the account of a
// configured one, or (without configured ids) a new credential, added to
// the pool. Must hold a.mu.
func (a *App) foundLocked(v installationJSON) *Credential {
	c := a.byID[v.ID]
	if c == nil {
		if a.fixed {
			return nil
		}
		c = a.addLocked(v.ID, v.Account.Login)
		if a.pool != nil {
			a.pool.add(c)
		}
		return c
	}
	c.inst.setAccount(v.Account.Login)
	return c
}

// Refresh lists the App's installations (GET /app/installations, every
// page), learning each one's account and, without configured ids, adding
// the new ones.
func (a *App) Refresh(ctx context.Context) error {
	select {
	case a.look <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-a.look }()
	return a.refresh(ctx)
}

func (a *App) refresh(ctx context.Context) error {
	var all []installationJSON
	for page := 1; page <= 100; page++ {
		var list []installationJSON
		status, err := a.call(ctx, http.MethodGet, "/app/installations?per_page=100&page="+strconv.Itoa(page), &list)
		if err != nil {
			return err
		}
		if status != http.StatusOK {
			return fmt.Errorf("GitHub App %d: listing installations answered %d", a.id, status)
		}
		all = append(all, list...)
		if len(list) < 100 {
			break
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, v := range all {
		a.foundLocked(v)
	}
	a.listed = a.now()
	return nil
}

// jwtLocked returns a JWT of the App, valid for nine minutes from a minute
// ago (GitHub allows ten, and clocks differ), reused until a minute before
// it expires. Must hold a.mu.
func (a *App) jwtLocked() (string, error) {
	now := a.now()
	if a.jwt != "" && now.Before(a.jwtExpiry.Add(-time.Minute)) {
		return a.jwt, nil
	}
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`))
	iat, exp := now.Add(-time.Minute), now.Add(9*time.Minute)
	claims := enc.EncodeToString([]byte(fmt.Sprintf(`{"iat":%d,"exp":%d,"iss":"%d"}`, iat.Unix(), exp.Unix(), a.id)))
	sum := sha256.Sum256([]byte(head + "." + claims))
	sig, err := rsa.SignPKCS1v15(rand.Reader, a.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("GitHub App %d: signing its JWT: %v", a.id, err)
	}
	a.jwt, a.jwtExpiry = head+"."+claims+"."+enc.EncodeToString(sig), exp
	return a.jwt, nil
}

// AppError is a JWT request GitHub answered with an error status.
type AppError struct {
	App    int64
	Status int
	What   string
}

func (e *AppError) Error() string {
	return fmt.Sprintf("GitHub App %d: %s answered %d %s", e.App, e.What, e.Status, http.StatusText(e.Status))
}

// call sends a request with the App's JWT and decodes a 2xx answer's JSON
// into v. It returns the status; errors never hold the JWT.
func (a *App) call(ctx context.Context, method, path string, v any) (int, error) {
	a.mu.Lock()
	jwt, err := a.jwtLocked()
	a.mu.Unlock()
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+jwt)
	req.Header.Set("Accept", "application/vnd.github+json")
	resp, err := a.rt.RoundTrip(req)
	if err != nil {
		return 0, fmt.Errorf("GitHub App %d: %s %s: %w", a.id, method, strings.SplitN(path, "?", 2)[0], err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode/100 == 2 && v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			return resp.StatusCode, fmt.Errorf("GitHub App %d: %s %s: not the expected JSON: %v", a.id, method, strings.SplitN(path, "?", 2)[0], err)
		}
	}
	return resp.StatusCode, nil
}

// Account returns the login of the account the installation is on, or ""
// before it is known.
func (in *installation) Account() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.account
}

func (in *installation) setAccount(login string) {
	in.mu.Lock()
	in.account = login
	in.mu.Unlock()
}

// get returns the installation's token, minting one when there is none or
// its refresh time has come: a twelfth of its lifetime before it expires
// (five minutes for GitHub's hour), so no request carries an expired
// token. Concurrent callers wait for one mint.
func (in *installation) get(ctx context.Context) (string, error) {
	select {
	case in.sem <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-in.sem }()
	now := in.app.now()
	in.mu.Lock()
	token, fresh := in.token, in.token != nil && now.Before(in.refreshAt)
	in.mu.Unlock()
	if fresh {
		return token(), nil
	}
	var v struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	sent := in.app.now()
	status, err := in.app.call(ctx, http.MethodPost, "/app/installations/"+strconv.FormatInt(in.id, 10)+"/access_tokens", &v)
	if err != nil {
		return "", err
	}
	if status != http.StatusCreated && status != http.StatusOK {
		return "", &AppError{App: in.app.id, Status: status, What: fmt.Sprintf("minting a token of installation %d", in.id)}
	}
	if v.Token == "" {
		return "", fmt.Errorf("GitHub App %d: minting a token of installation %d: the answer has no token", in.app.id, in.id)
	}
	// The lifetime is measured on the server's clock (expires_at
	// against the time the token was made, a second's rounding at
	// most), then laid on ours from when the mint was sent.
	life := v.ExpiresAt.Sub(sent)
	if life <= 0 || life > 24*time.Hour {
		life = time.Hour // the server's clock is far from ours: assume GitHub's hour
	}
	in.mu.Lock()
	tok := v.Token
	in.token, in.refreshAt = func() string { return tok }, sent.Add(life-life/12)
	in.mints++
	in.mu.Unlock()
	return v.Token, nil
}

// Mints returns how many tokens this process minted for the installation.
func (in *installation) Mints() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.mints
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
