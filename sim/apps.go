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
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// AppConfig is a GitHub App: the public half of its key, with which every
// JSON Web Token it sends is checked (RS256), and its installations, each
// on one account with a budget of its own. Only the github dialect has
// Apps.
type AppConfig struct {
	// ID is the App's id: the JWT's iss claim. Required, unique.
	ID int64 `toml:"id" json:"id"`
	// Slug names the App in GET /app.
	Slug string `toml:"slug" json:"slug"`
	// PublicKey is the PEM of the App's public key (or of its private key,
	// whose public half is used); PublicKeyFile reads it from a file.
	PublicKey     string `toml:"public_key" json:"public_key"`
	PublicKeyFile string `toml:"public_key_file" json:"public_key_file"`
	// TokenLifetime is how long an installation token lives. Default: an
	// hour, as on GitHub; shorter to scale time down.
	TokenLifetime time.Duration `toml:"token_lifetime" json:"token_lifetime"`
	// Limit is the budget of the requests paid with the App's JWT
	// (GET /app/installations, GET /repos/O/R/installation, minting).
	// Default: the API's Limit.
	Limit int64 `toml:"limit" json:"limit"`
	// Installations are the accounts the App is installed on.
	Installations []InstallationConfig `toml:"installations" json:"installations"`
}

// InstallationConfig is one installation of an App: the account it is on,
// whose repositories (all private, seen by no other installation) its
// tokens see, and its budget.
type InstallationConfig struct {
	// ID is the installation's id, unique in the API. Required.
	ID int64 `toml:"id" json:"id"`
	// Account is the login of the organisation or user. Required.
	Account string `toml:"account" json:"account"`
	// AccountType is "Organization" (default) or "User".
	AccountType string `toml:"account_type" json:"account_type"`
	// Repositories and Users size the budget as GitHub does: 5,000 an
	// hour plus 50 per repository and per user beyond 20, up to 12,500.
	Repositories int64 `toml:"repositories" json:"repositories"`
	Users        int64 `toml:"users" json:"users"`
	// Limit overrides that budget (per Window), e.g. to scale it down.
	Limit int64 `toml:"limit" json:"limit"`
}

// InstallationLimit is GitHub's hourly budget of an installation with
// this many repositories and users (on an organisation): 5,000, plus 50
// per repository beyond 20 and 50 per user beyond 20, at most 12,500.
func InstallationLimit(repositories, users int64) int64 {
	n := int64(5000) + 50*max(repositories-20, 0) + 50*max(users-20, 0)
	return min(n, 12500)
}

// simApp is an App of one API.
type simApp struct {
	cfg      AppConfig
	key      *rsa.PublicKey
	lifetime time.Duration
	owner    *owner // what its JWT's requests spend
	insts    []*installation
}

// installation is one installation: an owner whose tokens see only its
// account's repositories.
type installation struct {
	app         *simApp
	id          int64
	account     string
	accountType string
	owner       *owner
	mints       atomic.Int64
}

// minted is an installation token the server handed out.
type minted struct {
	inst    *installation
	expires time.Time // server clock
}

// apps is the App side of one API; nil without Apps.
type apps struct {
	list   []*simApp
	byID   map[int64]*installation
	tokens sync.Map // token text -> *minted
}

