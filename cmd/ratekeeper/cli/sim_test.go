package cli

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/sim"
)

func TestSimEndpointLimitFlag(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "sim.toml")
	if err := os.WriteFile(cfgFile, []byte("[[apis]]\ndialect = \"gitlab\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--endpoint-limit", "GET /x"}, `--endpoint-limit "GET /x": no =LIMIT/WINDOW`},
		{[]string{"--endpoint-limit", "GET x=4/1s"}, `apis[0].endpoint_limits[0].pattern: "GET x": the path does not start with /`},
		{[]string{"--endpoint-limit", "/x=4/1s,refusal=silent"}, `apis[0].endpoint_limits[0].refusal: unknown refusal "silent"`},
		{[]string{"--config", cfgFile, "--endpoint-limit", "/x=4/1s"}, "--endpoint-limit cannot be combined with --config"},
	} {
		out, stderr, code := run(t, "", append([]string{"sim", "--listen", "127.0.0.1:0"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) || out != "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

// The API line shows the endpoint limits, and the totals the violations
// by kind, the early retries and each endpoint limit's counts. (On the
// real clock: an hour's window is not crossed between the requests.)
func TestSimLinesShowEndpointLimits(t *testing.T) {
	q, err := sim.QuickConfig(sim.QuickOptions{Dialects: []string{"gitlab"}, Tokens: []sim.TokenConfig{{Token: "tok-gl-1", Owner: "gina"}},
		EndpointLimits: []sim.EndpointLimitConfig{mustLimit(t, "GET /api/v4/users/*=1/1h,refusal=bare,name=users")}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sim.New(q)
	if err != nil {
		t.Fatal(err)
	}
	if line := describeAPI(srv.APIs()[0], "http://127.0.0.1:1"); !strings.Contains(line, "[GET /api/v4/users/* 1/1h fixed, refused bare]") {
		t.Errorf("API line %q", line)
	}
	rt := srv.Transport("")
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, "http://sim.test/api/v4/users/1", nil)
		req.Header.Set("Private-Token", "tok-gl-1")
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	var out bytes.Buffer
	printSimTotals(&out, srv.Stats())
	for _, want := range []string{
		"3 requests, 1 accepted, 0 not modified, 0 unauthorized, 2 violations (0 primary, 0 secondary, 2 endpoint limits), 1 early retries",
		"  gitlab users (gina): 3 requests, 2 refused, 1 early retries",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("totals lack %q:\n%s", want, out.String())
		}
	}
}

func mustLimit(t *testing.T, spec string) sim.EndpointLimitConfig {
	t.Helper()
	l, err := sim.ParseEndpointLimit(spec)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
