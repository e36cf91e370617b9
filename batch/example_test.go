package batch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/batch"
	"github.com/ratekeeper/ratekeeper/sim"
)

// A batch of GETs and a GraphQL query, eight in flight at most: each
// result comes once to OnResult, which reads the body (the batch closes
// it after).
func Example() {
	// A simulated GitHub on loopback stands in for api.github.com.
	srv, _ := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Limit: 5000, Window: time.Hour,
		Tokens: []sim.TokenConfig{{Token: "tok-example-1", Owner: "octocat"}}}}})
	api := httptest.NewServer(srv)
	defer api.Close()

	rt, err := ratekeeper.NewTransport(ratekeeper.Options{
		Providers: []string{"github=" + api.URL}, // omit for api.github.com
		Tokens:    map[string][]string{"github": {"tok-example-1"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rt.Close()

	var mu sync.Mutex
	var lines []string
	b := batch.New(rt, batch.Options{InFlight: 8, OnResult: func(r batch.Result) {
		line := r.Key + ": "
		if r.Err != nil {
			line += r.Err.Error()
		} else {
			var v struct {
				FullName string `json:"full_name"`
				Data     struct{ Viewer struct{ Login string } }
			}
			json.NewDecoder(r.Response.Body).Decode(&v)
			line += r.Response.Status + " " + v.FullName + v.Data.Viewer.Login
		}
		mu.Lock()
		lines = append(lines, line)
		mu.Unlock()
	}})
	for _, repo := range []string{"golang/go", "golang/tools", "golang/net"} {
		req, _ := http.NewRequest(http.MethodGet, api.URL+"/repos/"+repo, nil)
		b.Add(req, batch.Key(repo))
	}
	req, _ := http.NewRequest(http.MethodPost, api.URL+"/graphql", strings.NewReader(`{"query":"{ viewer { login } }"}`))
	b.Add(req, batch.Key("viewer"), batch.Priority(1))

	if err := b.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	p := b.Progress()
	fmt.Printf("%d done, %d failed, %d waiting\n", p.Done, p.Failed, len(p.Waiting))
	// Output:
	// golang/go: 200 OK golang/go
	// golang/net: 200 OK golang/net
	// golang/tools: 200 OK golang/tools
	// viewer: 200 OK octocat
	// 4 done, 0 failed, 0 waiting
}
