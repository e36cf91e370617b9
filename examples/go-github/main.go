// Command go-github reads repositories through go-github with ratekeeper's
// client: every call is paced across the tokens in GITHUB_TOKEN, retried
// when safe, and free when repeated (a conditional request GitHub answers
// 304 without charging it).
//
//	GITHUB_TOKEN=ghp_a,ghp_b go run ./examples/go-github golang/go golang/tools
//
// -api points it at another GitHub API, such as `ratekeeper sim`:
//
//	ratekeeper sim --listen 127.0.0.1:8081 --tokens 2 &
//	GITHUB_TOKEN=sim-token-1,sim-token-2 go run ./examples/go-github -api http://127.0.0.1:8081 golang/go
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/ratekeeper/ratekeeper"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "go-github:", err)
		os.Exit(1)
	}
}

func run() error {
	api := flag.String("api", "https://api.github.com", "GitHub API root")
	rounds := flag.Int("rounds", 2, "how many times each repository is read")
	flag.Parse()
	repos := flag.Args()
	if len(repos) == 0 {
		repos = []string{"golang/go", "golang/tools"}
	}

	opts := ratekeeper.Options{MaxWait: time.Minute}
	if *api != "https://api.github.com" {
		opts.Providers = []string{"github=" + *api} // GITHUB_TOKEN's tokens go to this root
	}
	// NewTransport reports a bad configuration at once (NewClient would
	// report it on every request); Close releases a database in opts.DB.
	transport, err := ratekeeper.NewTransport(opts)
	if err != nil {
		return err
	}
	defer transport.Close()
	gh := github.NewClient(&http.Client{Transport: transport})
	if *api != "https://api.github.com" {
		if gh.BaseURL, err = url.Parse(strings.TrimSuffix(*api, "/") + "/"); err != nil {
			return err
		}
	}

	ctx := context.Background()
	for round := 1; round <= *rounds; round++ {
		for _, full := range repos {
			owner, name, ok := strings.Cut(full, "/")
			if !ok {
				return fmt.Errorf("%q: want OWNER/REPO", full)
			}
			repo, resp, err := gh.Repositories.Get(ctx, owner, name)
			var wait *ratekeeper.WaitError
			if errors.As(err, &wait) {
				return fmt.Errorf("quota for %s returns at %s; run again then", full, wait.RetryAt().Format(time.RFC3339))
			}
			if err != nil {
				return err
			}
			// X-Ratekeeper-Cache: miss (a full answer), fresh (the
			// stored answer, within GitHub's max-age=60: no request),
			// revalidated (a free 304, served from the stored answer)
			// or none.
			fmt.Printf("round %d: %s, %d stars, cache %s\n", round, repo.GetFullName(), repo.GetStargazersCount(), resp.Header.Get("X-Ratekeeper-Cache"))
		}
	}
	return nil
}
