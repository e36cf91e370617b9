package ratekeeper_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
	// golang/go fresh
	// golang/go fresh
}

// simulatedGitHub starts a simulated GitHub on loopback whose one token
// may make limit requests an hour; it stands in for api.github.com.
func simulatedGitHub(limit int64) *httptest.Server {
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: limit, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-example-1", Owner: "octocat"}}}}})
	if err != nil {
		panic(err)
	}
	return httptest.NewServer(srv)
}

// A client for any code that sends HTTP requests: the second GET of a URL
// is answered from the cache while the answer is fresh (GitHub says
// max-age=60), and then with a conditional request, which GitHub answers
// with a free 304.
func ExampleNewClient() {
	api := simulatedGitHub(100)
	defer api.Close()

	client := ratekeeper.NewClient(ratekeeper.Options{
		Providers: []string{"github=" + api.URL},                    // omit for api.github.com
		Tokens:    map[string][]string{"github": {"tok-example-1"}}, // omit to read GITHUB_TOKEN
	})
	for i := 0; i < 2; i++ {
		resp, err := client.Get(api.URL + "/repos/golang/go")
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.Status, "cache:", resp.Header.Get("X-Ratekeeper-Cache"))
	}
	// Output:
	// 200 OK cache: miss
	// 200 OK cache: fresh
}

// NewTransport reports a bad configuration at once, where NewClient would
// return it from every request.
func ExampleNewTransport() {
	_, err := ratekeeper.NewTransport(ratekeeper.Options{Policy: "fastest"})
	fmt.Println(err)

	api := simulatedGitHub(100)
	defer api.Close()
	t, err := ratekeeper.NewTransport(ratekeeper.Options{
		Providers: []string{"github=" + api.URL},
		Tokens:    map[string][]string{"github": {"tok-example-1"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close() // releases Options.DB, when one is given
	client := &http.Client{Transport: t}
	resp, err := client.Get(api.URL + "/repos/golang/go")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status, "via", resp.Header.Get("X-Ratekeeper-Credential"))
	// Output:
	// policy: unknown policy "fastest": want spread, adaptive or greedy
	// 200 OK via #1 …e-1
}

// A gateway serves the client to programs in any language: /github/...
// goes to the GitHub provider with the gateway's tokens.
func ExampleNewGateway() {
	api := simulatedGitHub(100)
	defer api.Close()

	gw, err := ratekeeper.NewGateway(ratekeeper.GatewayOptions{Client: ratekeeper.Options{
		Providers: []string{"github=" + api.URL},
		Tokens:    map[string][]string{"github": {"tok-example-1"}},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer gw.Close()
	srv := httptest.NewServer(gw) // or gw.Serve(ctx, listener)
	defer srv.Close()

	for i := 0; i < 2; i++ {
		resp, err := http.Get(srv.URL + "/github/repos/golang/go")
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.Status, "cache:", resp.Header.Get("X-Ratekeeper-Cache"))
	}
	// Output:
	// 200 OK cache: miss
	// 200 OK cache: fresh
}

// A request whose quota returns later than MaxWait fails at once with a
// *WaitError saying when; a job can be scheduled for then instead of
// blocking (package tasks does it by itself).
func ExampleWaitError() {
	api := simulatedGitHub(1) // one request an hour
	defer api.Close()

	client := ratekeeper.NewClient(ratekeeper.Options{
		Providers: []string{"github=" + api.URL},
		Tokens:    map[string][]string{"github": {"tok-example-1"}},
		MaxWait:   time.Minute,
	})
	for _, repo := range []string{"golang/go", "golang/tools"} {
		resp, err := client.Get(api.URL + "/repos/" + repo)
		var wait *ratekeeper.WaitError
		switch {
		case errors.As(err, &wait):
			fmt.Printf("%s: %s %s quota returns in about %s\n", repo, wait.Provider, wait.Resource, time.Until(wait.RetryAt()).Round(time.Hour))
		case err != nil:
			fmt.Println(err)
		default:
			resp.Body.Close()
			fmt.Println(repo+":", resp.Status)
		}
	}
	// Output:
	// golang/go: 200 OK
	// golang/tools: github core quota returns in about 1h0m0s
}
