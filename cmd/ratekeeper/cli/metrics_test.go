package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper/internal/buildinfo"
)

func TestMetricsListenIsLoopbackOnlyByDefault(t *testing.T) {
	for _, c := range []struct {
		listen string
		remote bool
		says   string // "" when accepted
	}{
		{"", false, ""},
		{"127.0.0.1:9464", false, ""},
		{"[::1]:9464", false, ""},
		{"localhost:9464", false, ""},
		{"0.0.0.0:9464", false, "is not a loopback address"},
		{":9464", false, "is not a loopback address"},
		{"10.1.2.3:9464", false, "add --metrics-allow-remote"},
		{"0.0.0.0:9464", true, ""},
		{"9464", false, "want HOST:PORT"},
	} {
		m := metricsFlags{listen: c.listen, allowRemote: c.remote}
		err := m.check()
		if c.says == "" && err != nil || c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says)) {
			t.Errorf("--metrics-listen %q (remote %v): %v, want %q", c.listen, c.remote, err, c.says)
		}
	}
	for _, args := range [][]string{
		{"poll", "--metrics-listen", "0.0.0.0:9464", "https://api.github.com/events"},
		{"fetch", "--metrics-listen", "0.0.0.0:9464", "--db", t.TempDir() + "/rk.db", "https://api.github.com/"},
	} {
		if _, stderr, code := run(t, "", args...); code != 2 || !strings.Contains(stderr, "is not a loopback address") {
			t.Errorf("%s: exit %d, %s; want 2 refusing the address", strings.Join(args, " "), code, stderr)
		}
	}
}

func TestMetricsServeSaysWhereAndServes(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ratekeeper_test_total", Help: "A test counter."})
	reg.MustRegister(c)
	c.Add(3)
	var stderr bytes.Buffer
	m := metricsFlags{listen: "127.0.0.1:0"}
	stop, err := m.serve(context.Background(), reg, nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	url := regexp.MustCompile(`metrics on (http://\S+)`).FindStringSubmatch(stderr.String())
	if url == nil {
		t.Fatalf("stderr %q does not say where the metrics are", stderr.String())
	}
	resp, err := http.Get(url[1])
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "ratekeeper_test_total 3") {
		t.Errorf("scrape:\n%s", body)
	}
	if !regexp.MustCompile(`(?m)^ratekeeper_build_info\{commit="[^"]+",go_version="go[^"]+",version="[^"]+"\} 1$`).Match(body) {
		t.Errorf("no ratekeeper_build_info in the scrape:\n%s", body)
	}
}

// serve's /metrics names the build too, so a dashboard of a fleet shows
// gateways and workers alike.
func TestServeMetricsHaveBuildInfo(t *testing.T) {
	base := startServe(t)
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"\nratekeeper_build_info{", "\ngo_goroutines ", "\nprocess_start_time_seconds "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("serve's /metrics has no %q:\n%s", want[1:], body)
		}
	}
}

func TestVersion(t *testing.T) {
	want := buildinfo.Read().String()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		stdout, stderr, code := run(t, "", args...)
		if code != 0 || stdout != want || stderr != "" {
			t.Errorf("ratekeeper %s: exit %d, stdout %q, stderr %q; want 0 and %q", args[0], code, stdout, stderr, want)
		}
	}
}

// Every command's --metrics-listen serves the probes beside /metrics:
// /healthz while it runs, /readyz as its check says.
func TestMetricsListenProbes(t *testing.T) {
	var down atomic.Pointer[error]
	check := func(context.Context) error {
		if e := down.Load(); e != nil {
			return *e
		}
		return nil
	}
	var stderr bytes.Buffer
	m := metricsFlags{listen: "127.0.0.1:0"}
	stop, err := m.serve(context.Background(), prometheus.NewRegistry(), check, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	base := regexp.MustCompile(`metrics on (http://\S+)/metrics`).FindStringSubmatch(stderr.String())
	if base == nil {
		t.Fatalf("stderr %q does not say where the metrics are", stderr.String())
	}
	probe := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base[1] + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := probe("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := probe("/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz up: %d %q", code, body)
	}
	e := errors.New("the database does not answer: connection refused")
	down.Store(&e)
	if code, body := probe("/readyz"); code != 503 || body != "not ready: the database does not answer: connection refused\n" {
		t.Errorf("/readyz down: %d %q", code, body)
	}
	if code, _ := probe("/healthz"); code != 200 {
		t.Errorf("/healthz while not ready: %d; the process is alive", code)
	}
	down.Store(nil)
	if code, _ := probe("/readyz"); code != 200 {
		t.Errorf("/readyz up again: %d", code)
	}
}
