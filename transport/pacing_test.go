package transport

import (
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
)

// TestProviderPacingIsItsOwn: a provider's configured pacing (here a
// least interval of 2 s) applies to its requests only; another provider
// on the same transport keeps the client's policy (greedy, no spacing).
func TestProviderPacingIsItsOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		withQuota := func() *http.Response {
			h := http.Header{}
			h.Set("X-RateLimit-Limit", "5000")
			h.Set("X-RateLimit-Remaining", "4000")
			h.Set("X-RateLimit-Reset", strconv.FormatInt(start.Add(time.Hour).Unix(), 10))
			return &http.Response{StatusCode: 200, Header: h}
		}
		var answers []func() *http.Response
		for range 8 {
			answers = append(answers, withQuota)
		}
		upstream := &unknownHost{answers: answers}
		slow, err := provider.New("slow", provider.GitHub, "https://slow.example.test")
		if err != nil {
			t.Fatal(err)
		}
		slow.Limits.MinInterval = 2 * time.Second
		fast, err := provider.New("fast", provider.GitHub, "https://fast.example.test")
		if err != nil {
			t.Fatal(err)
		}
		reg := provider.NewRegistry()
		for _, p := range []*provider.Provider{slow, fast} {
			if err := reg.Add(p); err != nil {
				t.Fatal(err)
			}
		}
		tr, err := New(Options{Providers: reg, Base: upstream, Policy: quota.Policy{Kind: quota.Greedy}, SkipValidation: true,
			Pools: map[string]*creds.Pool{"slow": creds.NewPool("slow", creds.NewToken("slow", 1, "tok-slow-1", "test")),
				"fast": creds.NewPool("fast", creds.NewToken("fast", 1, "tok-fast-1", "test"))}})
		if err != nil {
			t.Fatal(err)
		}
		send := func(base string) time.Duration {
			t.Helper()
			began := time.Now()
			for i := range 4 {
				req, _ := http.NewRequest("GET", base+"/repos/o/r"+strconv.Itoa(i), nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			return time.Since(began)
		}
		if took := send("https://fast.example.test"); took != 0 {
			t.Errorf("4 requests to the greedy provider took %v, want no spacing", took)
		}
		// The first tells the bucket; the other three are spaced 2s.
		if took := send("https://slow.example.test"); took < 4*time.Second {
			t.Errorf("4 requests to the provider with a 2s least interval took %v", took)
		}
	})
}
