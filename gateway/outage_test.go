package gateway

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/store/storetest"
)

// TestDatabaseOutageAnswers503: for each class of transient error, on
// SQLite and PostgreSQL, a request whose quota state's database stays
// away longer than the gateway's max wait gets 503 with Retry-After
// (never 502), after waiting for it no longer than the max wait, and
// nothing is sent upstream; once the database is back requests go.
func TestDatabaseOutageAnswers503(t *testing.T) {
	for _, k := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"SQLite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "gw.db") }},
		{"PostgreSQL", func(t *testing.T) string { return storetest.NewPostgresSchema(t, storetest.PostgresBase(t)) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			for _, e := range storetest.TransientErrors(t) {
				t.Run(e.Name, func(t *testing.T) {
					db, err := store.Open(t.Context(), k.dsn(t), store.Options{})
					if err != nil {
						t.Fatal(err)
					}
					defer db.Close()
					faulty := storetest.NewFaulty(db)
					clk := storetest.NewInstantWaits(time.Now())
					const outageBound = 2 * time.Minute
					st := quotastate.New(store.WaitOutages(faulty, store.NewOutage(store.OutageOptions{
						Timeout: outageBound, Now: clk.Now, After: clk.After})), nil)
					defer st.Close(t.Context())
					const maxWait = 5 * time.Second
					env := newEnv(t, []sim.APIConfig{githubAPI(100, time.Hour, sim.TokenConfig{Token: "tok-gw-outage-1", Owner: "alice"})},
						map[string][]string{"github": {"tok-gw-outage-1"}}, func(o *Options) {
							o.Client.State = st
							o.Client.MaxWait = maxWait
						})
					faulty.Fail(e.Err, -1)
					start := clk.Now()
					resp, body := env.get(t, "/github/repos/o/r")
					if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "database_unavailable") {
						t.Fatalf("during the outage: %d, Retry-After %q, %s; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
					}
					if waited := clk.Now().Sub(start); waited > maxWait+time.Second || waited >= outageBound {
						t.Errorf("the request waited %v for the database; want at most the max wait of %v", waited, maxWait)
					}
					if n := env.srv.Stats().Total.Requests; n != 0 {
						t.Errorf("%d requests sent upstream while the quota state was away; want none", n)
					}
					faulty.Heal()
					if resp, body := env.get(t, "/github/repos/o/r"); resp.StatusCode != http.StatusOK {
						t.Errorf("once the database is back: %d %s; want 200", resp.StatusCode, body)
					}
				})
			}
		})
	}
}
