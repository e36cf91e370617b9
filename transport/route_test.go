package transport

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	crand "crypto/rand"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
)

var (
	routeKeyOnce sync.Once
	routeKey     *rsa.PrivateKey
)

// appKeyFile writes one RSA key (made once per test binary: generating
// one is slow) to a file of t's and returns its path and PEM.
func appKeyFile(t *testing.T) (string, string) {
	routeKeyOnce.Do(func() {
		k, err := rsa.GenerateKey(crand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		routeKey = k
	})
	pemText := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(routeKey)}))
	path := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(path, []byte(pemText), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, pemText
}

// accountsBatch is a batch over the repositories of several accounts,
// each seen only by its own credential (an App installation or a
// fine-grained token), with a budget of its own.
type accountsBatch struct {
	accounts []string
	perAcct  int // repositories (requests) per account
	limit    int64
	window   time.Duration
	latency  time.Duration
	workers  int
	lifetime time.Duration // installation tokens' (0: an hour)
	fixedIDs bool          // installation_ids configured (else discovered)
	tokens   bool          // fine-grained tokens instead of an App
	// srv, when set, is the simulator to use (else a new one); shared is
	// the credential store of a fleet.
	srv    *sim.Server
	shared CredentialStore
	seed   uint64 // the order of the URLs (0: the measured one)
	// public is how many public repositories of each account (seen by
	// every token) are asked for before the private ones.
	public int
}

type accountsResult struct {
	done     int
	firstErr error
	makespan time.Duration
	stats    sim.Stats
}

// ideal: each credential works through its own account's repositories,
// all in parallel: one window per full bucket after the first.
func (b accountsBatch) ideal() time.Duration {
	full := (int64(b.perAcct) + b.limit - 1) / b.limit
	return time.Duration(full-1)*b.window + b.latency
}

