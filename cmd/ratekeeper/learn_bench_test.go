package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/transport"
)

// fitShape is a batch that fills its fixed windows exactly: K buckets
// (distinct owners) of L requests each, for `windows` windows.
type fitShape struct {
	name    string
	owners  []string
	limit   int64
	windows int
}

func (f fitShape) n() int { return distinct(f.owners) * int(f.limit) * f.windows }

const (
	fitWindow  = 4 * time.Second
	fitLatency = 20 * time.Millisecond
	fitWorkers = 10 // fetch's default --concurrency
)

var fitShapes = []fitShape{
	{"1token", []string{"alice"}, 20, 3},
	{"3tokens3owners", []string{"alice", "bob", "carol"}, 20, 3},
	{"4tokens2owners", []string{"alice", "bob", "alice", "bob"}, 20, 3},
}

// BenchmarkLearnExactFit runs batches that fit their windows exactly, with
// 1 token, 3 tokens of 3 owners and 4 tokens of 2 owners, through
// `ratekeeper fetch` with its default SQLite --db and through the library
// with memory state, against the same simulator (fixed 4-second windows,
// 20 ms answers). Each run starts just after a window opens; the ideal is
// every window spent in full as it opens, so it ends one round-trip tail
// into the last window: a request spent to learn costs a whole window
// more. It reports the makespan, its ratio to the ideal, what the server
// charged beyond the batch (0: nothing spent to learn) and its refusals.
//
//	go test ./cmd/ratekeeper -run '^$' -bench LearnExactFit -benchtime 1x
func BenchmarkLearnExactFit(b *testing.B) {
	for _, via := range []string{"cli", "library"} {
		for _, f := range fitShapes {
			b.Run(via+"/"+f.name, func(b *testing.B) {
				for b.Loop() {
					s := startFitSim(b, f.owners, f.limit, fitWindow)
					start := atWindowStart(fitWindow)
					if via == "cli" {
						fitThroughCLI(b, s, f)
					} else {
						fitThroughLibrary(b, s, f)
					}
					makespan := time.Since(start)
					ideal := fitIdeal(f)
					st := s.srv.Stats().Total
					b.ReportMetric(makespan.Seconds(), "makespan-s")
					b.ReportMetric(makespan.Seconds()/ideal.Seconds(), "x-ideal")
					b.ReportMetric(float64(st.Charged-int64(f.n())), "extra-charged")
					b.ReportMetric(float64(st.Violations), "refusals")
				}
			})
		}
	}
}

// atWindowStart sleeps until 50 ms after the next window opens (windows
// are aligned on multiples of w) and returns the time.
func atWindowStart(w time.Duration) time.Time {
	now := time.Now()
	next := now.Truncate(w).Add(w + 50*time.Millisecond)
	time.Sleep(next.Sub(now))
	return time.Now()
}

// fitIdeal is the earliest a perfect client ends a run started 50 ms into
// a window: the rest of the first window, the windows between, and the
// last window's requests at fitWorkers in flight.
func fitIdeal(f fitShape) time.Duration {
	perWindow := distinct(f.owners) * int(f.limit)
	tail := time.Duration((perWindow+fitWorkers-1)/fitWorkers) * fitLatency
	return fitWindow - 50*time.Millisecond + time.Duration(f.windows-2)*fitWindow + tail
}

func fitThroughCLI(b *testing.B, s *fitSim, f fitShape) {
	dir := b.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	p := startProcess(b, []string{"GITHUB_TOKEN=" + strings.Join(s.tokens, ",")}, "fetch", "-i", s.writeURLs(b, dir, f.n()),
		"-o", out, "--db", filepath.Join(dir, "rk.db"), "--provider", "github="+s.URL, "--progress", "off")
	if err := p.wait(b, 2*time.Minute); err != nil {
		b.Fatalf("fetch: %v\n%s", err, p.out())
	}
	if got := len(outputRecords(b, out)); got != f.n() {
		b.Fatalf("%d URLs written, want %d", got, f.n())
	}
}

func fitThroughLibrary(b *testing.B, s *fitSim, f fitShape) { libraryFetch(b, s, f.n(), fitWorkers) }

// libraryFetch sends the n URLs of s through the library's transport with
// memory state and every token of s, on the given number of goroutines.
func libraryFetch(b *testing.B, s *fitSim, n, workers int) {
	p, err := provider.New("github", provider.GitHub, s.URL)
	if err != nil {
		b.Fatal(err)
	}
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		b.Fatal(err)
	}
	var cs []*creds.Credential
	for i, tok := range s.tokens {
		cs = append(cs, creds.NewToken("github", i+1, tok, "bench"))
	}
	tr, err := transport.New(transport.Options{Providers: reg, Pools: map[string]*creds.Pool{"github": creds.NewPool("github", cs...)},
		Policy: quota.Policy{Kind: quota.Greedy}, MaxWait: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/repos/o/r%03d", s.URL, i), nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Error(err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("status %d", resp.StatusCode)
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
}
