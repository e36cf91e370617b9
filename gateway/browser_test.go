package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

// chromiumPath is where Debian's chromium package puts the browser; CI
// installs it (.ci/run).
const chromiumPath = "/usr/bin/chromium"

// pageRow is one quota row of the dashboard, as the browser shows it.
type pageRow struct {
	Provider   string `json:"provider"`
	Credential string `json:"credential"`
	Owner      string `json:"owner"`
	State      string `json:"state"`
	Resource   string `json:"resource"`
	Remaining  string `json:"remaining"`
	Limit      string `json:"limit"`
	ResetsIn   string `json:"resetsIn"`
	Health     string `json:"health"`
}

type pageView struct {
	Rows      []pageRow `json:"rows"`
	Requests  string    `json:"requests"`
	Refused   string    `json:"refused"`
	Bars      int       `json:"bars"`
	BarTotal  int       `json:"barTotal"`
	Providers []string  `json:"providers"`
	// Overviews is each provider's overall health word, by provider.
	Overviews map[string]string `json:"overviews"`
}

const readPage = `(() => {
	const text = (el, sel) => el.querySelector(sel).textContent.trim();
	const rows = Array.from(document.querySelectorAll("section.provider tr.bucket")).map(tr => ({
		provider: tr.closest("section").dataset.provider,
		credential: text(tr, "td.credential"),
		owner: text(tr, "td.owner"),
		state: text(tr, "td.state"),
		resource: text(tr, "td.resource"),
		remaining: text(tr, "td.remaining"),
		limit: text(tr, "td.limit"),
		resetsIn: text(tr, "td.resets-in"),
		health: text(tr, "td.health"),
	}));
	const bars = Array.from(document.querySelectorAll("#chart g.minute"));
	return {
		rows,
		requests: document.getElementById("total-requests").textContent.trim(),
		refused: document.getElementById("total-refused").textContent.trim(),
		bars: bars.length,
		barTotal: bars.reduce((n, g) => n + Number(g.dataset.requests), 0),
		providers: Array.from(document.querySelectorAll("section.provider")).map(s => s.dataset.provider),
		overviews: Object.fromEntries(Array.from(document.querySelectorAll("section.provider")).map(
			s => [s.dataset.provider, s.querySelector("p.overview .health")?.textContent.trim() ?? ""])),
	};
})()`

