package sim_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// Two tokens of one owner share a bucket; the stats show it.
func Example() {
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{
		Dialect: sim.DialectGitHub,
		Prefix:  "/github",
		Limit:   2, Window: time.Minute,
		Tokens: []sim.TokenConfig{
			{Token: "tok-alice-1", Owner: "alice"},
			{Token: "tok-alice-2", Owner: "alice"},
		},
	}}})
	if err != nil {
		panic(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	base := srv.APIs()[0].URL(ts.URL)

	for _, tok := range []string{"tok-alice-1", "tok-alice-2", "tok-alice-1"} {
		req, _ := http.NewRequest("GET", base+"/repos/octo/hello", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	}
	b, _ := srv.Stats().BucketFor("github", "alice", "core")
	fmt.Println("accepted", b.Accepted, "violations", b.Violations)
	// Output:
	// 200 1
	// 200 0
	// 403 0
	// accepted 2 violations 1
}