func readAppKey(ac AppConfig) (*rsa.PublicKey, error) {
	data := []byte(ac.PublicKey)
	if ac.PublicKeyFile != "" {
		b, err := os.ReadFile(ac.PublicKeyFile)
		if err != nil {
			return nil, err
		}
		data = b
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block (want the App's public key, or its private key)")
	}
	if k, err := x509.ParsePKIXPublicKey(block.Bytes); err == nil {
		if rk, ok := k.(*rsa.PublicKey); ok {
			return rk, nil
		}
	}
	if k, err := x509.ParsePKCS1PublicKey(block.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return &k.PublicKey, nil
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if rk, ok := k.(*rsa.PrivateKey); ok {
			return &rk.PublicKey, nil
		}
	}
	return nil, fmt.Errorf("PEM block %q is not an RSA key", block.Type)
}

func validateApps(p, dialect string, list []AppConfig) []error {
	if len(list) == 0 {
		return nil
	}
	var errs []error
	if dialect != DialectGitHub {
		errs = append(errs, fieldErr(p+".apps", "GitHub Apps need the github dialect, not %s", dialect))
	}
	apps, insts := map[int64]bool{}, map[int64]bool{}
	for i, ac := range list {
		ap := fmt.Sprintf("%s.apps[%d]", p, i)
		if ac.ID <= 0 || apps[ac.ID] {
			errs = append(errs, fieldErr(ap+".id", "%d is not positive or is used twice (want the App's own id)", ac.ID))
		}
		apps[ac.ID] = true
		if _, err := readAppKey(ac); err != nil {
			errs = append(errs, fieldErr(ap+".public_key", "%v", err))
		}
		if ac.TokenLifetime < 0 || ac.Limit < 0 {
			errs = append(errs, fieldErr(ap, "token_lifetime and limit must not be negative"))
		}
		for j, ic := range ac.Installations {
			ip := fmt.Sprintf("%s.installations[%d]", ap, j)
			if ic.ID <= 0 || insts[ic.ID] {
				errs = append(errs, fieldErr(ip+".id", "%d is not positive or is used twice", ic.ID))
			}
			insts[ic.ID] = true
			if ic.Account == "" {
				errs = append(errs, fieldErr(ip+".account", "empty (want the login of the organisation or user it is installed on)"))
			}
			if t := ic.AccountType; t != "" && t != "Organization" && t != "User" {
				errs = append(errs, fieldErr(ip+".account_type", "%q (want Organization or User)", t))
			}
			if ic.Limit < 0 || ic.Repositories < 0 || ic.Users < 0 {
				errs = append(errs, fieldErr(ip, "limit, repositories and users must not be negative"))
			}
		}
	}
	return errs
}

// addApps makes each App's owner (its JWT's budget) and each
// installation's.
func (a *api) addApps(list []AppConfig) {
	if len(list) == 0 {
		return
	}
	a.apps = &apps{byID: map[int64]*installation{}}
	for _, ac := range list {
		key, _ := readAppKey(ac)
		ap := &simApp{cfg: ac, key: key, lifetime: cmpOr(ac.TokenLifetime, time.Hour)}
		ap.owner = a.newOwner("app-"+strconv.FormatInt(ac.ID, 10), ac.ID, false)
		if ac.Limit > 0 {
			ap.owner.buckets[0].limit = ac.Limit
		}
		a.owners = append(a.owners, ap.owner)
		for _, ic := range ac.Installations {
			in := &installation{app: ap, id: ic.ID, account: ic.Account, accountType: cmpOr(ic.AccountType, "Organization")}
			in.owner = a.newOwner("installation-"+strconv.FormatInt(ic.ID, 10), ic.ID, false)
			in.owner.accounts = []string{ic.Account}
			in.owner.buckets[0].limit = cmpOr(ic.Limit, InstallationLimit(ic.Repositories, ic.Users))
			a.owners = append(a.owners, in.owner)
			ap.insts = append(ap.insts, in)
			a.apps.byID[ic.ID] = in
		}
		a.apps.list = append(a.apps.list, ap)
	}
}

// private reports whether login's repositories are private to an
// installation: those of an account an App is installed on.
func (a *api) private(login string) bool {
	if a.apps == nil {
		return false
	}
	for _, in := range a.apps.byID {
		if strings.EqualFold(in.account, login) {
			return true
		}
	}
	return false
}

// authenticateApp authenticates a token that is no configured one: an
// installation token (expired ones are refused 401 and counted), or an
// App's JWT, whose requests are routed to the App's endpoints and spend
// the App's budget. It reports whether the token was one of these; ok
// says whether the call goes on (it answered otherwise).
func (a *api) authenticateApp(c *call, tok string) (handled, ok bool) {
	if a.apps == nil {
		return false, false
	}
	if v, found := a.apps.tokens.Load(tok); found {
		m := v.(*minted)
		if !c.now.Before(m.expires) {
			b := m.inst.owner.buckets[c.ep.res]
			b.countExpired()
			st := b.record(c.now, m.inst.owner.inFlight.Load(), outUnauthorized)
			a.reply(c, a.d.unauthorized(c, false), st, false, 0)
			return true, false
		}
		c.own = m.inst.owner
		return true, true
	}
	if strings.Count(tok, ".") != 2 {
		return false, false
	}
	ap, err := a.apps.verifyJWT(tok, c.now)
	if err != nil {
		rd := ghError(http.StatusUnauthorized, "A JSON web token could not be decoded", ghDocsRest)
		a.reply(c, rd, bucketState{}, false, 0)
		return true, false
	}
	c.own, c.jwt = ap.owner, true
	c.ep = a.appEndpoint(c, ap)
	return true, true
}

// verifyJWT checks an App's JWT as GitHub does: RS256 signed by the App
// whose id is its iss, issued no later than now (with a minute's grace),
// expiring after now and at most ten minutes after it was issued.
func (ap *apps) verifyJWT(tok string, now time.Time) (*simApp, error) {
	parts := strings.Split(tok, ".")
	hb, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	cb, err2 := base64.RawURLEncoding.DecodeString(parts[1])
	sig, err3 := base64.RawURLEncoding.DecodeString(parts[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	var hdr struct {
		Alg string `json:"alg"`
	}
	var claims struct {
		Iss json.RawMessage `json:"iss"`
		Iat int64           `json:"iat"`
		Exp int64           `json:"exp"`
	}
	if json.Unmarshal(hb, &hdr) != nil || json.Unmarshal(cb, &claims) != nil || hdr.Alg != "RS256" {
		return nil, errors.New("not an RS256 JWT")
	}
	iss, err := strconv.ParseInt(strings.Trim(string(claims.Iss), `"`), 10, 64)
	if err != nil {
		return nil, errors.New("iss is not an App id")
	}
	var app *simApp
	for _, x := range ap.list {
		if x.cfg.ID == iss {
			app = x
		}
	}
	if app == nil {
		return nil, errors.New("no such App")
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(app.key, crypto.SHA256, sum[:], sig); err != nil {
		return nil, err
	}
	n := now.Unix()
	if claims.Iat > n+60 || claims.Exp <= n || claims.Exp-claims.Iat > 600 {
		return nil, errors.New("JWT outside its lifetime")
	}
	return app, nil
}

// appEndpoint routes a request authenticated with App ap's JWT.
func (a *api) appEndpoint(c *call, ap *simApp) endpoint {
	s, m := c.segs, c.r.Method
	get := m == http.MethodGet
	dyn := func(f func(c *call) *rendered) endpoint {
		return endpoint{points: 1, dynamic: func(c *call, _ bucketState) *rendered { return f(c) }}
	}
	switch {
	case len(s) == 1 && s[0] == "app" && get:
		return dyn(func(c *call) *rendered {
			return jsonBody(http.StatusOK, map[string]any{"id": ap.cfg.ID, "slug": ap.cfg.Slug, "name": ap.cfg.Slug})
		})
	case len(s) == 2 && s[0] == "app" && s[1] == "installations" && get:
		return dyn(func(c *call) *rendered { return a.listInstallations(c, ap) })
	case len(s) == 4 && s[0] == "repos" && s[3] == "installation" && get,
		len(s) == 3 && (s[0] == "orgs" || s[0] == "users") && s[2] == "installation" && get:
		return dyn(func(c *call) *rendered {
			for _, in := range ap.insts {
				if strings.EqualFold(in.account, s[1]) {
					return jsonBody(http.StatusOK, installationJSON(c, in))
				}
			}
			return ghNotFound(c)
		})
	case len(s) == 4 && s[0] == "app" && s[1] == "installations" && s[3] == "access_tokens" && m == http.MethodPost:
		return dyn(func(c *call) *rendered { return a.mint(c, ap, s[2]) })
	}
	return dyn(func(c *call) *rendered {
		return ghError(http.StatusForbidden, "A JSON web token cannot be used for this request", ghDocsRest)
	})
}

// listInstallations answers GET /app/installations, a page at a time
// (per_page up to 100, default 30; page from 1) with GitHub's Link header.
func (a *api) listInstallations(c *call, ap *simApp) *rendered {
	q := c.r.URL.Query()
	per, _ := strconv.Atoi(q.Get("per_page"))
	per = min(cmpOr(max(per, 0), 30), 100)
	page, _ := strconv.Atoi(q.Get("page"))
	page = max(page, 1)
	from := min((page-1)*per, len(ap.insts))
	to := min(from+per, len(ap.insts))
	list := make([]map[string]any, 0, to-from)
	for _, in := range ap.insts[from:to] {
		list = append(list, installationJSON(c, in))
	}
	rd := jsonBody(http.StatusOK, list)
	if to < len(ap.insts) {
		u := c.base() + "/app/installations?per_page=" + strconv.Itoa(per) + "&page=" + strconv.Itoa(page+1)
		rd = rd.with("Link", "<"+u+`>; rel="next"`)
	}
	return rd
}

func installationJSON(c *call, in *installation) map[string]any {
	return map[string]any{
		"id":        in.id,
		"app_id":    in.app.cfg.ID,
		"target_id": c.a.ownerID(in.account),
		"account": map[string]any{
			"login": in.account, "id": c.a.ownerID(in.account), "type": in.accountType,
		},
		"repository_selection": "all",
		"access_tokens_url":    c.base() + "/app/installations/" + strconv.FormatInt(in.id, 10) + "/access_tokens",
	}
}

// mint answers POST /app/installations/ID/access_tokens: a new token of
// the installation that expires after the App's token lifetime. Tokens are
// long and of no fixed length, as GitHub's stateless ghs_ tokens.
func (a *api) mint(c *call, ap *simApp, id string) *rendered {
	n, _ := strconv.ParseInt(id, 10, 64)
	in := a.apps.byID[n]
	if in == nil || in.app != ap {
		return ghNotFound(c)
	}
	in.mints.Add(1)
	var raw [48]byte
	_, _ = rand.Read(raw[:])
	tok := "ghs_" + base64.RawURLEncoding.EncodeToString(raw[:]) + strconv.FormatInt(in.mints.Load(), 36)
	exp := c.now.Add(ap.lifetime).Truncate(time.Second)
	a.apps.tokens.Store(tok, &minted{inst: in, expires: exp})
	return jsonBody(http.StatusCreated, map[string]any{
		"token": tok, "expires_at": exp.UTC().Format(time.RFC3339),
		"permissions": map[string]string{"metadata": "read", "contents": "read", "issues": "write"}, "repository_selection": "all",
	})
}

// hide makes the call a 404, charged as GitHub charges it, when its
// token cannot see the repository's owner: an installation's token sees
// only its account, a token limited to some accounts only those, and no
// other token sees an installation's private repositories. It counts the
// 404 on the owner's bucket.
func (a *api) hide(c *call) {
	login := repoOwnerOf(a.kind, c.segs)
	if login == "" || c.jwt || c.own.anonymous && !a.private(login) || publicRepo(a.kind, c.segs) {
		return
	}
	visible := !a.private(login)
	if c.own.accounts != nil {
		visible = false
		for _, acc := range c.own.accounts {
			if strings.EqualFold(acc, login) {
				visible = true
			}
		}
	}
	if visible {
		return
	}
	c.own.buckets[c.ep.res].countHidden()
	nf := ghNotFound
	switch a.kind {
	case DialectGitLab:
		nf = glNotFound
	case DialectHuggingFace:
		// The Hub answers a repository the token cannot see as one that
		// does not exist: a 401 that is not about the token.
		nf = func(*call) *rendered {
			return hfError(http.StatusUnauthorized, "Repository Not Found").with("X-Error-Code", "RepoNotFound")
		}
	}
	c.ep.static, c.ep.dynamic = nil, func(c *call, _ bucketState) *rendered { return nf(c) }
	c.ep.write, c.ep.bumps = false, nil
}

// publicRepo reports whether the call is about a public repository of an
// account an App is installed on or a limited token sees: one whose name
// begins with "public-" (GitHub's /repos/O/public-...). Every token reads
// it, as GitHub lets any token, a fine-grained one or an installation's,
// read a public repository.
func publicRepo(kind string, s []string) bool {
	return kind == DialectGitHub && len(s) >= 3 && s[0] == "repos" && strings.HasPrefix(s[2], "public-")
}

// repoOwnerOf is the account owning the repository a path names: GitHub's
// /repos/OWNER/..., GitLab's /api/v4/projects/NAMESPACE%2FNAME/... (the
// namespace, its groups included), Hugging Face's
// /api/models|datasets|spaces/OWNER/NAME/..., or "".
func repoOwnerOf(kind string, s []string) string {
	switch kind {
	case DialectGitHub:
		if len(s) >= 3 && s[0] == "repos" {
			return s[1]
		}
	case DialectHuggingFace:
		if len(s) >= 4 && s[0] == "api" && (s[1] == "models" || s[1] == "datasets" || s[1] == "spaces") {
			return s[2]
		}
	case DialectGitLab:
		if len(s) >= 4 && s[0] == "api" && s[2] == "projects" {
			if i := strings.LastIndexByte(s[3], '/'); i > 0 {
				return s[3][:i]
			}
		}
	}
	return ""
}

// AppStats are the counters of one installation.
type AppStats struct {
	API          string `json:"api"`
	AppID        int64  `json:"app_id"`
	Installation int64  `json:"installation"`
	Account      string `json:"account"`
	// Mints counts the tokens minted for the installation.
	Mints int64 `json:"mints"`
}

func (a *api) appStats() []AppStats {
	if a.apps == nil {
		return nil
	}
	var out []AppStats
	for _, ap := range a.apps.list {
		for _, in := range ap.insts {
			out = append(out, AppStats{API: a.name, AppID: ap.cfg.ID, Installation: in.id, Account: in.account, Mints: in.mints.Load()})
		}
	}
	return out
}