func (b accountsBatch) run(t *testing.T) accountsResult {
	keyFile, keyPEM := appKeyFile(t)
	api := sim.APIConfig{Dialect: "github", Window: b.window, Latency: b.latency, Secondary: &sim.SecondaryConfig{}}
	app := sim.AppConfig{ID: 77, PublicKey: keyPEM, TokenLifetime: b.lifetime}
	var ids []int64
	for i, a := range b.accounts {
		if b.tokens {
			api.Tokens = append(api.Tokens, sim.TokenConfig{Token: "github_pat_" + strings.Repeat("x", 60) + a, Owner: "bot-" + a, Limit: b.limit, Accounts: []string{a}})
			continue
		}
		app.Installations = append(app.Installations, sim.InstallationConfig{ID: int64(100 + i), Account: a, Limit: b.limit})
		ids = append(ids, int64(100+i))
	}
	if !b.tokens {
		api.Apps = []sim.AppConfig{app}
	}
	srv := b.srv
	if srv == nil {
		var err error
		if srv, err = sim.New(sim.Config{APIs: []sim.APIConfig{api}}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := provider.New("github", provider.GitHub, "http://api.test")
	if err != nil {
		t.Fatal(err)
	}
	p.Secondary.EndpointPointsPerMinute = 0
	reg := provider.NewRegistry()
	_ = reg.Add(p)
	var pool *creds.Pool
	if b.tokens {
		var cs []*creds.Credential
		for i, tc := range api.Tokens {
			c := creds.NewToken("github", i+1, tc.Token, "test")
			c.SetOwner(provider.Owner{Name: tc.Owner})
			cs = append(cs, c)
		}
		pool = creds.NewPool("github", cs...)
	} else {
		cfg := provider.AppConfig{AppID: 77, PrivateKeyFile: keyFile}
		if b.fixedIDs {
			cfg.InstallationIDs = ids
		}
		a, err := creds.NewApp(p, cfg, creds.AppOptions{Transport: handlerRT{srv}, Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		pool = creds.NewAppPool("github", nil, a)
	}
	tr, err := New(Options{Providers: reg, Base: handlerRT{srv}, SkipValidation: true, DisableCache: true,
		Pools: map[string]*creds.Pool{"github": pool}, MaxWait: 24 * time.Hour, Credentials: b.shared})
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for i := range b.perAcct {
		for _, a := range b.accounts {
			urls = append(urls, fmt.Sprintf("http://api.test/repos/%s/r%d", a, i))
		}
	}
	rng := rand.New(rand.NewPCG(b.seed+1, 2))
	rng.Shuffle(len(urls), func(i, j int) { urls[i], urls[j] = urls[j], urls[i] })
	var pubs []string
	for i := range b.public {
		for _, a := range b.accounts {
			pubs = append(pubs, fmt.Sprintf("http://api.test/repos/%s/public-%d", a, i))
		}
	}
	rng.Shuffle(len(pubs), func(i, j int) { pubs[i], pubs[j] = pubs[j], pubs[i] })
	urls = append(pubs, urls...)
	start := time.Now()
	var res accountsResult
	res.done, res.firstErr = runJobs(tr, b.workers, len(urls), func(i int) string { return urls[i] })
	res.makespan = time.Since(start)
	res.stats = srv.Stats()
	return res
}

func (b accountsBatch) check(t *testing.T, r accountsResult, maxHidden int64, maxRatio float64) {
	t.Helper()
	if want := (b.perAcct + b.public) * len(b.accounts); r.done != want {
		t.Errorf("answered %d of %d; first error %v", r.done, want, r.firstErr)
	}
	ratio := r.makespan.Seconds() / b.ideal().Seconds()
	t.Logf("makespan %v, ideal %v, ratio %.3f; hidden 404s %d, violations %d, expired 401s %d, mints %+v",
		r.makespan, b.ideal(), ratio, r.stats.Total.Hidden, r.stats.Total.Violations, r.stats.Total.ExpiredTokens, r.stats.Apps)
	if r.stats.Total.Hidden > maxHidden {
		t.Errorf("%d requests went to a credential that cannot see the repository, want at most %d", r.stats.Total.Hidden, maxHidden)
	}
	if r.stats.Total.Violations != 0 || r.stats.Total.ExpiredTokens != 0 {
		t.Errorf("%d violations, %d expired tokens sent", r.stats.Total.Violations, r.stats.Total.ExpiredTokens)
	}
	if ratio > maxRatio {
		t.Errorf("makespan %.3f × the ideal, want at most %.2f", ratio, maxRatio)
	}
}

// An App on three accounts, its installations discovered: every request
// goes to its owner's installation (no wrong one), each installation
// works through its own repositories in parallel.
func TestAppRoutesEachRepositoryToItsInstallation(t *testing.T) {
	for _, fixed := range []bool{false, true} {
		t.Run(fmt.Sprintf("installation_ids=%v", fixed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := accountsBatch{accounts: []string{"acme", "globex", "dora"}, perAcct: 250, limit: 100, window: time.Minute,
					latency: 50 * time.Millisecond, workers: 24, fixedIDs: fixed}
				r := b.run(t)
				b.check(t, r, 0, 1.05)
				for _, a := range r.stats.Apps {
					if a.Mints != 1 {
						t.Errorf("installation %d (%s): %d mints, want 1", a.Installation, a.Account, a.Mints)
					}
				}
			})
		})
	}
}

// Fine-grained tokens, each limited to one organisation: what each can
// see is learnt from answers, one token's owner at a time (see
// TestFineGrainedTokensOverManyOrders for the bound).
// Over twenty orders of the URLs, fine-grained tokens on 3 and on 5
// accounts: fresh tokens look for their owners one request at a time, so
// the first account costs at most K−1 wrong requests, the next K−2, ...:
// at most K·(K−1)/2 in all (3 for 3 accounts, 10 for 5), where each token
// used to cost one per other account (6, 20).
func TestFineGrainedTokensOverManyOrders(t *testing.T) {
	for _, accts := range [][]string{{"acme", "globex", "dora"}, {"a1", "a2", "a3", "a4", "a5"}} {
		k := int64(len(accts))
		var total, most int64
		for seed := range uint64(20) {
			synctest.Test(t, func(t *testing.T) {
				b := accountsBatch{accounts: accts, perAcct: 100, limit: 100, window: time.Minute,
					latency: 50 * time.Millisecond, workers: 24, tokens: true, seed: seed}
				r := b.run(t)
				if want := b.perAcct * len(accts); r.done != want {
					t.Errorf("order %d: answered %d of %d: %v", seed, r.done, want, r.firstErr)
				}
				h := r.stats.Total.Hidden
				total, most = total+h, max(most, h)
				if h > k*(k-1)/2 {
					t.Errorf("order %d, %d accounts: %d wrong requests, want at most %d", seed, k, h, k*(k-1)/2)
				}
			})
		}
		t.Logf("%d accounts: %.2f wrong requests on average, %d at most", k, float64(total)/20, most)
	}
}

func TestFineGrainedTokensRouteByOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := accountsBatch{accounts: []string{"acme", "globex", "dora"}, perAcct: 250, limit: 100, window: time.Minute,
			latency: 50 * time.Millisecond, workers: 24, tokens: true}
		r := b.run(t)
		k := int64(len(b.accounts))
		b.check(t, r, k*(k-1)/2, 1.05)
	})
}

