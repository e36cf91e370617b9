package ratekeeper_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/sim"
)

// go-github takes an *http.Client: give it ratekeeper's, and every call is
// paced across the tokens, retried when safe, and free when repeated.
func Example_goGitHub() {
	// A simulated GitHub stands in for api.github.com here.
	srv, _ := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: 100, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-example-1", Owner: "octocat"}}}}})
	ts := httptest.NewServer(srv)
	defer ts.Close()

	client := ratekeeper.NewClient(ratekeeper.Options{
		Providers: []string{"github=" + ts.URL}, // omit for api.github.com
		Tokens:    map[string][]string{"github": {"tok-example-1"}},
		Policy:    "greedy",
	})
	gh := github.NewClient(client)
	gh.BaseURL, _ = url.Parse(ts.URL + "/")

	for i := 0; i < 3; i++ {
		repo, resp, err := gh.Repositories.Get(context.Background(), "golang", "go")
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(repo.GetFullName(), resp.Header.Get("X-Ratekeeper-Cache"))
	}
	// Output:
	// golang/go miss
	// golang/go revalidated
	// golang/go revalidated
}
