package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/wiring"
)

func TestEndpoints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{githubAPI(5, time.Hour, simTokens...), gitlabAPI(simTokens...)},
			map[string][]string{"github": {"tok-alice-1", "tok-bob-1"}, "gitlab": {"tok-carol-1"}},
			func(o *Options) { o.Client.MaxWait = time.Second })
		for i := range 12 {
			e.get(t, "/github/repos/o/r"+string(rune('a'+i))) // past the quota: some 429s
		}
		e.get(t, "/gitlab/user")

		// /healthz
		resp, body := e.get(t, "/healthz")
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"status":"ok"`) {
			t.Fatalf("/healthz: %d %s", resp.StatusCode, body)
		}

		// /readyz: the memory state answers, each provider has a token.
		resp, body = e.get(t, "/readyz")
		if resp.StatusCode != http.StatusOK || body != "ready\n" {
			t.Fatalf("/readyz: %d %q", resp.StatusCode, body)
		}

		// /status, whole and narrowed.
		rep := e.status(t)
		if len(rep.Credentials) != 3 {
			t.Fatalf("status has %d credentials", len(rep.Credentials))
		}
		resp, body = e.get(t, "/status?provider=gitlab")
		var only struct {
			Credentials []struct{ Provider string } `json:"credentials"`
		}
		if err := json.Unmarshal([]byte(body), &only); err != nil || len(only.Credentials) != 1 || only.Credentials[0].Provider != "gitlab" {
			t.Fatalf("/status?provider=gitlab: %d %s", resp.StatusCode, body)
		}
		if resp, body := e.do(t, http.MethodPost, "/status", nil, nil); resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("POST /status: %d %s", resp.StatusCode, body)
		}

		// /metrics: the transport's and the gateway's.
		resp, body = e.get(t, "/metrics")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/metrics: %d", resp.StatusCode)
		}
		for _, want := range []string{
			`ratekeeper_requests_total{cache="miss",code="200",provider="github",resource="core"}`,
			`ratekeeper_gateway_requests_total{code="200",provider="github"}`,
			`ratekeeper_gateway_requests_total{code="429",provider="github"}`,
			`ratekeeper_gateway_quota_refusals_total{provider="github"}`,
			`ratekeeper_quota_remaining{credential="#1 …-1",provider="github",resource="core"}`,
			"ratekeeper_gateway_in_flight_requests 0",
			"go_goroutines",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		noSecret(t, "/metrics", body, "tok-")

		// The dashboard.
		resp, body = e.get(t, "/")
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("/: %d %s", resp.StatusCode, resp.Header)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Fatalf("CSP %q", csp)
		}
		for _, want := range []string{`data-provider="github"`, `data-provider="gitlab"`, `data-credential="#1 …-1"`, `id="total-requests">13<`,
			`<svg id="chart"`, `href="/assets/style.css"`, "EXHAUSTED"} {
			if !strings.Contains(body, want) {
				t.Errorf("dashboard lacks %s", want)
			}
		}
		for _, ext := range []string{"http://", "https://"} {
			for _, line := range strings.Split(body, "\n") {
				if strings.Contains(line, ext) && !strings.Contains(line, simHost) {
					t.Errorf("dashboard refers outside: %s", line)
				}
			}
		}
		noSecret(t, "dashboard", body, "tok-")
		if resp, body := e.do(t, http.MethodHead, "/", nil, nil); resp.StatusCode != http.StatusOK || body != "" {
			t.Fatalf("HEAD /: %d %q", resp.StatusCode, body)
		}

		// Assets.
		for path, ctype := range map[string]string{"/assets/style.css": "text/css", "/assets/app.js": "text/javascript", "/assets/logo.svg": "image/svg+xml"} {
			resp, body := e.get(t, path)
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) || body == "" {
				t.Errorf("%s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
			}
		}
		for _, path := range []string{"/assets/", "/assets/nope.css", "/assets/web/assets/app.js"} {
			if resp, _ := e.get(t, path); resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s: %d", path, resp.StatusCode)
			}
		}
	})
}

// New refuses what cannot be served.
func TestNewErrors(t *testing.T) {
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Providers: []string{"nope"}}, `unknown provider "nope"`},
		{Options{Client: clientProviders("status=http://127.0.0.1:1"), Providers: []string{"status"}}, "the gateway serves its own endpoint at /status"},
		{Options{Client: clientProviders("up=http://127.0.0.1:1"), Providers: []string{"up"}, Hosts: map[string]string{"api.local": "github"}}, `host route api.local=github: provider "github" is not served`},
		{Options{Client: clientProviders("up=ftp://127.0.0.1:1")}, "base URL must be http or https"},
	} {
		_, err := New(c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v, want %q", c.opts.Providers, err, c.want)
		}
	}
}

func clientProviders(flags ...string) (o wiring.Options) {
	o.Providers = flags
	o.Tokens = map[string][]string{}
	for _, f := range flags {
		name, _, _ := strings.Cut(f, "=")
		o.Tokens[name] = nil
	}
	return o
}