// Public repositories, which every token reads, come first: they teach no
// token an owner (a token that read acme's public repository may be
// dora's), and every private one that follows is answered by its owner's
// token. A token that read an account's public repository is sent its
// private ones until its first 404 there: the wrong requests are at most
// those in flight then (the workers) and the K·(K−1)/2 of learning owners.
// (Before, a 404 from a token that had answered about the owner was the
// answer: 195 of the 300 private repositories were answered 404.)
func TestPublicRepositoriesTeachNoOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := accountsBatch{accounts: []string{"acme", "globex", "dora"}, perAcct: 100, public: 10, limit: 200, window: time.Minute,
			latency: 50 * time.Millisecond, workers: 24, tokens: true}
		r := b.run(t)
		k := int64(len(b.accounts))
		b.check(t, r, int64(b.workers)+k*(k-1)/2, 100)
	})
}

// sightStore is a fleet's shared record of what credentials cannot see.
type sightStore struct {
	mu    sync.Mutex
	blind map[string]map[string][]string
	// delay is how long LoadBlind takes, as a database's read does.
	delay time.Duration
}

func (s *sightStore) LoadCredential(context.Context, string, string) (CredentialRecord, bool, error) {
	return CredentialRecord{}, false, nil
}

func (s *sightStore) SaveCredential(context.Context, string, string, CredentialRecord) error {
	return nil
}

func (s *sightStore) LoadBlind(_ context.Context, provider string) (map[string][]string, error) {
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]string{}
	for id, owners := range s.blind[provider] {
		out[id] = slices.Clone(owners)
	}
	return out, nil
}

func (s *sightStore) AddBlind(_ context.Context, provider, id, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blind == nil {
		s.blind = map[string]map[string][]string{}
	}
	if s.blind[provider] == nil {
		s.blind[provider] = map[string][]string{}
	}
	if !slices.Contains(s.blind[provider][id], owner) {
		s.blind[provider][id] = append(s.blind[provider][id], owner)
	}
	return nil
}

// owners counts the credentials whose one resource owner the fleet knows.
func (s *sightStore) owners() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ids := range s.blind {
		for _, owners := range ids {
			if slices.ContainsFunc(owners, func(o string) bool { return strings.HasPrefix(o, ownsMark) }) {
				n++
			}
		}
	}
	return n
}

// What one process learnt a credential cannot see, the next one knows: it
// sends no wrong request where what was learnt tells. Which owners the
// first process proves depends on the order its requests were answered
// in (a token's 2xx proves its owner only about a repository another
// token was just answered 404 about), so the next process's bound
// follows what the fleet knows: with two of three owners known the third
// follows, and nothing is sent wrong; with fewer, the tokens whose owner
// is unknown may still be tried as a fresh process tries them.
func TestBlindOwnersSharedByTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := &sightStore{}
		b := accountsBatch{accounts: []string{"acme", "globex", "dora"}, perAcct: 20, limit: 100, window: time.Minute,
			latency: 50 * time.Millisecond, workers: 8, tokens: true, shared: shared}
		first := b.run(t)
		b.check(t, first, 3, 100)
		if first.stats.Total.Hidden == 0 {
			t.Fatal("the first process learnt nothing: the test shows nothing")
		}
		var api sim.APIConfig
		api.Dialect, api.Window, api.Latency, api.Secondary = "github", b.window, b.latency, &sim.SecondaryConfig{}
		for _, a := range b.accounts {
			api.Tokens = append(api.Tokens, sim.TokenConfig{Token: "github_pat_" + strings.Repeat("x", 60) + a, Owner: "bot-" + a, Limit: b.limit, Accounts: []string{a}})
		}
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{api}})
		if err != nil {
			t.Fatal(err)
		}
		b.srv = srv
		unknown := int64(len(b.accounts) - shared.owners())
		if unknown == 1 {
			unknown = 0 // the one token left owns the account left
		}
		t.Logf("owners known after the first process: %d of %d", shared.owners(), len(b.accounts))
		second := b.run(t)
		b.check(t, second, unknown*(unknown-1)/2, 100)
	})
}

