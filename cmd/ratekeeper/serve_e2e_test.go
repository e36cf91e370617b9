package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The slow-client runs: a loopback gateway without client keys, 300
// connections trickling their request header a byte a second, and a
// well-behaved client asking 60 times, each on a new connection.
const (
	slowConns    = 300
	probes       = 60
	probeEvery   = 100 * time.Millisecond
	normalAnswer = time.Second // far below the 10-s header timeout a starved client would wait
)

// slowRun is what one run measured.
type slowRun struct {
	baseline   []time.Duration // the probes' times with no slow client
	took       []time.Duration // with the slow clients; -1 for no 200
	reconnects int64           // slow connections the gateway closed and the clients opened again
	metrics    string          // /metrics after the probes
	gateway    *process
}

// answeredInTime counts the probes answered 200 within normalAnswer.
func (r *slowRun) answeredInTime() int {
	n := 0
	for _, d := range r.took {
		if d >= 0 && d <= normalAnswer {
			n++
		}
	}
	return n
}

// runSlowClients starts `ratekeeper sim` and `ratekeeper serve` (no keys,
// loopback), measures the probes alone, then with slowConns slow
// connections open, and scrapes /metrics.
func runSlowClients(t testing.TB) *slowRun {
	t.Helper()
	sim := startProcess(t, nil, "sim", "--listen", "127.0.0.1:0", "--dialect", "github", "--prefix", "/github",
		"--tokens", "alice:tok-alice-1", "--limit", "100000", "--window", "1h")
	simURL := sim.waitFor(t, regexp.MustCompile(`listening on (http://\S+) `))
	gw := startProcess(t, []string{"GITHUB_TOKEN=tok-alice-1"}, "serve", "--listen", "127.0.0.1:0", "--db", "memory",
		"--provider", "github="+simURL+"/github", "--refresh", "0")
	base := gw.waitFor(t, regexp.MustCompile(`ratekeeper gateway on (http://\S+) `))
	run := &slowRun{gateway: gw}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 15 * time.Second}
	for i := range 10 {
		run.baseline = append(run.baseline, probeOnce(client, fmt.Sprintf("%s/github/repos/o/base-%d", base, i)))
	}

	ctx, stop := context.WithCancel(context.Background())
	var reconnects atomic.Int64
	var wg sync.WaitGroup
	addr := strings.TrimPrefix(base, "http://")
	for range slowConns {
		wg.Go(func() { trickle(ctx, addr, &reconnects) })
	}
	time.Sleep(time.Second) // every slow connection open and trickling
	for i := range probes {
		run.took = append(run.took, probeOnce(client, fmt.Sprintf("%s/github/repos/o/r-%d", base, i)))
		time.Sleep(probeEvery)
	}
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	run.metrics = string(b)
	stop()
	wg.Wait()
	run.reconnects = reconnects.Load()
	return run
}

// probeOnce GETs url on a new connection and returns how long the answer
// took, or -1 when it is not a 200.
func probeOnce(c *http.Client, url string) time.Duration {
	start := time.Now()
	resp, err := c.Get(url)
	if err != nil {
		return -1
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return -1
	}
	return time.Since(start)
}

// trickle keeps a connection to addr sending a request header that never
// ends, a byte a second; when the gateway closes it, it opens another at
// the next second, until ctx ends.
func trickle(ctx context.Context, addr string, reconnects *atomic.Int64) {
	const header = "GET /github/repos/o/r HTTP/1.1\r\nHost: gw\r\nX-Slow: "
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var c net.Conn
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for i := 0; ; i++ {
		if c == nil {
			var err error
			if c, err = net.Dial("tcp", addr); err != nil {
				c = nil
			}
			i = 0
		}
		if c != nil {
			b := byte('a') // the header line goes on for ever
			if i < len(header) {
				b = header[i]
			}
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := c.Write([]byte{b}); err != nil {
				c.Close()
				c = nil
				reconnects.Add(1)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// metricValue reads one sample of a Prometheus text page; absent reads
// as 0.
func metricValue(page, sample string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindStringSubmatch(page)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestSlowClientsDoNotLockOutTheGateway: 300 slow-header connections on a
// loopback `ratekeeper serve` without client keys (more than the 256 that
// used to make every new client get 503): the well-behaved client is
// answered within its normal time at least 59 times of 60, the gateway
// closes slow connections for newer ones and says so in /metrics, and its
// log has a line per reason at most every 10 s.
func TestSlowClientsDoNotLockOutTheGateway(t *testing.T) {
	run := runSlowClients(t)
	if n := run.answeredInTime(); n < probes-1 {
		t.Errorf("the well-behaved client was answered within %s %d times of %d; times %v", normalAnswer, n, probes, run.took)
	}
	closed := metricValue(run.metrics, `ratekeeper_gateway_refused_connections_total{reason="too_many_from_address"}`)
	if closed == 0 || run.reconnects == 0 {
		t.Errorf("slow connections closed for newer ones: %v counted, %d seen by the clients", closed, run.reconnects)
	}
	if pending := metricValue(run.metrics, "ratekeeper_gateway_unauthenticated_connections"); pending > 4*64 {
		t.Errorf("%v connections pending, want at most 256", pending)
	}
	run.gateway.stop(t)
	lines := regexp.MustCompile(`msg=refused reason=too_many_from_address count=\d+`).FindAllString(run.gateway.out(), -1)
	if len(lines) == 0 || len(lines) > 3 {
		t.Errorf("%d log lines for connections closed for newer ones in about 8 s, want 1 to 3:\n%s", len(lines), run.gateway.out())
	}
	t.Logf("answered within %s: %d of %d; baseline %s, with slow clients p50 %s, max %s; %v closed for newer ones (%d reconnects)",
		normalAnswer, run.answeredInTime(), probes, maxOf(run.baseline), percentile(run.took, 50), maxOf(run.took), closed, run.reconnects)
}

// BenchmarkSlowClients measures the run of TestSlowClientsDoNotLockOutTheGateway:
// how many of the 60 probes were answered within 1 s, their median and
// slowest time (the baseline's without slow clients), and how many slow
// connections the gateway closed for newer ones.
//
//	go test -run '^$' -bench SlowClients -benchtime 1x ./cmd/ratekeeper/
func BenchmarkSlowClients(b *testing.B) {
	for range b.N {
		run := runSlowClients(b)
		b.ReportMetric(float64(run.answeredInTime()), "answered-of-60")
		b.ReportMetric(float64(percentile(run.took, 50).Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(maxOf(run.took).Microseconds())/1000, "max-ms")
		b.ReportMetric(float64(maxOf(run.baseline).Microseconds())/1000, "baseline-max-ms")
		b.ReportMetric(metricValue(run.metrics, `ratekeeper_gateway_refused_connections_total{reason="too_many_from_address"}`), "closed-for-newer")
		run.gateway.stop(b)
	}
}

// percentile of the durations (a missing answer counts as the slowest).
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	for i, d := range s {
		if d < 0 {
			s[i] = time.Duration(1<<63 - 1)
		}
	}
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func maxOf(ds []time.Duration) time.Duration { return percentile(ds, 100) }
