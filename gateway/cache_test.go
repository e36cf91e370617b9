package gateway

import (
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

// The gateway is a shared cache: a private answer (GitHub's are all
// private, max-age=60, s-maxage=60) is served from the cache only to the
// client key that received it; another client's repeat goes upstream, as
// a revalidation. Every answer served without going upstream is counted
// in the dashboard's minutes and the metrics.
func TestGatewayServesPrivateAnswersToTheirClientOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keys, err := ParseKeys("keys.txt", strings.NewReader("ci  key-ci-0123456789abcdef\ncrawler key-crawler-0123456789\n"))
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, []sim.APIConfig{githubAPI(100, time.Hour, simTokens...)}, map[string][]string{"github": {"tok-alice-1"}},
			func(o *Options) { o.Keys = keys })
		ci := http.Header{HeaderKey: {"key-ci-0123456789abcdef"}}
		crawler := http.Header{HeaderKey: {"key-crawler-0123456789"}}
		get := func(h http.Header, want string) {
			t.Helper()
			resp, _ := e.do(t, http.MethodGet, "/github/repos/o/r", h, nil)
			if resp.StatusCode != http.StatusOK || resp.Header.Get(transport.HeaderCache) != want {
				t.Fatalf("%d %q, want 200 %q", resp.StatusCode, resp.Header.Get(transport.HeaderCache), want)
			}
		}
		get(ci, "miss")
		time.Sleep(5 * time.Second)
		get(ci, "fresh")
		get(crawler, "revalidated")
		get(crawler, "fresh")
		var cached int64
		for _, m := range e.gw.History() {
			cached += m.Cached
		}
		if cached != 2 {
			t.Fatalf("%d answers from the cache in the history, want 2", cached)
		}
	})
}