// The fleet knows the owners of two of three fine-grained tokens: a
// process starting on that state sends no request to a wrong token: not
// the known ones about the third account (they own others), not the third
// about the known accounts (they have their owners' tokens). Its first
// requests, which come together, wait for what the fleet knows: with a
// read that takes 20 ms, those that went while the first read was under
// way sent tokens about accounts they cannot see.
func TestTokenOwnersSharedByTheFleet(t *testing.T) {
	for _, delay := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(fmt.Sprint("read in ", delay), func(t *testing.T) { tokenOwnersShared(t, delay) })
	}
}

func tokenOwnersShared(t *testing.T, delay time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		shared := &sightStore{delay: delay}
		for _, a := range []string{"acme", "globex"} {
			c := creds.NewToken("github", 1, "github_pat_"+strings.Repeat("x", 60)+a, "test")
			if !c.OneResourceOwner() {
				t.Fatalf("%s: a github_pat_ token has one resource owner", c.Masked())
			}
			_ = shared.AddBlind(context.Background(), "github http://api.test", c.ID(), ownsMark+a)
		}
		b := accountsBatch{accounts: []string{"acme", "globex", "dora"}, perAcct: 20, limit: 100, window: time.Minute,
			latency: 50 * time.Millisecond, workers: 8, tokens: true, shared: shared}
		b.check(t, b.run(t), 0, 100)
	})
}

// Installation tokens at GitHub's real hour, on the fake clock, over three
// hours of steady work: no request carries an expired token, and each
// installation gets a new token once per lifetime (refreshed five minutes
// before it expires: four mints in three hours, the first included).
func TestAppTokensRefreshedBeforeExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keyFile, keyPEM := appKeyFile(t)
		accounts := []string{"acme", "globex", "dora"}
		app := sim.AppConfig{ID: 77, PublicKey: keyPEM}
		for i, a := range accounts {
			app.Installations = append(app.Installations, sim.InstallationConfig{ID: int64(100 + i), Account: a})
		}
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Latency: 200 * time.Millisecond, Apps: []sim.AppConfig{app}}}})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := provider.New("github", provider.GitHub, "http://api.test")
		reg := provider.NewRegistry()
		_ = reg.Add(p)
		a, err := creds.NewApp(p, provider.AppConfig{AppID: 77, PrivateKeyFile: keyFile}, creds.AppOptions{Transport: handlerRT{srv}, Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := New(Options{Providers: reg, Base: handlerRT{srv}, SkipValidation: true, DisableCache: true,
			Pools: map[string]*creds.Pool{"github": creds.NewAppPool("github", nil, a)}})
		if err != nil {
			t.Fatal(err)
		}
		end := time.Now().Add(3 * time.Hour)
		var wg sync.WaitGroup
		for _, acct := range accounts {
			wg.Go(func() {
				for i := 0; time.Now().Before(end); i++ {
					req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://api.test/repos/%s/r%d", acct, i), nil)
					resp, err := tr.RoundTrip(req)
					if err != nil {
						t.Error(err)
						return
					}
					drain(resp)
					if resp.StatusCode != http.StatusOK {
						t.Errorf("%s: %s", req.URL.Path, resp.Status)
						return
					}
					time.Sleep(7 * time.Second)
				}
			})
		}
		wg.Wait()
		st := srv.Stats()
		if st.Total.ExpiredTokens != 0 || st.Total.Unauthorized != 0 {
			t.Errorf("%d requests with an expired token, %d 401s", st.Total.ExpiredTokens, st.Total.Unauthorized)
		}
		for _, in := range st.Apps {
			if in.Mints != 4 {
				t.Errorf("installation %s: %d mints in 3 hours, want 4 (one per 55 minutes)", in.Account, in.Mints)
			}
		}
		t.Logf("%d requests, mints %+v", st.Total.Requests, st.Apps)
	})
}

