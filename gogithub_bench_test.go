package ratekeeper_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/sim"
)

// loopbackBatch is the batch in real time on loopback: four
// tokens, two of them of one user, 100 requests per bucket per 10 s
// rolling window, 20 ms of latency, 1,200 distinct GETs that fill four
// windows exactly, 8 goroutines (or connections).
var loopbackBatch = pooledBatch{limit: 100, window: 10 * time.Second, latency: 20 * time.Millisecond, windows: 4, workers: 8}

// BenchmarkPooledBatch sends loopbackBatch with go-github and with plain
// GETs over the library, and with plain GETs through the gateway (Serve on
// a loopback port, quota state in SQLite as `serve --db FILE` keeps it).
// It reports the makespan against the ideal, go-github's own refusals and
// what the server charged per URL. Run it with -benchtime=1x; each takes
// about 31 s.
func BenchmarkPooledBatch(b *testing.B) {
	b.Run("go-github/library", func(b *testing.B) {
		for b.Loop() {
			srv, base, stop := loopbackSim(b)
			tr, err := ratekeeper.NewTransport(loopbackOptions(srv, base))
			if err != nil {
				b.Fatal(err)
			}
			res := loopbackBatch.runGoGitHub(b, &http.Client{Transport: tr}, base+"/")
			report(b, res, srv)
			tr.Close()
			stop()
		}
	})
	b.Run("plain/library", func(b *testing.B) {
		for b.Loop() {
			srv, base, stop := loopbackSim(b)
			tr, err := ratekeeper.NewTransport(loopbackOptions(srv, base))
			if err != nil {
				b.Fatal(err)
			}
			report(b, loopbackBatch.runPlain(&http.Client{Transport: tr}, base+"/"), srv)
			tr.Close()
			stop()
		}
	})
	b.Run("plain/serve", func(b *testing.B) { serveBatch(b, loopbackBatch) })
	revoked := loopbackBatch
	revoked.revoked = true
	b.Run("plain/serve/one-token-revoked", func(b *testing.B) { serveBatch(b, revoked) })
}

// serveBatch sends batch as plain GETs through the gateway.
func serveBatch(b *testing.B, batch pooledBatch) {
	for b.Loop() {
		srv, base, stop := loopbackSim(b)
		opts := batch.clientOptions(srv, false)
		opts.Providers = []string{"github=" + base}
		opts.Base = nil
		opts.DB = filepath.Join(b.TempDir(), "ratekeeper.db")
		gw, err := ratekeeper.NewGateway(ratekeeper.GatewayOptions{Client: opts, Providers: []string{"github"},
			RefreshEvery: 15 * time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- gw.Serve(ctx, ln) }()
		client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: loopbackBatch.workers, MaxIdleConnsPerHost: loopbackBatch.workers}}
		reportBatch(b, batch, batch.runPlain(client, "http://"+ln.Addr().String()+"/github/"), srv)
		client.CloseIdleConnections()
		cancel()
		if err := <-served; err != nil {
			b.Error(err)
		}
		gw.Close()
		stop()
	}
}

func loopbackSim(b *testing.B) (*sim.Server, string, func()) {
	srv := loopbackBatch.sim(b)
	ts := httptest.NewServer(srv)
	return srv, ts.URL, ts.Close
}

func loopbackOptions(srv *sim.Server, base string) ratekeeper.Options {
	opts := loopbackBatch.clientOptions(srv, false)
	opts.Providers = []string{"github=" + base}
	opts.Base = nil
	return opts
}

func report(b *testing.B, res batchResult, srv *sim.Server) { reportBatch(b, loopbackBatch, res, srv) }

func reportBatch(b *testing.B, batch pooledBatch, res batchResult, srv *sim.Server) {
	st := srv.Stats().Total
	b.ReportMetric(res.makespan.Seconds(), "makespan-s")
	b.ReportMetric(res.makespan.Seconds()/batch.ideal().Seconds(), "x-ideal")
	b.ReportMetric(float64(res.refusals), "local-refusals")
	b.ReportMetric(float64(st.Charged)/float64(batch.jobs()), "charged/URL")
	b.ReportMetric(float64(st.Violations), "violations")
	if res.failures > 0 {
		b.Errorf("%d requests failed, first: %v", res.failures, res.firstErr)
	}
}
