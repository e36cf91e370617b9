package batch_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/batch"
	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/transport"
)

// plenty answers every request at once, in memory, like api.github.com
// with the quota far from spent: what is measured is the client.
type plenty struct{ header http.Header }

func newPlenty() *plenty {
	h := http.Header{}
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-RateLimit-Limit", "5000000")
	h.Set("X-RateLimit-Remaining", "4999999")
	h.Set("X-RateLimit-Used", "1")
	h.Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
	h.Set("X-RateLimit-Resource", "core")
	return &plenty{header: h}
}

var plentyBody = []byte(`{"login":"octocat","id":1}`)

func (p *plenty) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: p.header.Clone(), Body: io.NopCloser(bytes.NewReader(plentyBody)), ContentLength: int64(len(plentyBody)), Request: req}, nil
}

// overheadTransport is a rate-keeping transport over plenty whose quota
// and secondary limits never bind.
func overheadTransport(b *testing.B) *transport.Transport {
	p, err := provider.New("github", provider.GitHub, "https://api.github.test")
	if err != nil {
		b.Fatal(err)
	}
	p.Secondary = provider.Secondary{}
	reg := provider.NewRegistry()
	_ = reg.Add(p)
	tr, err := transport.New(transport.Options{
		Providers:      reg,
		Pools:          map[string]*creds.Pool{"github": creds.NewPool("github", creds.NewToken("github", 1, "tok-bench-0001", "bench"))},
		Base:           newPlenty(),
		Policy:         quota.Policy{Kind: quota.Greedy},
		SkipValidation: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	return tr
}

// BenchmarkTransportAlone is the baseline of BenchmarkBatchOverhead: the
// same requests through the transport, one after the other.
//
//	go test -run '^$' -bench 'Alone|BatchOverhead' -benchtime 200000x -count 5 ./batch/
func BenchmarkTransportAlone(b *testing.B) {
	tr := overheadTransport(b)
	req, _ := http.NewRequest(http.MethodGet, "https://api.github.test/user", nil)
	b.ReportAllocs()
	cpu := cpuNow()
	for b.Loop() {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
	reportCPU(b, cpu)
}

// reportCPU reports, as cpu-ns/op, the CPU time the process spent since
// start per operation: on a machine shared with other work the wall time
// per operation measures the others as much as the code.
func reportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(cpuNow()-start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkBatchOverhead sends the same requests as one batch that never
// waits, one in flight: its difference from BenchmarkTransportAlone is
// what the scheduler adds per request (Add, the queue, the result).
func BenchmarkBatchOverhead(b *testing.B) {
	tr := overheadTransport(b)
	req, _ := http.NewRequest(http.MethodGet, "https://api.github.test/user", nil)
	bt := batch.New(tr, batch.Options{InFlight: 1, OnResult: func(r batch.Result) {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}})
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuNow()
	for range b.N {
		if err := bt.Add(req); err != nil {
			b.Fatal(err)
		}
	}
	if err := bt.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	reportCPU(b, cpu)
}

// BenchmarkBatchAlone is the scheduler by itself: a batch over a
// RoundTripper that answers at once in memory (plenty), whose own cost
// BenchmarkPlentyAlone gives. The difference is the scheduler's cost per
// request, measured with less of the transport's noise around it.
func BenchmarkBatchAlone(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "https://api.github.test/user", nil)
	bt := batch.New(newPlenty(), batch.Options{InFlight: 1})
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuNow()
	for range b.N {
		if err := bt.Add(req); err != nil {
			b.Fatal(err)
		}
	}
	if err := bt.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	reportCPU(b, cpu)
}

// BenchmarkPlentyAlone is the baseline of BenchmarkBatchAlone.
func BenchmarkPlentyAlone(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "https://api.github.test/user", nil)
	rt := newPlenty()
	b.ReportAllocs()
	cpu := cpuNow()
	for b.Loop() {
		resp, _ := rt.RoundTrip(req)
		resp.Body.Close()
	}
	reportCPU(b, cpu)
}