// Status lists every installation the App has, found without a restart,
// with the account it is on.
func TestStatusShowsInstallationsWithAccounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keyFile, keyPEM := appKeyFile(t)
		app := sim.AppConfig{ID: 77, PublicKey: keyPEM, Installations: []sim.InstallationConfig{{ID: 5, Account: "acme"}, {ID: 6, Account: "dora", AccountType: "User"}}}
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Apps: []sim.AppConfig{app}}}})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := provider.New("github", provider.GitHub, "http://api.test")
		reg := provider.NewRegistry()
		_ = reg.Add(p)
		a, err := creds.NewApp(p, provider.AppConfig{AppID: 77, PrivateKeyFile: keyFile}, creds.AppOptions{Transport: handlerRT{srv}, Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := New(Options{Providers: reg, Base: handlerRT{srv}, SkipValidation: true,
			Pools: map[string]*creds.Pool{"github": creds.NewAppPool("github", nil, a)}})
		if err != nil {
			t.Fatal(err)
		}
		st, err := tr.Status(context.Background(), time.Now(), "github")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range st {
			got = append(got, c.Credential+" "+c.Account+" "+c.Owner)
		}
		want := []string{"#1 app:77/installation:5 acme installation on acme", "#2 app:77/installation:6 dora installation on dora"}
		if !slices.Equal(got, want) {
			t.Errorf("status = %q, want %q", got, want)
		}
	})
}

// notYet is a server on which an App is installed on an account, whose
// App endpoints answer as if it were not, until installed is set.
type notYet struct {
	mu        sync.Mutex
	installed bool
	real, old http.Handler // the server with the installation, and one without
}

func (s *notYet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.real
	if !s.installed && (strings.HasPrefix(r.URL.Path, "/app/installations") && r.Method == http.MethodGet || strings.HasSuffix(r.URL.Path, "/installation")) {
		h = s.old
	}
	s.mu.Unlock()
	h.ServeHTTP(w, r)
}

// An App installed on a new account while ratekeeper runs: requests for
// that account find the installation within a few minutes, without a
// restart, and an owner without one costs a JWT request at most every few
// minutes.
func TestNewInstallationFoundWithoutRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keyFile, keyPEM := appKeyFile(t)
		simWith := func(accounts ...string) *sim.Server {
			app := sim.AppConfig{ID: 77, PublicKey: keyPEM}
			for i, a := range accounts {
				app.Installations = append(app.Installations, sim.InstallationConfig{ID: int64(10 + i), Account: a})
			}
			srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Apps: []sim.AppConfig{app}}}})
			if err != nil {
				t.Fatal(err)
			}
			return srv
		}
		before, after := simWith("acme"), simWith("acme", "globex")
		h := &notYet{real: after, old: before}
		p, _ := provider.New("github", provider.GitHub, "http://api.test")
		reg := provider.NewRegistry()
		_ = reg.Add(p)
		a, err := creds.NewApp(p, provider.AppConfig{AppID: 77, PrivateKeyFile: keyFile}, creds.AppOptions{Transport: handlerRT{h}, Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := New(Options{Providers: reg, Base: handlerRT{h}, SkipValidation: true, DisableCache: true,
			Pools: map[string]*creds.Pool{"github": creds.NewAppPool("github", nil, a)}})
		if err != nil {
			t.Fatal(err)
		}
		get := func(path string) int {
			req, _ := http.NewRequest(http.MethodGet, "http://api.test"+path, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
			return resp.StatusCode
		}
		if s := get("/repos/acme/a"); s != http.StatusOK {
			t.Fatalf("acme: %d", s)
		}
		if s := get("/repos/globex/g"); s != http.StatusNotFound {
			t.Fatalf("globex before it is installed: %d, want 404", s)
		}
		h.mu.Lock()
		h.installed = true // the App is installed on globex
		h.mu.Unlock()
		time.Sleep(time.Minute)
		looks := before.Stats().Total.Requests
		for range 5 {
			get("/repos/globex/g") // within the interval: no JWT request
		}
		if n := after.Stats().Total.Requests + before.Stats().Total.Requests - looks; n != 5+3 {
			t.Errorf("%d requests reached the server, want the 3 before and the 5 requests alone (no look within the interval)", n)
		}
		time.Sleep(creds.AppLookInterval)
		if s := get("/repos/globex/g"); s != http.StatusOK {
			t.Errorf("globex after it was installed: %d, want 200 from its installation", s)
		}
		if got := len(tr.opts.Pools["github"].Credentials()); got != 2 {
			t.Errorf("%d installations in the pool, want 2", got)
		}
	})
}

