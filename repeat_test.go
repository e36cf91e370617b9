package ratekeeper

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratekeeper/ratekeeper/sim"
)

// repeats is what reading a list of URLs several times cost on the
// simulator: the requests it charged and its free 304s.
type repeats struct {
	charged, notModified int64
}

// readThrice reads urls distinct repositories three times through
// NewClient with 4 tokens of 3 users (alice has two) and 8 workers,
// against a simulated GitHub that computes entity tags as api.github.com
// does (per token). Each round ends before the next starts, so every
// repeat finds the first round's answer stored. With revalidate
// (Options.AlwaysRevalidate) every repeat asks the server; otherwise the
// repeats within the answers' max-age (60 s) are served from the cache.
func readThrice(tb testing.TB, urls int, revalidate bool) repeats {
	tb.Helper()
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Tokens: []sim.TokenConfig{
		{Token: "tok-alice-1", Owner: "alice"}, {Token: "tok-alice-2", Owner: "alice"},
		{Token: "tok-bob-1", Owner: "bob"}, {Token: "tok-carol-1", Owner: "carol"},
	}}}})
	if err != nil {
		tb.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	tr, err := NewTransport(Options{Providers: []string{"github=" + ts.URL},
		Tokens:           map[string][]string{"github": {"tok-alice-1", "tok-alice-2", "tok-bob-1", "tok-carol-1"}},
		AlwaysRevalidate: revalidate})
	if err != nil {
		tb.Fatal(err)
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	for range 3 {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(urls); i = next.Add(1) - 1 {
					resp, err := client.Get(fmt.Sprintf("%s/repos/org%d/repo%d", ts.URL, i%7, i))
					if err != nil {
						tb.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						tb.Errorf("GET repo%d: %d", i, resp.StatusCode)
					}
				}
			})
		}
		wg.Wait()
	}
	st := srv.Stats()
	return repeats{charged: st.Total.Charged, notModified: st.Total.NotModified}
}

// On GitHub an entity tag is specific to the token, so a repeat that goes
// out with another token than the first fetch is free only because the
// client sends the tag GitHub would give that token.
func TestRepeatsAreFreeWithAnyToken(t *testing.T) {
	got := readThrice(t, 60, true)
	if got.charged != 60 || got.notModified != 120 {
		t.Errorf("charged %d with %d 304s, want 60 and 120: every repeat free, whichever token carries it", got.charged, got.notModified)
	}
}

// Within the answers' max-age, repeats do not reach the server at all.
func TestRepeatsWithinMaxAgeAreServedFromTheCache(t *testing.T) {
	got := readThrice(t, 60, false)
	if got.charged != 60 || got.notModified != 0 {
		t.Errorf("charged %d with %d 304s, want 60 and 0: every repeat served from the cache", got.charged, got.notModified)
	}
}

// BenchmarkRepeatsAcrossTokens: 600 URLs read three times through the
// library with 4 tokens of 3 users. A perfect client is charged 600.
//
//	go test -run '^$' -bench RepeatsAcrossTokens -benchtime 1x .
func BenchmarkRepeatsAcrossTokens(b *testing.B) {
	for range b.N {
		got := readThrice(b, 600, true)
		b.ReportMetric(float64(got.charged), "charged")
		b.ReportMetric(float64(got.notModified), "304s")
	}
}
