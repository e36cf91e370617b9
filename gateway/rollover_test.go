package gateway

import (
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// Once a window's reset has passed, /status and the dashboard show it
// rolled over — refilled and marked assumed — not "49/50, resets in 0s"
// as the last answer left it.
func TestDashboardRollsTheWindowOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{githubAPI(50, time.Minute, simTokens...)}, map[string][]string{"github": {"tok-alice-1"}}, nil)
		e.get(t, "/github/repos/o/r")
		row := regexp.MustCompile(`<td class="num remaining">(\d+)</td>\s*<td class="num limit">(\d+)</td>\s*<td class="meter">([^\n]*)</td>\s*<td class="num resets-in"[^>]*>([^<]*)</td>`)
		check := func(when, remaining string, assumed bool) {
			t.Helper()
			_, page := e.get(t, "/")
			m := row.FindStringSubmatch(page)
			if m == nil {
				t.Fatalf("%s: no quota row on the dashboard:\n%s", when, page)
			}
			if m[1] != remaining || m[2] != "50" || strings.Contains(m[3], ">assumed<") != assumed || m[4] == "0s" {
				t.Errorf("%s: the dashboard shows %s/%s (%q), resets in %q; want %s/50, assumed %v", when, m[1], m[2], m[3], m[4], remaining, assumed)
			}
			rep := e.status(t)
			rs := rep.Credentials[0].Resources[0]
			if *rs.Remaining != *rs.Limit && assumed || rs.Assumed != assumed {
				t.Errorf("%s: /status %d/%d, assumed %v", when, *rs.Remaining, *rs.Limit, rs.Assumed)
			}
		}
		check("in the window", "49", false)
		time.Sleep(3 * time.Minute)
		check("after the reset", "50", true)
	})
}

// A provider without a token says "anonymous" on the dashboard, not
// "1 credential".
func TestDashboardSaysAnonymous(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, []sim.APIConfig{githubAPI(50, time.Minute, simTokens...)}, nil, nil)
		e.get(t, "/github/repos/o/r")
		_, page := e.get(t, "/")
		if !strings.Contains(page, "· anonymous</small>") || strings.Contains(page, "1 credential") {
			t.Errorf("the dashboard's provider line:\n%s", page)
		}
		if rep := e.status(t); !rep.Providers[0].Anonymous {
			t.Errorf("/status: %+v", rep.Providers[0])
		}
	})
}