// On GitLab the owner is the project's namespace: group tokens, each
// seeing one group, get their own group's projects after one wrong
// answer per token and group.
func TestGitLabGroupTokensRouteByNamespace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		groups := []string{"team-a/sub", "team-b"}
		api := sim.APIConfig{Dialect: "gitlab", Latency: 20 * time.Millisecond}
		var cs []*creds.Credential
		for i, g := range groups {
			tok := fmt.Sprintf("glpat-group-token-%d", i)
			api.Tokens = append(api.Tokens, sim.TokenConfig{Token: tok, Owner: fmt.Sprintf("bot%d", i), Accounts: []string{g}})
			c := creds.NewToken("gitlab", i+1, tok, "test")
			c.SetOwner(provider.Owner{ID: strconv.Itoa(i + 1)})
			cs = append(cs, c)
		}
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{api}})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := provider.New("gitlab", provider.GitLab, "http://api.test")
		reg := provider.NewRegistry()
		_ = reg.Add(p)
		tr, err := New(Options{Providers: reg, Base: handlerRT{srv}, SkipValidation: true, DisableCache: true,
			Pools: map[string]*creds.Pool{"gitlab": creds.NewPool("gitlab", cs...)}})
		if err != nil {
			t.Fatal(err)
		}
		done, firstErr := runJobs(tr, 8, 100, func(i int) string {
			return "http://api.test/api/v4/projects/" + url.PathEscape(groups[i%2]+"/p"+strconv.Itoa(i))
		})
		if done != 100 {
			t.Errorf("answered %d of 100: %v", done, firstErr)
		}
		if h := srv.Stats().Total.Hidden; h > 2 {
			t.Errorf("%d wrong answers, want at most one per token and group", h)
		}
	})
}

// Hugging Face answers a repository a scoped token cannot see with a 401
// that is not about the token: routed like a 404.
func TestHuggingFaceScopedTokensRouteByOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		orgs := []string{"org-a", "org-b"}
		api := sim.APIConfig{Dialect: "huggingface", Latency: 20 * time.Millisecond}
		var cs []*creds.Credential
		for i, o := range orgs {
			tok := fmt.Sprintf("hf_scoped_token_%d", i)
			api.Tokens = append(api.Tokens, sim.TokenConfig{Token: tok, Owner: fmt.Sprintf("u%d", i), Accounts: []string{o}})
			c := creds.NewToken("huggingface", i+1, tok, "test")
			c.SetOwner(provider.Owner{ID: strconv.Itoa(i + 1)})
			cs = append(cs, c)
		}
		srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{api}})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := provider.New("huggingface", provider.HuggingFace, "http://api.test")
		reg := provider.NewRegistry()
		_ = reg.Add(p)
		tr, err := New(Options{Providers: reg, Base: handlerRT{srv}, SkipValidation: true, DisableCache: true,
			Pools: map[string]*creds.Pool{"huggingface": creds.NewPool("huggingface", cs...)}})
		if err != nil {
			t.Fatal(err)
		}
		done, firstErr := runJobs(tr, 8, 60, func(i int) string {
			return fmt.Sprintf("http://api.test/api/models/%s/m%d", orgs[i%2], i)
		})
		if done != 60 {
			t.Errorf("answered %d of 60: %v", done, firstErr)
		}
		if h := srv.Stats().Total.Hidden; h > 2 {
			t.Errorf("%d wrong answers, want at most one per token and organisation", h)
		}
		for _, c := range cs {
			if st := c.State(time.Now()); st == creds.Invalid {
				t.Errorf("%s marked invalid by a repository it cannot see", c.Masked())
			}
		}
	})
}

// BenchmarkRouteByOwner is what routing by owner adds to a request: a
// pool of three tokens known to see the owner, a request about a
// repository (routed) and one about none (/user, not routed).
func BenchmarkRouteByOwner(b *testing.B) {
	for _, path := range []string{"/user", "/repos/o/r"} {
		b.Run(strings.TrimPrefix(path, "/"), func(b *testing.B) {
			p, _ := provider.New("github", provider.GitHub, "http://api.test")
			p.Secondary = provider.Secondary{}
			reg := provider.NewRegistry()
			_ = reg.Add(p)
			var cs []*creds.Credential
			for i := range 3 {
				c := creds.NewToken("github", i+1, fmt.Sprintf("tok-route-%04d", i), "bench")
				c.SetOwner(provider.Owner{ID: strconv.Itoa(i + 1)})
				cs = append(cs, c)
			}
			tr, err := New(Options{Providers: reg, Pools: map[string]*creds.Pool{"github": creds.NewPool("github", cs...)},
				Base: handlerRT{githubLike()}, Policy: quota.Policy{Kind: quota.Greedy}, SkipValidation: true, DisableCache: true})
			if err != nil {
				b.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodGet, "http://api.test"+path, nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				drain(resp)
			}
		})
	}
}
