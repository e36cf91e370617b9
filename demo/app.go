package demo

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

// The App part: a GitHub App installed on three organisations, each
// installation seeing only its own organisation's repositories, with a
// budget of its own. The client is given the App alone (its id and key):
// it finds the installations, mints a token for each, and sends every
// repository's GET to its organisation's installation.

// appID is the demo App's id.
const appID = 77

// appAccounts are the organisations the App is installed on.
var appAccounts = []string{"acme", "globex", "initech"}

// appPerAccount is how many repositories of each organisation the App
// part asks for: within one window of an installation's budget, so the
// part takes a few round trips.
func appPerAccount(limit int64) int {
	return int(min(30, max(1, limit-5)))
}

// AppSummary is what the App part achieved.
type AppSummary struct {
	Installations []AppInstallation
	// Jobs GETs, Done answered with their own repository, Failed not.
	Jobs, Done, Failed int
	FirstError         error
	// Wrong counts the requests the simulator saw reach an installation
	// that cannot see the repository (404, charged); Expired those with
	// an expired installation token; Violations those beyond a limit.
	Wrong, Expired, Violations int64
	Elapsed                    time.Duration
}

// AppInstallation is one installation, as the client found it.
type AppInstallation struct {
	Credential, Account string
	// Answered counts the part's GETs it answered; Used and Limit are its
	// budget as the client knows it at the end.
	Answered    int
	Used, Limit int64
	Mints       int
}

// RunApp runs the App part and writes it on w.
func RunApp(ctx context.Context, w io.Writer, opts Options) (*AppSummary, error) {
	opts = opts.WithDefaults()
	start := time.Now()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	dir, err := os.MkdirTemp("", "ratekeeper-demo-app")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	keyFile := filepath.Join(dir, "app.pem")
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}

	app := sim.AppConfig{ID: appID, PublicKey: string(keyPEM)}
	for i, a := range appAccounts {
		app.Installations = append(app.Installations, sim.InstallationConfig{ID: int64(101 + i), Account: a, Limit: opts.Limit})
	}
	srv, err := sim.New(sim.Config{Seed: 1, APIs: []sim.APIConfig{{
		Name: APIName, Dialect: sim.DialectGitHub, Prefix: apiPrefix,
		Window: opts.Window, WindowMode: sim.WindowRolling, Latency: opts.Latency,
		Apps: []sim.AppConfig{app},
	}}})
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	root, wire, stop, err := srv.Reach(opts.InProcess, opts.Workers+4)
	if err != nil {
		return nil, err
	}
	defer stop()
	base := root + apiPrefix

	p, err := provider.New(APIName, provider.GitHub, base)
	if err != nil {
		return nil, err
	}
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		return nil, err
	}
	ghApp, err := creds.NewApp(p, provider.AppConfig{AppID: appID, PrivateKeyFile: keyFile}, creds.AppOptions{Transport: wire})
	if err != nil {
		return nil, err
	}
	t, err := transport.New(transport.Options{Providers: reg, Base: wire, SkipValidation: true,
		Pools: map[string]*creds.Pool{APIName: creds.NewAppPool(APIName, nil, ghApp)}})
	if err != nil {
		return nil, err
	}
	defer t.Close()

	per := appPerAccount(opts.Limit)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "A GitHub App on %d organisations: App %d is installed on %s, each installation\n", len(appAccounts), appID, strings.Join(appAccounts, ", "))
	fmt.Fprintf(w, "  seeing only its organisation's repositories, with a budget of its own (%d requests per %s).\n", opts.Limit, shortDuration(opts.Window))
	fmt.Fprintf(w, "  The client is given the App's id and key, nothing else; %d GETs, %d repositories of each.\n", per*len(appAccounts), per)

	var paths []string
	for i := range per {
		for j, a := range appAccounts {
			paths = append(paths, fmt.Sprintf("/repos/%s/%s-%d", a, words[(i+j)%len(words)], i))
		}
	}
	s := &AppSummary{Jobs: len(paths)}
	answered := map[string]int{}
	var mu sync.Mutex
	client := &http.Client{Transport: t}
	queue := make(chan string)
	var wg sync.WaitGroup
	for range opts.Workers {
		wg.Go(func() {
			for path := range queue {
				cred, err := getRepository(ctx, client, base, path)
				mu.Lock()
				if err != nil {
					s.Failed++
					if s.FirstError == nil {
						s.FirstError = err
					}
				} else {
					s.Done++
					answered[cred]++
				}
				mu.Unlock()
			}
		})
	}
	for _, path := range paths {
		queue <- path
	}
	close(queue)
	wg.Wait()
	s.Elapsed = time.Since(start)

	st := srv.Stats()
	s.Wrong, s.Expired, s.Violations = st.Total.Hidden, st.Total.ExpiredTokens, st.Total.Violations
	pool, _ := t.Pool(APIName)
	status, _ := t.Status(ctx, time.Now(), APIName)
	for _, c := range pool.Credentials() {
		in := AppInstallation{Credential: c.Masked(), Account: c.Account(), Answered: answered[c.Masked()], Mints: c.Mints()}
		for _, cs := range status {
			if cs.Credential != c.Masked() {
				continue
			}
			for _, r := range cs.Resources {
				if r.Resource == "core" && r.Limit != nil && r.Remaining != nil {
					in.Limit, in.Used = *r.Limit, *r.Limit-*r.Remaining
				}
			}
		}
		s.Installations = append(s.Installations, in)
	}
	slices.SortFunc(s.Installations, func(a, b AppInstallation) int { return strings.Compare(a.Credential, b.Credential) })
	s.Write(w)
	return s, nil
}

// getRepository GETs a repository and checks that the answer is that
// repository; it returns the masked credential that answered.
func getRepository(ctx context.Context, client *http.Client, base, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var repo struct {
		FullName string `json:"full_name"`
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return "", fmt.Errorf("GET %s: HTTP %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&repo); err != nil {
		return "", fmt.Errorf("GET %s: %v", path, err)
	}
	if "/repos/"+repo.FullName != path {
		return "", fmt.Errorf("GET %s: answered with %q", path, repo.FullName)
	}
	return resp.Header.Get(transport.HeaderCredential), nil
}

// Write shows the App part's outcome.
func (s *AppSummary) Write(w io.Writer) {
	fmt.Fprintf(w, "  installations found from GET /app/installations, one token minted for each:\n")
	for _, in := range s.Installations {
		minted := "1 token minted"
		if in.Mints != 1 {
			minted = fmt.Sprintf("%d tokens minted", in.Mints)
		}
		fmt.Fprintf(w, "    %-27s on %-8s %3d answered, %3d of its own %d used, %s\n",
			in.Credential, in.Account, in.Answered, in.Used, in.Limit, minted)
	}
	fmt.Fprintf(w, "  %d of %d GETs answered with their repository, %d failed, in %s; %d sent to an installation\n",
		s.Done, s.Jobs, s.Failed, roundDuration(s.Elapsed), s.Wrong)
	fmt.Fprintf(w, "  that cannot see the repository, %d with an expired token, %d violations\n", s.Expired, s.Violations)
	if s.FirstError != nil {
		fmt.Fprintf(w, "  first failure: %v\n", s.FirstError)
	}
}