// The dashboard, rendered by a real browser, shows the numbers /status
// serves: for every provider, credential and resource the remaining quota,
// the limit, the state, the health and the time to reset; and the requests
// of the last hour. It loads nothing from anywhere but the gateway and
// logs no error (a Content-Security-Policy violation would be one).
func TestDashboardInBrowser(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI must run the browser test, but %s is missing (.ci/run installs Debian's chromium): %v", chromiumPath, err)
		}
		t.Skipf("%s is not installed (apt-get install -y chromium); CI installs it and runs this test", chromiumPath)
	}
	l := newLiveEnv(t, []sim.APIConfig{githubAPI(6, time.Hour, simTokens...), gitlabAPI(simTokens...)},
		map[string][]string{"github": {"tok-alice-1", "tok-bob-1"}, "gitlab": {"tok-carol-1"}},
		func(o *Options) { o.Client.MaxWait = 50 * time.Millisecond })
	client := l.gwTS.Client()
	requests, refused := 0, 0
	for i := range 16 {
		resp, err := client.Get(fmt.Sprintf("%s/github/repos/o/r%d", l.gwTS.URL, i))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		requests++
		if resp.StatusCode == http.StatusTooManyRequests {
			refused++
		}
	}
	for range 3 {
		resp, err := client.Get(l.gwTS.URL + "/gitlab/projects/1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		requests++
	}
	if refused == 0 {
		t.Fatal("no request was refused: the page would not show an exhausted bucket")
	}

	alloc, cancelAlloc := chromedp.NewExecAllocator(t.Context(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()

	var mu sync.Mutex
	var loaded, problems []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			loaded = append(loaded, e.Request.URL)
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+e.ExceptionDetails.Text)
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError || e.Entry.Level == log.EntryLevelWarning {
				problems = append(problems, fmt.Sprintf("%s %s: %s", e.Entry.Level, e.Entry.Source, e.Entry.Text))
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning {
				problems = append(problems, "console "+string(e.Type))
			}
		}
	}); err != nil {
		t.Fatalf("starting %s: %v", chromiumPath, err)
	}
	timed, cancelTimed := context.WithTimeout(ctx, 60*time.Second)
	defer cancelTimed()
	if err := chromedp.Do(timed, chromedp.Navigate(l.gwTS.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#dashboard"))); err != nil {
		t.Fatalf("loading the dashboard: %v", err)
	}
	status := func() transport.StatusReport {
		resp, err := client.Get(l.gwTS.URL + "/status")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var rep transport.StatusReport
		if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	// The page and /status are read at two moments: a window that rolls
	// over between them (the simulated GitLab's minute is aligned on the
	// clock) changes the numbers, so the page is read again, between two
	// reads of /status that agree.
	var view pageView
	var rep transport.StatusReport
	for try := 0; ; try++ {
		before := status()
		if err := chromedp.Do(timed, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#dashboard"))); err != nil {
			t.Fatalf("reloading the dashboard: %v", err)
		}
		var err error
		if view, err = chromedp.Run(timed, chromedp.Evaluate[pageView](readPage)); err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		rep = status()
		if sameNumbers(before, rep) || try == 2 {
			break
		}
	}

	// Every bucket of /status is a row of the page with the same numbers,
	// and the page has no other row.
	rows := map[string]pageRow{}
	for _, r := range view.Rows {
		rows[r.Provider+" "+r.Credential+" "+r.Resource] = r
	}
	n := 0
	for _, c := range rep.Credentials {
		for _, rs := range c.Resources {
			n++
			key := c.Provider + " " + c.Credential + " " + rs.Resource
			r, ok := rows[key]
			if !ok {
				t.Errorf("the page has no row for %s", key)
				continue
			}
			owner := c.Owner
			if owner == "" {
				owner = "—" // the page's mark for an owner not learnt yet
			}
			want := pageRow{Provider: c.Provider, Credential: c.Credential, Owner: owner, State: c.State, Resource: rs.Resource,
				Remaining: numberText(rs.Remaining), Limit: numberText(rs.Limit), Health: rs.Health, ResetsIn: r.ResetsIn}
			if r != want {
				t.Errorf("%s:\npage   %+v\nstatus %+v", key, r, want)
			}
			if rs.ResetsIn != nil {
				shown, err := parseHuman(r.ResetsIn)
				if d := shown - *rs.ResetsIn; err != nil || d < -3 || d > 3 {
					t.Errorf("%s: page says resets in %q, /status %.0fs", key, r.ResetsIn, *rs.ResetsIn)
				}
			}
		}
	}
	if n == 0 || len(view.Rows) != n {
		t.Errorf("the page shows %d rows, /status %d buckets", len(view.Rows), n)
	}
	if !hasRow(view.Rows, "EXHAUSTED") {
		t.Errorf("no exhausted bucket on the page: %+v", view.Rows)
	}
	for _, ps := range rep.Providers {
		if got := view.Overviews[ps.Provider]; got != ps.Health {
			t.Errorf("%s: the page's overall health %q, /status %q", ps.Provider, got, ps.Health)
		}
	}
	if strings.Join(view.Providers, ",") != "github,gitlab" {
		t.Errorf("providers on the page: %v", view.Providers)
	}
	if view.Requests != strconv.Itoa(requests) || view.Refused != strconv.Itoa(refused) || view.BarTotal != requests || view.Bars != HistoryMinutes {
		t.Errorf("chart: %s requests, %s refused, %d bars summing to %d; sent %d, %d refused", view.Requests, view.Refused, view.Bars, view.BarTotal, requests, refused)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, u := range loaded {
		if !strings.HasPrefix(u, l.gwTS.URL+"/") {
			t.Errorf("the page loaded %s, which is not the gateway's", u)
		}
	}
	for _, want := range []string{"/assets/style.css", "/assets/app.js"} {
		if !containsSuffix(loaded, want) {
			t.Errorf("the page did not load %s: %v", want, loaded)
		}
	}
	for _, p := range problems {
		t.Errorf("browser: %s", p)
	}
}

// sameNumbers reports whether two status reports show the same remaining
// and limit for every bucket.
func sameNumbers(a, b transport.StatusReport) bool {
	numbers := func(r transport.StatusReport) string {
		var sb strings.Builder
		for _, c := range r.Credentials {
			for _, rs := range c.Resources {
				fmt.Fprintf(&sb, "%s %s %s %s/%s;", c.Provider, c.Credential, rs.Resource, numberText(rs.Remaining), numberText(rs.Limit))
			}
		}
		return sb.String()
	}
	return numbers(a) == numbers(b)
}

func numberText(v *int64) string {
	if v == nil {
		return "?"
	}
	return strconv.FormatInt(*v, 10)
}

// parseHuman reads the dashboard's "1h 02m", "4m 05s" or "12s" back into
// seconds.
func parseHuman(s string) (float64, error) {
	d, err := time.ParseDuration(strings.ReplaceAll(s, " ", ""))
	return d.Seconds(), err
}

func hasRow(rows []pageRow, health string) bool {
	for _, r := range rows {
		if r.Health == health {
			return true
		}
	}
	return false
}

func containsSuffix(list []string, suffix string) bool {
	for _, s := range list {
		if strings.HasSuffix(s, suffix) {
			return true
		}
	}
	return false
}
