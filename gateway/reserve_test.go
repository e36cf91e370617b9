package gateway

import (
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// A reserve that leaves nothing of a resource (100 of search's 30 a
// minute) is the gateway's own misconfiguration: its clients get a 500
// saying so, once the limit is known, rather than a wait or a 502 blaming
// the upstream.
func TestReserveTooLargeIsTheGatewaysError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := githubAPI(5000, time.Hour, simTokens...)
		e := newEnv(t, []sim.APIConfig{api}, map[string][]string{"github": {"tok-alice-1"}},
			func(o *Options) { o.Client.Reserve = 100 })
		if resp, body := e.get(t, "/github/search/repositories?q=a"); resp.StatusCode != http.StatusOK {
			t.Fatalf("first search (tells the limit): %d %s", resp.StatusCode, body)
		}
		resp, body := e.get(t, "/github/search/repositories?q=b")
		eb := errorOf(t, body)
		if resp.StatusCode != http.StatusInternalServerError || eb.Error != "reserve_too_large" ||
			!strings.Contains(eb.Message, "github search: the reserve of 100 requests") {
			t.Fatalf("second search: %d %+v", resp.StatusCode, eb)
		}
		if resp, body := e.get(t, "/github/repos/o/r"); resp.StatusCode != http.StatusOK {
			t.Fatalf("core (5,000 an hour): %d %s", resp.StatusCode, body)
		}
	})
}
